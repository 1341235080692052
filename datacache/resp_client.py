"""The cache's commands on every batch, in RESP on sockets of its own: MGET, whose replies are read straight
off the socket, each large value received into its own bytes object (one copy out of the kernel, where
redis-py with hiredis copies it three times: socket buffer, reader, bytes), and the counters' script."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import hiredis
import redis
from redis.commands.core import Script
from redis.connection import SSLConnection, parse_url

T = TypeVar("T")
PEEK_SIZE = 64 << 10  # reply headers and small values are parsed from a peek of this many bytes
HEADER_PEEK = (
    64  # after a value of PEEK_SIZE or more, the next peek reads only this far: a header, not 64 KB of the next value
)
LINE_PEEK = 512  # a line (a reply's header, +OK, an error) is looked for this far at a time
GET = b"*2\r\n$3\r\nGET\r\n$%d\r\n%b\r\n"  # a GET in RESP, formatted in place: a third of pack_command's cost


def encode(*args: bytes | str | int) -> bytes:
    """A command in RESP (hiredis, which redis[hiredis] installs, packs it in C)."""
    return hiredis.pack_command(args)


class ReplyError:
    """An error reply read in a value's place (a cluster node's `MOVED 3999 127.0.0.1:6381`, say)."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"ReplyError({self.text!r})"


def expect_crlf(data: bytes) -> None:
    if data != b"\r\n":
        raise redis.InvalidResponse("a bulk string without its CRLF")


