"""The dataset cache on a Redis Cluster (`redis+cluster://host:port[,host:port...]`): blobs spread over every
slot by their digest, metadata in the one slot of keys.CLUSTER_TAG, reads grouped per node and pipelined to
all nodes at once, MOVED/ASK redirects and failovers followed, a failed node's keys read from the origin."""

from __future__ import annotations

import binascii
import threading
import time
from collections import deque
from collections.abc import Callable

import hiredis
import redis
from redis.commands.core import Script
from redis.crc import key_slot

from alnair.abi import cache_urls

from .resp_client import ReplyError, RespClient, RespConnection, encode

SLOTS = 16384
UNAVAILABLE = object()  # in a value's place: its node failed, was down or refused; read it from the origin
REDIRECTS = 3  # hops one key may take (MOVED then ASK during a migration is two)
Node = cache_urls.Node


class NodeUnavailable(redis.ConnectionError):
    """One node failed: its keys come from the origin while the others' still come from the cache."""


class NodeDown(NodeUnavailable):
    """A node not asked: it failed less than retry_seconds ago (that failure was counted), or no node serves
    the slot."""


def slot_of(name: str) -> int:
    return key_slot(name.encode())


def slot_of_key(key: bytes) -> int:
    """The slot of an encoded key: CRC16 of the whole key when it has no hash tag (a blob's), else Redis's rule."""
    return key_slot(key) if b"{" in key else binascii.crc_hqx(key, 0) & (SLOTS - 1)


def redirect(error: ReplyError) -> tuple[str, int, Node] | None:
    """("MOVED" or "ASK", slot, node) of a redirect reply; None for any other error."""
    kind, _, rest = error.text.partition(" ")
    slot, _, address = rest.partition(" ")
    if kind not in ("MOVED", "ASK") or not slot.isdigit():
        return None
    host, _, port = address.rpartition(":")
    return kind, int(slot), (host, int(port))


def cluster_slots(connection: RespConnection, seen_as: Node) -> list[Node | None]:
    """The owner of every slot by CLUSTER SLOTS (a node that does not know its own address says "")."""
    reader = hiredis.Reader()
    connection.sock.sendall(encode("CLUSTER", "SLOTS"))
    reply = False
    while reply is False:
        data = connection.sock.recv(1 << 16)
        if not data:
            raise ConnectionResetError("Redis closed the connection")
        reader.feed(data)
        try:
            reply = reader.gets()
        except hiredis.ProtocolError as e:  # something else listens there (an HTTP proxy, say): that node failed
            raise redis.ConnectionError(f"not a Redis reply from {seen_as}: {e}") from None
    if isinstance(reply, hiredis.ReplyError):
        raise redis.ResponseError(str(reply))
    owners: list[Node | None] = [None] * SLOTS
    for start, end, primary, *_ in reply:
        node = (primary[0].decode() or seen_as[0], int(primary[1]))
        owners[start : end + 1] = [node] * (end - start + 1)
    return owners


