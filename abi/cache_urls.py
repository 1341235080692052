"""Where the dataset cache lives, as a URL: one Redis (redis://, rediss://, unix://) or a Redis Cluster
(redis+cluster://[user:password@]host:port[,host:port...]). The cache in training jobs (alnair.datacache) and its
reader (the exporter's cache collector) both parse it here, so one accepts exactly the URLs the other does."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

CLUSTER_SCHEME = "redis+cluster"
SCHEMES = ("redis", "rediss", "unix", CLUSTER_SCHEME)
Node = tuple[str, int]


@dataclass(frozen=True)
class ClusterUrl:
    seeds: list[Node]  # the nodes to learn the cluster's layout from
    username: str | None
    password: str | None


def is_cluster(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEME + "://")


def parse_cluster(url: str) -> ClusterUrl:
    """The seeds and credentials of a redis+cluster:// URL (percent-escapes decoded); ValueError if it is not one."""
    parsed = urllib.parse.urlsplit(url)
    credentials, _, hosts = parsed.netloc.rpartition("@")
    user, _, password = credentials.partition(":")
    seeds = []
    for address in filter(None, hosts.split(",")):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or int(port) > 65535:
            raise ValueError(f"a cluster node must be host:port: {address!r} in {url!r}")
        seeds.append((host.strip("[]"), int(port)))
    if parsed.scheme != CLUSTER_SCHEME or not seeds:
        raise ValueError(f"not a Redis Cluster URL ({CLUSTER_SCHEME}://host:port[,host:port...]): {url!r}")
    return ClusterUrl(seeds, urllib.parse.unquote(user) or None, urllib.parse.unquote(password) or None)


def check(url: str) -> str:
    """`url` if it names a cache (one Redis or a cluster); ValueError saying which forms are, otherwise."""
    if is_cluster(url):
        parse_cluster(url)
        return url
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in SCHEMES or not (parsed.netloc or parsed.path):
        raise ValueError(
            f"not a Redis URL (redis://host:port/db, rediss://..., unix:///path, "
            f"{CLUSTER_SCHEME}://host:port[,host:port...]): {url!r}"
        )
    return url


def address(node: Node) -> str:
    """host:port, an IPv6 host in brackets: how Redis names a node."""
    host, port = node
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