class RespConnection:
    """One blocking socket (TCP or Unix) whose reads the kernel times out (SO_RCVTIMEO), so a value is
    received whole with MSG_WAITALL in one call; reply headers are found with MSG_PEEK, never over-read.
    Raises OSError when the socket fails or times out (BlockingIOError), redis-py's errors otherwise."""

    def __init__(self, params: dict, timeout: float):
        self.timeout = timeout
        self.peek_size = (
            PEEK_SIZE  # MSG_PEEK copies what it returns: HEADER_PEEK after a large value, until a small one
        )
        self.sock = self._connected(params, timeout)
        try:
            self.sock.settimeout(None)
            limit = struct.pack("ll", int(timeout), int(timeout % 1 * 1e6))
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, limit)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, limit)
            if params.get("password"):
                self.command("AUTH", *filter(None, [params.get("username"), params["password"]]))
            if params.get("db"):
                self.command("SELECT", params["db"])
        except BaseException:
            self.sock.close()
            raise

    @staticmethod
    def _connected(params: dict, timeout: float) -> socket.socket:
        if "path" not in params:
            sock = socket.create_connection((params.get("host", "localhost"), params.get("port", 6379)), timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.settimeout(timeout)
            sock.connect(params["path"])
        except BaseException:
            sock.close()
            raise
        return sock

    def command(self, *args) -> bytes:
        """A command whose reply is one line (+OK, :0, -ERR ...)."""
        self.sock.sendall(encode(*args))
        return self._line()

    def run_script(
        self, script: Script, keys: list[str], args: list, array: bool = False, by_sha: bool = True
    ) -> bytes | list:
        """EVALSHA, or EVAL where the server does not hold the script yet (or at once, without `by_sha`);
        its reply is one line, or with `array` an array of bulk strings."""
        for command, body in (("EVALSHA", script.sha), ("EVAL", script.script))[0 if by_sha else 1 :]:
            self.sock.sendall(encode(command, body, len(keys), *keys, *args))
            try:
                return self.read_array() if array else self._line()
            except redis.ResponseError as e:
                if command == "EVAL" or not str(e).startswith("NOSCRIPT"):
                    raise

    def send(self, commands: list[tuple]) -> None:
        """Commands in one write, their replies read later (read_lines)."""
        self.sock.sendall(b"".join(encode(*command) for command in commands))

    def read_lines(self, count: int) -> list[bytes | ReplyError]:
        """The replies of `count` commands each answered in one line (+OK, :1), an error reply in place."""
        replies: list[bytes | ReplyError] = []
        for _ in range(count):
            try:
                replies.append(self._line())
            except redis.ResponseError as e:
                replies.append(ReplyError(str(e)))
        return replies

    def read_array(self) -> list[bytes | None | ReplyError]:
        """An array of bulk strings (MGET's, or a script's)."""
        header = self._line()
        if not header.startswith(b"*"):
            raise redis.InvalidResponse(f"unexpected reply {header[:80]!r}, not an array")
        return self._read_values(int(header[1:]))

    def mget(self, names: list[str]) -> list[bytes | None]:
        self.send_mget(names)
        return self.read_mget()

    def send_mget(self, names: list[str]) -> None:
        self.sock.sendall(encode("MGET", *names))

    def read_mget(self) -> list[bytes | None]:
        """The reply to the oldest MGET sent and not yet read."""
        return self.read_array()

    def send_gets(self, keys: list[bytes]) -> None:
        """A GET per (encoded) key in one write: a cluster node answers no MGET whose keys span slots."""
        self.sock.sendall(b"".join([GET % (len(key), key) for key in keys]))

    def read_gets(self, count: int) -> list[bytes | None | ReplyError]:
        """The replies to the oldest `count` GETs sent and not yet read; an error reply (MOVED, ASK...) in place."""
        return self._read_values(count)

    def _read_values(self, count: int) -> list[bytes | None | ReplyError]:
        values, crlf_due = [], False
        while len(values) < count:
            crlf_due = self._values(values, count, crlf_due)
        if crlf_due:
            expect_crlf(self._recv_exactly(2))
        return values

    def _values(self, values: list[bytes | None], count: int, crlf_due: bool) -> bool:
        """Appends the values that follow: those complete in one peek are sliced from it; a larger one is
        received into its own bytes. Returns whether that one's CRLF is still unread (it is taken with
        the next peek: a system call less per value)."""
        peeked = self._recv(self.peek_size, socket.MSG_PEEK)
        position, appended = 0, len(values)
        if crlf_due:
            if len(peeked) < 2:
                expect_crlf(self._recv_exactly(2))
                return False
            expect_crlf(peeked[:2])
            position = 2
        while len(values) < count:
            end = peeked.find(b"\r\n", position)
            if end < 0:
                break
            header, start = peeked[position:end], end + 2
            if header.startswith(b"-"):  # a GET's own error (never inside an MGET's array)
                values.append(ReplyError(header[1:].decode(errors="replace")))
                position = start
                continue
            size = self._size(header)
            if size < 0:
                values.append(None)
                position = start
            elif start + size + 2 <= len(peeked):
                expect_crlf(peeked[start + size : start + size + 2])
                values.append(peeked[start : start + size])
                position = start + size + 2
                self.peek_size = PEEK_SIZE  # small values: the next ones are likely small too
            else:  # a large value: take the peek through its header, then the value
                self._recv_exactly(start)
                values.append(self._recv_exactly(size))
                self.peek_size = HEADER_PEEK if size >= PEEK_SIZE else PEEK_SIZE
                return True
        if position:
            self._recv_exactly(position)
        if len(values) == appended < count:  # not even a whole header arrived yet: read it, waiting for the rest
            try:
                values.append(self._element(self._line_rest(peeked[position:])))
            except redis.ResponseError as e:
                values.append(ReplyError(str(e)))
        return False

    @staticmethod
    def _size(header: bytes) -> int:
        """A bulk string's length from its header; -1 for nil."""
        if header == b"_":  # RESP3's nil
            return -1
        if not header.startswith(b"$"):
            raise redis.InvalidResponse(f"unexpected MGET element {header[:80]!r}")
        return int(header[1:])

    def _element(self, header: bytes) -> bytes | None:
        """The value whose header was just read, received whole into its own bytes."""
        size = self._size(header)
        if size < 0:
            return None
        value = self._recv_exactly(size)
        expect_crlf(self._recv_exactly(2))
        return value

    def _line(self) -> bytes:
        """One line, consumed through its CRLF and returned without it."""
        return self._line_rest(b"")

    def _line_rest(self, start: bytes) -> bytes:
        """The line that begins with `start` (peeked, not yet consumed)."""
        line = self._recv_exactly(len(start)) if start else b""
        while True:
            peeked = self._recv(LINE_PEEK, socket.MSG_PEEK)
            end = (line + peeked).find(b"\r\n", max(len(line) - 1, 0))
            if end >= 0:
                self._recv_exactly(end + 2 - len(line))
                line = (line + peeked)[:end]
                if line.startswith(b"-"):
                    raise redis.ResponseError(line[1:].decode(errors="replace"))
                return line
            line += self._recv_exactly(len(peeked))

    def _recv(self, size: int, flags: int = 0) -> bytes:
        data = self.sock.recv(size, flags)
        if not data and size:
            raise ConnectionResetError("Redis closed the connection")
        return data

    def _recv_exactly(self, size: int) -> bytes:
        started = time.monotonic()
        data = self._recv(size, socket.MSG_WAITALL)
        if len(data) == size:
            return data
        parts = [data]  # cut short by a signal, or by the timeout
        while (received := sum(map(len, parts))) < size:
            if time.monotonic() - started >= self.timeout:
                raise TimeoutError("Timeout reading from socket")
            parts.append(self._recv(size - received, socket.MSG_WAITALL))
        return b"".join(parts)

    def close(self) -> None:
        self.sock.close()


def as_redis_error(error: OSError) -> redis.RedisError:
    """A socket's error as redis-py raises it (BlockingIOError: SO_RCVTIMEO or SO_SNDTIMEO expired)."""
    if isinstance(error, (BlockingIOError, TimeoutError)):
        return redis.TimeoutError(f"Redis did not answer in time: {error}")
    return redis.ConnectionError(f"Redis unreachable: {error}")


class MgetPipeline:
    """MGETs on one connection, sent up to a few ahead of reading their replies, which Redis sends in
    order: Redis builds the next batch's reply while this thread receives and checks the last one (on
    2 CPUs one pipelined connection served 1.5x one without: docs/benchmarks.md). A failure raises once;
    the replies still owed on that connection are lost with it: `receive` then returns None for each.
    TLS connections (redis-py's) are not pipelined: `send` keeps the names, `receive` asks."""

    def __init__(self, client: RespClient):
        self._client = client
        self._connection: RespConnection | None = None
        self._unsent: deque[list[str]] = deque()  # TLS: asked at `receive`
        self._owed = 0  # replies sent for and not read
        self._lost = 0  # replies owed by a connection that failed

    def send(self, names: list[str]) -> None:
        if not self._client.direct:
            self._unsent.append(names)
            return
        if self._connection is None:
            self._connection = self._client.take()
        self._guarded(self._connection.send_mget, names)
        self._owed += 1

    def receive(self) -> list[bytes | None] | None:
        if not self._client.direct:
            return self._client.mget(self._unsent.popleft())
        if self._lost:
            self._lost -= 1
            return None
        self._owed -= 1
        return self._guarded(self._connection.read_mget)

    def _guarded(self, operation: Callable[..., T], *args) -> T:
        try:
            with self._client.dropped_on_failure(self._connection):
                return operation(*args)
        except redis.ResponseError:
            raise
        except BaseException:
            self._lost, self._owed, self._connection = self._owed, 0, None  # owed: besides the failed one
            raise

    def close(self) -> None:
        """Gives the connection back if no reply is owed on it; else closes it (what is owed is unwanted)."""
        if self._connection is not None:
            if self._owed:
                self._connection.close()
            else:
                self._client.give(self._connection)
        self._connection, self._owed, self._lost = None, 0, 0
        self._unsent.clear()


class RespClient:
    """Connections of its own, one per concurrent caller, kept for reuse. Errors are redis-py's:
    unreachable or timed out raise redis.ConnectionError / redis.TimeoutError, and every idle connection
    is dropped (the server may have restarted). TLS (rediss://) goes through redis-py."""

    def __init__(self, url: str | dict, timeout: float, client: redis.Redis | None):
        """`url`, or a cluster node's connection parameters (host, port, credentials: plain TCP, no client)."""
        self._params = parse_url(url) if isinstance(url, str) else url
        self._timeout = timeout
        self._client = client
        self.direct = self._params.get("connection_class") is not SSLConnection
        self._lock = threading.Lock()
        self._idle: list[RespConnection] = []

    def mget(self, names: list[str]) -> list[bytes | None]:
        if not self.direct:
            return self._client.mget(names)
        return self._on_connection(lambda connection: connection.mget(names))

    def run_script(self, script: Script, keys: list[str], args: list) -> None:
        """A script whose reply is one line (an integer, say), not wanted."""
        if not self.direct:
            script(keys=keys, args=args, client=self._client)
            return
        self._on_connection(lambda connection: connection.run_script(script, keys, args))

    def pipeline(self) -> MgetPipeline:
        return MgetPipeline(self)

    def _on_connection(self, command: Callable[[RespConnection], T]) -> T:
        connection = self.take()
        try:
            with self.dropped_on_failure(connection):
                result = command(connection)
        except redis.ResponseError:
            self.give(connection)
            raise
        self.give(connection)
        return result

    @contextmanager
    def dropped_on_failure(self, connection: RespConnection) -> Iterator[None]:
        """An error reply (redis.ResponseError) was read whole: the connection is still in step. Any other
        failure closes it and every idle one (the server may have restarted), and raises redis-py's error."""
        try:
            yield
        except redis.ResponseError:
            raise
        except BaseException as e:
            connection.close()
            self.close()
            if isinstance(e, OSError):
                raise as_redis_error(e) from e
            raise

    def take(self) -> RespConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        try:
            return RespConnection(self._params, self._timeout)
        except OSError as e:
            raise as_redis_error(e) from e

    def give(self, connection: RespConnection) -> None:
        with self._lock:
            self._idle.append(connection)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