class Cluster:
    """The slot map, a connection pool per node, and which nodes are down (not asked for `retry_seconds`;
    when that ends the map is read again first: a replica may have been promoted meanwhile)."""

    def __init__(self, url: str, timeout: float, retry_seconds: float):
        parsed = cache_urls.parse_cluster(url)
        self.seeds, self._params = parsed.seeds, {"username": parsed.username, "password": parsed.password}
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self._lock = threading.Lock()
        self._owners: list[Node | None] = [None] * SLOTS
        self._pools: dict[Node, RespClient] = {}
        self._down_until: dict[Node, float] = {}
        self._mapped_at = float("-inf")

    def owner(self, slot: int) -> Node | None:
        """The node to ask for `slot`, or None while it is down (or no node serves it)."""
        node = self._owners[slot]
        if node is None or not self._up(node):
            if self._remap_due():
                self.refresh()
            node = self._owners[slot]
        return node if node is not None and self._up(node) else None

    def _up(self, node: Node) -> bool:
        return time.monotonic() >= self._down_until.get(node, float("-inf"))

    def grouped(self, keys: list[bytes]) -> dict[Node | None, list[int]]:
        """The positions of `keys` by the node to ask (None: down, or no node serves the slot). Each node's
        state is checked once, not once per key; the map is read again first when one is down and it is due."""
        groups = self._grouped(keys)
        if any(node is None or not self._up(node) for node in groups) and self._remap_due():
            self.refresh()
            groups = self._grouped(keys)
        unavailable = [
            position for node in [n for n in groups if n is None or not self._up(n)] for position in groups.pop(node)
        ]
        if unavailable:
            groups[None] = sorted(unavailable)
        return groups

    def _grouped(self, keys: list[bytes]) -> dict[Node | None, list[int]]:
        owners, groups = self._owners, {}
        for position, key in enumerate(keys):
            node = owners[slot_of_key(key)]
            group = groups.get(node)
            if group is None:
                groups[node] = [position]
            else:
                group.append(position)
        return groups

    def _remap_due(self) -> bool:
        """At most one map read per retry interval while something is down or uncovered."""
        return time.monotonic() >= self._mapped_at + self.retry_seconds

    def refresh(self) -> None:
        """Reads the slot map from the first node that answers (nodes up first, then the seeds)."""
        with self._lock:
            self._mapped_at = time.monotonic()
            known = list(dict.fromkeys(n for n in self._owners if n is not None))
            candidates = list(dict.fromkeys([*filter(self._up, known), *self.seeds, *known]))
        for node in candidates:
            try:
                connection = RespConnection(self._node_params(node), self.timeout)
            except OSError:
                continue
            try:
                owners = cluster_slots(connection, node)
            except (OSError, redis.RedisError):
                continue
            finally:
                connection.close()
            with self._lock:
                self._owners = owners
            return

    def moved(self, slot: int, node: Node) -> None:
        self._owners[slot] = node  # one slot's owner, as MOVED says: no map read per redirect

    def failed(self, node: Node) -> None:
        with self._lock:
            self._down_until[node] = time.monotonic() + self.retry_seconds
            pool = self._pools.get(node)
        if pool is not None:
            pool.close()

    def pool(self, node: Node) -> RespClient:
        with self._lock:
            pool = self._pools.get(node)
            if pool is None:
                pool = self._pools[node] = RespClient(self._node_params(node), self.timeout, None)
            return pool

    def _node_params(self, node: Node) -> dict:
        return {"host": node[0], "port": node[1], **{k: v for k, v in self._params.items() if v}}

    def call(self, name: str, send: Callable[[RespConnection], None], read: Callable[[RespConnection], object]):
        """A command on `name`'s node on a connection of its own, following redirects; raises
        NodeUnavailable when the node does not answer (and marks it down)."""
        slot, asking = slot_of(name), None
        for _ in range(REDIRECTS):
            node = asking or self.owner(slot)
            if node is None:
                raise NodeDown(f"no Redis Cluster node up serves slot {slot}")
            pool = self.pool(node)
            try:
                connection = pool.take()
                try:
                    with pool.dropped_on_failure(connection):
                        if asking:
                            connection.command("ASKING")
                        send(connection)
                        reply = read(connection)
                except redis.ResponseError as e:
                    pool.give(connection)
                    reply = ReplyError(str(e))
                else:
                    pool.give(connection)
            except (redis.ConnectionError, redis.TimeoutError) as e:
                self.failed(node)
                raise NodeUnavailable(f"Redis Cluster node {node[0]}:{node[1]}: {e}") from e
            if not isinstance(reply, ReplyError) or (moved := redirect(reply)) is None:
                return reply
            kind, slot, target = moved
            asking = target if kind == "ASK" else None
            if kind == "MOVED":
                self.moved(slot, target)
        return ReplyError(f"TRYAGAIN more than {REDIRECTS} redirects for slot {slot}")

    def get(self, name: str):
        """One value by a GET of its own (a redirected read); UNAVAILABLE where it cannot be had."""
        try:
            value = self.call(name, lambda c: c.send_gets([name.encode()]), lambda c: c.read_gets(1)[0])
        except NodeUnavailable:
            return UNAVAILABLE
        return UNAVAILABLE if isinstance(value, ReplyError) else value

    def script(self, script: Script, keys: list[str], args: list, array: bool = False):
        """A script on its keys' slot (one slot: the metadata's); an error reply raises redis.ResponseError."""
        reply = self.call(keys[0], lambda c: None, lambda c: self._run(c, script, keys, args, array))
        if isinstance(reply, ReplyError):
            raise redis.ResponseError(reply.text)
        return reply

    @staticmethod
    def _run(connection: RespConnection, script: Script, keys: list[str], args: list, array: bool):
        """EVAL, never EVALSHA: a replica just promoted (or a node just asked with ASKING, which holds for one
        command only) may not hold the script, and a second command would cost a round trip or the ASKING."""
        try:
            return connection.run_script(script, keys, args, array, by_sha=False)
        except redis.ResponseError as e:
            return ReplyError(str(e))  # a redirect, for `call` to follow

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()


