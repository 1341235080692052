"""BoundedServer: HTTP/1.1 on aiohttp's low-level server, with connections admitted here.

Connections are accepted on the server's own loop and handed to aiohttp (`loop.connect_accepted_socket`, the
public way), so that before any byte is read this module decides: whether the connection may be open at all
(ConnectionBounds: priority peers are never kept out), which TLS context it gets (the certificate as it is on
disk now), and whether it is plain HTTP sent to a TLS port. aiohttp then parses requests, keeps connections
alive, closes idle ones and answers malformed requests 400. Every limit in time:

- a client gets HANDSHAKE_TIMEOUT for its TLS handshake (its first bytes included);
- `idle_timeout` from its connection or its last reply to send the next request head, so a head that trickles
  in is cut off as an idle connection is (aiohttp's keep-alive timer is not reset by data);
- WRITE_TIMEOUT to take each reply;
- on shutdown, SHUTDOWN_GRACE for the requests being answered (twice, at most: aiohttp waits once for the
  handler, once for the connection's task), while idle connections close at once and no new one is accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
from typing import cast

from aiohttp import HttpVersion10, HttpVersion11, web

from .bounds import ConnectionBounds, Slot
from .listener import listening_socket
from .plain_http import LINGER_SECONDS, refused_plain_http
from .request_log import RequestLog

HANDSHAKE_TIMEOUT = 30.0
WRITE_TIMEOUT = 30.0
SHUTDOWN_GRACE = 1.0
MAX_HEADERS = 100  # as http.client and http.server bound them
ACCEPT_PAUSE = 0.1  # after accept fails for lack of descriptors, so the loop does not spin on the listener
_REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class BoundedServer:
    """Listens at construction; serve_forever() runs the loop until shutdown() (socketserver's interface).
    A subclass answers requests (answer) and may give a TLS context per connection and priority peers."""

    def __init__(self, address: tuple[str, int], log: logging.Logger, idle_timeout: float, max_connections: int):
        self.log = log
        self.idle_timeout = idle_timeout
        self.bounds = ConnectionBounds(max_connections)
        self.socket = listening_socket(address)
        self.server_address = self.socket.getsockname()
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()  # bound to the loop at first use, on serve_forever's thread
        self._stopped = threading.Event()
        self._slots: dict[asyncio.BaseTransport, Slot] = {}  # connections handed to aiohttp
        self._setups: set[asyncio.Task] = set()  # connections not handed over yet (first bytes, handshake)

    async def answer(self, request: web.BaseRequest) -> web.StreamResponse:
        raise NotImplementedError

    def tls_context(self) -> ssl.SSLContext | None:
        """The context to set up a new connection with, None for plain HTTP."""
        return None

    def has_priority(self, client_host: str | None) -> bool:
        return False

    @property
    def open_connections(self) -> int:
        return self.bounds.open_connections()

    def serve_forever(self) -> None:
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """Stops serve_forever (called from another thread) and waits until it has returned."""
        self._loop.call_soon_threadsafe(self._stop.set)
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
        self._loop.close()

    async def send(self, request: web.BaseRequest, response: web.StreamResponse, body: bytes = b"") -> None:
        """Writes the reply unless it is written already; a client that has not taken it within WRITE_TIMEOUT is
        cut off (aiohttp would wait on it without end). A large body goes as a StreamResponse's, given apart: its
        head leaves on prepare and the body as it is, where a Response's head and body are joined into one copy
        first (aiohttp on Pythons before 3.12.9), a copy per reply in flight."""
        if response.prepared:
            return
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                await response.prepare(request)
                if body and request.method != "HEAD":
                    await response.write(body)
                await response.write_eof()
        except TimeoutError:
            self.log.debug("%s took no reply for %g s: closed", request.remote, WRITE_TIMEOUT)
            if request.transport is not None:
                request.transport.abort()
        except ConnectionError:  # the client went away; aiohttp then closes the connection
            pass

    async def _serve(self) -> None:
        http = web.Server(
            self._answer,
            loop=self._loop,
            keepalive_timeout=self.idle_timeout,
            lingering_time=LINGER_SECONDS,
            max_headers=MAX_HEADERS,
            access_log=None,
            auto_decompress=False,  # a body is taken as sent, never inflated
            logger=RequestLog(self.log, {}),
        )
        accepting = self._loop.create_task(self._accept(http))
        try:
            await self._stop.wait()
        finally:
            accepting.cancel()
            for setup in self._setups:
                setup.cancel()
            await asyncio.gather(accepting, *self._setups, return_exceptions=True)
            self.socket.close()  # new connections are refused at once, not left in the backlog
            http.pre_shutdown()  # idle connections close now, busy ones after their reply
            await http.shutdown(SHUTDOWN_GRACE)

    async def _accept(self, http: web.Server) -> None:
        while True:
            try:
                conn, address = await self._loop.sock_accept(self.socket)
            except OSError as e:  # out of descriptors or memory
                self.log.warning("cannot accept a connection: %s", e.strerror or e)
                await asyncio.sleep(ACCEPT_PAUSE)
                continue
            self._admit(http, conn, address[0])

    def _admit(self, http: web.Server, conn: socket.socket, client_host: str) -> None:
        slot, evicted = self.bounds.admit(self.has_priority(client_host))
        if evicted is not None:
            evicted.close()
        if slot is None:
            self._refuse(conn)
            return
        setup = self._loop.create_task(self._open(http, conn, client_host, slot))
        slot.close = setup.cancel
        self._setups.add(setup)
        setup.add_done_callback(lambda _: self._set_up(setup, conn, slot))

    def _set_up(self, setup: asyncio.Task, conn: socket.socket, slot: Slot) -> None:
        """A connection not handed to aiohttp is closed here, even one whose setup was cancelled (its place given
        to a newer one, or the server stopping) before it began."""
        self._setups.discard(setup)
        error = None if setup.cancelled() else setup.exception()
        if error is not None:
            self.log.error("cannot set up a connection", exc_info=error)
        if setup.cancelled() or error is not None or not setup.result():
            conn.close()
            self.bounds.release(slot)

    def _refuse(self, conn: socket.socket) -> None:
        if self.tls_context() is None:  # a TLS client would not understand a plain answer
            with contextlib.suppress(OSError):
                conn.send(_REFUSED)
        conn.close()

    async def _open(self, http: web.Server, conn: socket.socket, client_host: str, slot: Slot) -> bool:
        """Hands the connection to aiohttp, TLS set up first with the context of the moment; False when it ended
        before (a plain HTTP request to the TLS port, a failed handshake, a client gone or silent)."""
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else a small reply waits for a delayed ACK
            context = self.tls_context()
            if context is not None and await refused_plain_http(conn, HANDSHAKE_TIMEOUT):
                return False
            await self._loop.connect_accepted_socket(
                lambda: _Tracked(http(), slot, self),
                conn,
                ssl=context,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT if context else None,
            )
            return True
        except OSError as e:  # ssl.SSLError and TimeoutError are OSErrors
            self.log.debug("connection from %s ended before its first request: %s", client_host, e)
            return False

    def _connected(self, transport: asyncio.Transport, slot: Slot) -> None:
        slot.close = transport.abort
        self._slots[transport] = slot

    def _disconnected(self, transport: asyncio.BaseTransport | None, slot: Slot) -> None:
        if transport is not None:
            self._slots.pop(transport, None)
        self.bounds.release(slot)

    async def _answer(self, request: web.BaseRequest) -> web.StreamResponse:
        """answer()'s reply, sent within WRITE_TIMEOUT; the connection is busy meanwhile, never closed for another.
        An error of the answer's own is a 500 and its traceback in the log, never a connection dropped."""
        slot = self._slots.get(request.transport) if request.transport is not None else None
        with self.bounds.answering(slot) if slot else contextlib.nullcontext():
            try:
                response = await self._answer_known_version(request)
            except Exception:
                self.log.exception("cannot answer %s %s from %s", request.method, request.path, request.remote)
                response = web.Response(status=500, text="Internal Server Error\n")
            await self.send(request, response)
        return response

    async def _answer_known_version(self, request: web.BaseRequest) -> web.StreamResponse:
        """answer()'s reply to HTTP/1.0 and 1.1; aiohttp's parser takes any version on a request line."""
        if request.version in (HttpVersion10, HttpVersion11):
            return await self.answer(request)
        self.log.warning("malformed request from %s: HTTP version %d.%d", request.remote, *request.version)
        response = web.Response(status=505, text="HTTP Version Not Supported\n")
        response.force_close()
        return response


class _Tracked(asyncio.Protocol):
    """aiohttp's protocol for one connection, which the server sees begin (its slot can then close it) and end
    (its slot is free again); every event is passed on unchanged."""

    def __init__(self, inner: asyncio.Protocol, slot: Slot, server: BoundedServer):
        self._inner, self._slot, self._server = inner, slot, server
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        # connect_accepted_socket's transports, plain or TLS, are asyncio.Transports (they can abort)
        self._server._connected(cast(asyncio.Transport, transport), self._slot)
        self._inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server._disconnected(self._transport, self._slot)
        self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()
