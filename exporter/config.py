"""Command-line flags, each also settable as ALNAIR_<FLAG> in the environment; bad input exits 2 with one line."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
from collections.abc import Callable, Iterable
from typing import NoReturn

from alnair import commandline, logs
from alnair.commandline import (
    OneLineParser,
    RepeatedList,
    add_flag,
    comma_separated,
    duration,
    env_default,
    env_name,
    flag_type,
    int_between,
    parse_bool,
)

from .registry import CollectorSpec
from .sampler import UNAVAILABLE_RETRY_SECONDS
from .server import MAX_CONNECTIONS

PROG = "alnair-exporter"
DEFAULT_LISTEN = ":9876"
RESERVED_PATHS = ("/", "/healthz")  # served by the exporter itself (exporter/server.py)


def fail(message: str) -> NoReturn:
    commandline.fail(PROG, message)


def parse_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """10.0.0.7 or 10.0.0.0/24 (host bits must be zero), IPv6 alike."""
    return ipaddress.ip_network(text)


@flag_type
def parse_listen_address(text: str) -> tuple[str, int]:
    """host:port, [v6]:port or :port (all interfaces)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"want host:port, got {text!r}")
    return host.strip("[]"), int(port)


def add_collector_flags(parser: argparse.ArgumentParser, collector: CollectorSpec) -> None:
    flag = f"--collector.{collector.name}"
    dest = f"collector_{collector.name}"
    enabled = env_default(flag, parse_bool, collector.default_enabled)
    group = parser.add_argument_group(f"collector {collector.name}", collector.help)
    group.add_argument(
        flag,
        dest=dest,
        action="store_true",
        default=None,
        help=f"Enable the {collector.name} collector (default: "
        f"{'enabled' if collector.default_enabled else 'disabled'}) [env {env_name(flag)}]",
    )
    group.add_argument(
        f"--no-collector.{collector.name}",
        dest=dest,
        action="store_false",
        help=f"Disable the {collector.name} collector.",
    )
    parser.set_defaults(**{f"default_{dest}": enabled})
    add_flag(
        group,
        f"--collector.{collector.name}.interval",
        type=duration,
        default=collector.default_interval_seconds,
        help="Time between samples (500ms, 2s, 1m...).",
    )
    if collector.add_arguments is not None:
        collector.add_arguments(group)


def build_parser(collectors: Iterable[CollectorSpec]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Alnair: GPU and AI workload metrics for Prometheus.")
    add_flag(
        parser,
        "--web.listen-address",
        type=parse_listen_address,
        default=DEFAULT_LISTEN,
        help="Address to serve /metrics on.",
    )
    add_flag(parser, "--web.config.file", default="", help="exporter-toolkit web config (TLS, basic auth).")
    # A scrape holds a connection, so more slots than connections would never bind.
    add_flag(
        parser,
        "--web.max-requests",
        type=int_between(0, MAX_CONNECTIONS),
        default=40,
        help=f"Concurrent scrapes served at most, 0 to {MAX_CONNECTIONS} (the connections served at once); "
        "0 = no limit.",
    )
    add_flag(
        parser,
        "--web.priority-sources",
        type=comma_separated(parse_network),
        default=[],
        action=RepeatedList,
        help="Addresses or networks (CIDR) whose scrapes --web.max-requests never refuses, with connections of "
        f"their own (up to {MAX_CONNECTIONS}) that no other peer's can keep out: your Prometheus.",
    )
    add_flag(parser, "--web.telemetry-path", default="/metrics", help="Path of the metrics endpoint.")
    add_flag(
        parser,
        "--node.name",
        default=os.environ.get("NODE_NAME") or socket.gethostname(),
        help="Node name (Kubernetes downward API: NODE_NAME).",
    )
    add_flag(
        parser,
        "--path.procfs",
        default="/proc",
        help="procfs mount point (the host's /proc in a DaemonSet); it must have stat with a btime line, and "
        "self/stat or 1/stat.",
    )
    logs.add_flags(parser)
    add_flag(
        parser,
        "--collector.retry-interval",
        type=duration,
        default=UNAVAILABLE_RETRY_SECONDS,
        help="How soon a collector whose source is unavailable (no GPU, no Redis, no API server) is tried again.",
    )
    add_flag(
        parser,
        "--collector.disable-defaults",
        type=flag_type(parse_bool),
        default=False,
        nargs="?",
        const=True,
        help="Disable every collector not enabled by a flag.",
    )
    add_shared_flags(parser, collectors)
    for collector in collectors:
        add_collector_flags(parser, collector)
    return parser


def add_shared_flags(parser: argparse.ArgumentParser, collectors: Iterable[CollectorSpec]) -> None:
    """Flags that several collectors declare alike (the cuda and python collectors' segment directory): once each."""
    users: dict[Callable, list[str]] = {}
    for collector in collectors:
        if collector.shared_arguments is not None:
            users.setdefault(collector.shared_arguments, []).append(collector.name)
    for add, names in users.items():
        add(parser.add_argument_group(f"collectors {', '.join(names)}"))


def is_procfs(path: str) -> bool:
    """Whether `path` has what the collectors read from a procfs: stat's boot time and processes' directories. By
    content, not filesystem type: the host's /proc mounted at /host/proc passes, and tests can use a copy."""
    stat_file = os.path.join(path, "stat")
    has_process = any(os.path.isfile(os.path.join(path, pid, "stat")) for pid in ("self", "1"))  # self: under hidepid
    if not (os.path.isfile(stat_file) and has_process):  # isfile: a FIFO named stat is refused, never waited on
        return False
    try:
        with open(stat_file, "rb") as f:
            return any(line.startswith(b"btime ") for line in f)
    except OSError:
        return False


def enabled_collectors(options: argparse.Namespace, collectors: Iterable[CollectorSpec]) -> list[CollectorSpec]:
    chosen = []
    for collector in collectors:
        explicit = getattr(options, f"collector_{collector.name}")
        default = (
            False if options.collector_disable_defaults else getattr(options, f"default_collector_{collector.name}")
        )
        if default if explicit is None else explicit:
            chosen.append(collector)
    return chosen


def parse_options(argv: list[str] | None, collectors: list[CollectorSpec]) -> argparse.Namespace:
    options = build_parser(collectors).parse_args(argv)
    if not options.web_telemetry_path.startswith("/"):
        fail(f"--web.telemetry-path must start with '/': {options.web_telemetry_path!r}")
    if options.web_telemetry_path.split("?")[0] in RESERVED_PATHS:
        fail(f"--web.telemetry-path {options.web_telemetry_path!r} is the path of another endpoint")
    if not options.node_name.strip():
        fail("--node.name must not be empty (the downward API's spec.nodeName, or the host name)")
    if not is_procfs(options.path_procfs):
        fail(
            f"--path.procfs: not a procfs (no stat with a btime line, or no self/stat or 1/stat): {options.path_procfs}"
        )
    for collector in enabled_collectors(options, collectors):
        problem = collector.check_options(options) if collector.check_options is not None else None
        if problem:
            fail(problem)
    options.procfs = options.path_procfs
    return options