class ClusterReads:
    """GETs of blobs grouped by node, each node's sent on one connection of this reader before any reply
    is read, so every node builds its replies at once; up to a few batches ahead, like MgetPipeline.
    `receive` gives a value, None (absent) or UNAVAILABLE per name, in order; a failure is reported to
    `on_error` and costs only that node's values, of this batch and of those sent after it."""

    def __init__(self, cluster: Cluster, on_error: Callable[[redis.RedisError], None]):
        self._cluster = cluster
        self._on_error = on_error
        self._connections: dict[Node, RespConnection] = {}
        self._owed: dict[Node, int] = {}
        self._sent: deque[tuple[list[str], list[tuple[Node | None, RespConnection | None, list[int]]]]] = deque()

    def send(self, names: list[str]) -> None:
        keys = [name.encode() for name in names]
        plan = []
        for node, positions in self._cluster.grouped(keys).items():
            connection = self._send(node, [keys[p] for p in positions]) if node else None
            plan.append((node, connection, positions))
        self._sent.append((names, plan))

    def _send(self, node: Node, keys: list[bytes]) -> RespConnection | None:
        try:
            connection = self._connections.get(node) or self._cluster.pool(node).take()
            connection.send_gets(keys)
        except (OSError, redis.RedisError) as e:
            self._failed(node, e)
            return None
        self._connections[node] = connection
        self._owed[node] = self._owed.get(node, 0) + 1
        return connection

    def receive(self) -> list:
        names, plan = self._sent.popleft()
        values: list = [UNAVAILABLE] * len(names)
        for node, connection, positions in plan:
            if connection is None or self._connections.get(node) is not connection:
                continue  # never sent, or lost with the connection when an earlier reply failed
            try:
                replies = connection.read_gets(len(positions))
            except (OSError, redis.RedisError) as e:
                self._failed(node, e)
                continue
            self._owed[node] -= 1
            for position, reply in zip(positions, replies):
                values[position] = self._redirected(names[position], reply) if isinstance(reply, ReplyError) else reply
        return values

    def _redirected(self, name: str, error: ReplyError):
        """A value whose node answered MOVED or ASK (a slot moved or moving), by a GET of its own;
        any other error (CLUSTERDOWN, LOADING) makes it UNAVAILABLE."""
        moved = redirect(error)
        if moved is None:
            self._on_error(redis.ResponseError(error.text))
            return UNAVAILABLE
        if moved[0] == "MOVED":
            self._cluster.moved(moved[1], moved[2])
        return self._cluster.get(name)

    def _failed(self, node: Node, error: BaseException) -> None:
        connection = self._connections.pop(node, None)
        self._owed.pop(node, None)
        if connection is not None:
            connection.close()
        self._cluster.failed(node)
        self._on_error(NodeUnavailable(f"Redis Cluster node {node[0]}:{node[1]}: {error}"))

    def close(self) -> None:
        """Gives back each connection that owes no reply; closes the others (what they owe is unwanted)."""
        for node, connection in self._connections.items():
            if self._owed.get(node):
                connection.close()
            else:
                self._cluster.pool(node).give(connection)
        self._connections, self._owed = {}, {}
        self._sent.clear()


def blob_commands(cluster: Cluster, commands: list[tuple]) -> int:
    """Commands on one blob key each (DEL, SET: the key second), grouped per node and sent to every node before any
    reply is read, each node's in the order given; returns how many failed (refused, or their node did not answer)."""
    groups = cluster.grouped([command[1].encode() for command in commands])
    failed, sent = len(groups.pop(None, [])), []
    for node, positions in groups.items():
        group = [commands[p] for p in positions]
        pool = cluster.pool(node)
        try:
            connection = pool.take()
            connection.send(group)
        except (OSError, redis.RedisError):
            cluster.failed(node)
            failed += len(group)
            continue
        sent.append((node, pool, connection, group))
    for node, pool, connection, group in sent:
        failed += _replies(cluster, node, pool, connection, group)
    return failed


def _replies(cluster: Cluster, node: Node, pool: RespClient, connection: RespConnection, commands: list[tuple]) -> int:
    try:
        replies = connection.read_lines(len(commands))
    except OSError:
        connection.close()
        cluster.failed(node)
        return len(commands)
    pool.give(connection)
    return sum(
        not _redirected_command(cluster, command, reply)
        for command, reply in zip(commands, replies)
        if isinstance(reply, ReplyError)
    )


def _redirected_command(cluster: Cluster, command: tuple, error: ReplyError) -> bool:
    """A command its node redirected, sent where it said; whether it succeeded."""
    if redirect(error) is None:
        return False  # refused (OOM under noeviction, say)
    try:
        reply = cluster.call(command[1], lambda c: c.send([command]), lambda c: c.read_lines(1)[0])
    except NodeUnavailable:
        return False
    return not isinstance(reply, ReplyError)
