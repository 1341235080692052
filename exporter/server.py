"""The HTTP endpoint: /metrics, /healthz and an index page, with optional TLS, basic auth, a rate limit and
bounds on connections and concurrent scrapes.

One asyncio loop on one thread accepts, reads and answers every connection, so a refusal (503, 429, 401)
costs a few Python lines and no thread: a flood of anonymous clients cannot take the CPU from admitted
scrapes through thread switching. Renders and bcrypt checks run on small thread pools off the loop.
"""
from __future__ import annotations

import asyncio
import contextlib
import html
import ipaddress
import logging
import socket
import ssl
import threading
from asyncio import sslproto
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from typing import Sequence, Union

from alnair.commandline import version

from . import http1
from .sampler import CollectorRunner
from .scrape import CONTENT_TYPE, ScrapeAssembler
from .web_tls import PLAIN_HTTP_REFUSAL, is_plain_http, refusal_after_handshake
from .webconfig import BCRYPT_PARALLEL, LiveWebConfig, WebConfig

log = logging.getLogger(__name__)
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
READ_TIMEOUT = 30.0  # a client gets this long for its TLS handshake, for each request head and to take each reply
MAX_CONNECTIONS = 256  # connections served at once; more are answered 503 and closed
LISTEN_BACKLOG = 256  # connections the kernel holds before accept: a burst of new scrapers is never dropped
RENDER_WORKERS = 4  # threads that render scrapes; a render takes about a millisecond from the cached part
ACCEPTS_PER_WAKEUP = 64  # then the loop serves the connections it has before it accepts more
_REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
LINGER_SECONDS, LINGER_BYTES = 0.5, 262144  # what a closing connection still reads from the client, at most
_ACCEPT_PAUSE = 0.1  # after accept fails for lack of descriptors, so the loop does not spin on the listener


def accepts_gzip(accept_encoding: str) -> bool:
    """True if the Accept-Encoding header allows gzip (and does not give it q=0)."""
    for item in accept_encoding.split(","):
        coding, _, params = item.partition(";")
        if coding.strip().lower() != "gzip":
            continue
        weight = params.strip()
        if not weight.startswith("q="):
            return True
        try:
            return float(weight[2:]) > 0
        except ValueError:
            return False
    return False


class ExporterServer:
    """Listens at construction; serve_forever() runs the loop until shutdown() (socketserver's interface)."""

    def __init__(self, address: tuple[str, int], web: WebConfig, assembler: ScrapeAssembler,
                 runners: list[CollectorRunner], known: list[str], metrics_path: str, max_requests: int,
                 max_connections: int = MAX_CONNECTIONS, priority_sources: Sequence[IPNetwork] = ()):
        self.live_web = LiveWebConfig(web)
        self.assembler = assembler
        self.runners = runners
        self.known = known
        self.metrics_path = metrics_path
        self.max_requests = max_requests
        self.max_connections = max_connections
        self.priority_sources = tuple(priority_sources)
        self.open_connections = 0  # changed on the loop's thread only
        self.scrapes_in_flight = 0
        self.socket = _listening_socket(address)
        self.server_address = self.socket.getsockname()
        self._loop = asyncio.new_event_loop()
        self._renderers = ThreadPoolExecutor(RENDER_WORKERS, thread_name_prefix="http-render")
        self._checkers = ThreadPoolExecutor(BCRYPT_PARALLEL, thread_name_prefix="http-auth")
        self._stop = asyncio.Event()  # bound to the loop at first use, on serve_forever's thread
        self._stopped = threading.Event()

    @property
    def web(self) -> WebConfig:
        """The web config now: the file is read again when it, or a certificate it names, changes."""
        return self.live_web.current()

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
        self._renderers.shutdown(wait=False, cancel_futures=True)
        self._checkers.shutdown(wait=False, cancel_futures=True)

    async def _serve(self) -> None:
        connections: set[asyncio.Task] = set()
        self._loop.add_reader(self.socket, self._accept, connections)
        try:
            await self._stop.wait()
        finally:
            self._loop.remove_reader(self.socket)
            for task in connections:
                task.cancel()
            await asyncio.gather(*connections, return_exceptions=True)

    def _accept(self, connections: set[asyncio.Task]) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors or memory: wait, rather than spin on a readable listener
                log.warning("cannot accept a connection: %s", e.strerror or e)
                self._loop.remove_reader(self.socket)
                self._loop.call_later(_ACCEPT_PAUSE, self._loop.add_reader, self.socket, self._accept, connections)
                return
            conn.setblocking(False)
            if self.open_connections >= self.max_connections:
                self._refuse(conn)
                continue
            self.open_connections += 1
            task = self._loop.create_task(self._connection(conn, address[0]))
            connections.add(task)
            task.add_done_callback(connections.discard)

    def _refuse(self, conn: socket.socket) -> None:
        if self.web.ssl_context is None:  # a TLS client would not understand a plain answer
            with contextlib.suppress(OSError):
                conn.send(_REFUSED)
        conn.close()

    async def _connection(self, conn: socket.socket, client_host: str) -> None:
        writer = None
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # else a small reply waits for a delayed ACK
            streams = await self._open(conn)
            if streams is not None:
                writer = streams[1]
                await Exchange(self, client_host, *streams).serve()
                await _close(*streams)
        except (ssl.SSLError, ConnectionError, TimeoutError, asyncio.IncompleteReadError, OSError) as e:
            log.debug("connection from %s ended: %s", client_host, e)
        finally:
            if writer is None:
                conn.close()  # else the transport owns it: closed above, or aborted here
            elif not writer.transport.is_closing() or writer.transport.get_write_buffer_size():
                writer.transport.abort()
            self.open_connections -= 1

    async def _open(self, conn: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The connection's streams, TLS set up with the certificate as it is on disk now; None when it is closed
        unserved (a plain request to the HTTPS port, a refused client certificate, a client that went away)."""
        context = self.web.ssl_context
        if context is not None:
            first = await asyncio.wait_for(self._peek(conn), READ_TIMEOUT)
            if not first:
                return None
            if is_plain_http(first):
                conn.send(PLAIN_HTTP_REFUSAL)
                await self._linger(conn)
                return None
        reader = asyncio.StreamReader(limit=http1.MAX_HEAD_BYTES, loop=self._loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=self._loop)
        if context is None:
            transport, _ = await self._loop.connect_accepted_socket(lambda: protocol, conn)
        else:
            transport = await self._handshake(conn, context, protocol)
        writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
        refused = refusal_after_handshake(transport.get_extra_info("ssl_object")) if context else ""
        if refused:
            log.debug("connection closed: %s", refused)
            transport.abort()
            return None
        return reader, writer

    async def _handshake(self, conn: socket.socket, context: ssl.SSLContext, protocol: asyncio.Protocol) -> asyncio.Transport:
        """TLS over the accepted socket, as loop.start_tls sets it up, with the alert of a failed handshake sent."""
        handshaken = self._loop.create_future()
        tls = _AlertingTLS(self._loop, protocol, context, handshaken, server_side=True, ssl_handshake_timeout=READ_TIMEOUT)
        await self._loop.connect_accepted_socket(lambda: tls, conn)
        await handshaken
        return tls._app_transport

    async def _linger(self, conn: socket.socket) -> None:
        """Ends the sending side and reads what the client still sends before closing, as Go's server does: closing
        over unread bytes would reset the connection and could destroy the reply before the client reads it."""
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)
            await _read_what_is_left(lambda: self._loop.sock_recv(conn, 65536))

    async def _peek(self, conn: socket.socket) -> bytes:
        """The client's first bytes, left in the socket for the TLS handshake."""
        readable = self._loop.create_future()
        self._loop.add_reader(conn, lambda: readable.done() or readable.set_result(None))
        try:
            await readable
        finally:
            self._loop.remove_reader(conn)
        return conn.recv(5, socket.MSG_PEEK)

    def has_priority(self, client_host: str) -> bool:
        """A scrape from --web.priority-sources (Prometheus's own address, say) never waits for a slot."""
        if not self.priority_sources:
            return False
        address = ipaddress.ip_address(client_host.split("%")[0])
        address = getattr(address, "ipv4_mapped", None) or address  # ":port" serves IPv4 as ::ffff:a.b.c.d
        return any(address in network for network in self.priority_sources)

    def unhealthy(self) -> list[str]:
        return [r.name for r in self.runners if r.hung()]

    async def render(self, compress: bool) -> bytes:
        return await self._loop.run_in_executor(self._renderers, self.assembler.render, compress)

    async def check_basic_auth(self, web: WebConfig, authorization: str | None) -> bool:
        known = web.known_verdict(authorization)
        if known is not None:
            return known
        return await self._loop.run_in_executor(self._checkers, web.check_basic_auth, authorization)


class _AlertingTLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol, which closes a failed handshake without the alert OpenSSL wrote for the client;
    sent here, a client offering only TLS 1.1 reads "protocol version" (as Go's server tells it), not an EOF."""

    def _on_handshake_complete(self, handshake_exc):
        if handshake_exc is not None:
            self._process_outgoing()
        super()._on_handshake_complete(handshake_exc)


class Exchange:
    """The requests of one connection, answered in turn."""

    def __init__(self, server: ExporterServer, client_host: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.client_host = client_host
        self.reader, self.writer = reader, writer
        self.priority = server.has_priority(client_host)

    async def serve(self) -> None:
        while True:
            try:
                request = await asyncio.wait_for(http1.read_request(self.reader), READ_TIMEOUT)
            except http1.BadRequest as e:
                log.debug("bad request from %s: %s", self.client_host, e)
                await self._reply(None, e.status, f"{e.status.phrase}: {e}\n".encode(), "text/plain", close=True)
                return
            if request is None:
                return
            await self._answer(request)
            if not request.keep_alive:
                return

    async def _answer(self, request: http1.Request) -> None:
        web = self.server.web  # one config for the whole request, should the file change meanwhile
        if request.method not in ("GET", "HEAD"):
            await self._reply(request, HTTPStatus.METHOD_NOT_ALLOWED, b"Method Not Allowed\n", "text/plain",
                              {"Allow": "GET, HEAD"}, web=web)
        # As the toolkit: rate_limit first, for every path; a priority source is exempt, so a flood cannot use up
        # Prometheus's tokens.
        elif not self.priority and not web.allows_request():
            await self._reply(request, HTTPStatus.TOO_MANY_REQUESTS, b"Too Many Requests\n", "text/plain; charset=utf-8", web=web)
        elif not await self.server.check_basic_auth(web, request.headers.get("authorization")):
            await self._reply(request, HTTPStatus.UNAUTHORIZED, b"Unauthorized\n", "text/plain",
                              {"WWW-Authenticate": 'Basic realm="alnair"'}, web=web)
        elif request.path == self.server.metrics_path:
            await self._metrics(request, web)
        elif request.path == "/healthz":
            hung = self.server.unhealthy()
            if hung:
                await self._reply(request, HTTPStatus.SERVICE_UNAVAILABLE,
                                  f"collectors not sampling: {', '.join(hung)}\n".encode(), "text/plain", web=web)
            else:
                await self._reply(request, HTTPStatus.OK, b"ok\n", "text/plain", web=web)
        elif request.path == "/":
            await self._reply(request, HTTPStatus.OK, index_page(self.server).encode(), "text/html; charset=utf-8", web=web)
        else:
            await self._reply(request, HTTPStatus.NOT_FOUND, b"Not Found\n", "text/plain", web=web)

    async def _metrics(self, request: http1.Request, web: WebConfig) -> None:
        """A scrape holds one of --web.max-requests slots from its render until its reply is handed to the kernel,
        so the bound also bounds the memory of replies in flight; a priority source takes none."""
        server = self.server
        counted = not self.priority and server.max_requests > 0
        if counted and server.scrapes_in_flight >= server.max_requests:
            server.assembler.count_rejected_scrape()
            await self._reply(request, HTTPStatus.SERVICE_UNAVAILABLE, b"Too many concurrent scrapes\n", "text/plain", web=web)
            return
        server.scrapes_in_flight += counted
        try:
            gzipped = accepts_gzip(request.headers.get("accept-encoding", ""))
            body = await server.render(gzipped)
            encoding = {"Content-Encoding": "gzip"} if gzipped else {}
            await self._reply(request, HTTPStatus.OK, body, CONTENT_TYPE, {"Vary": "Accept-Encoding", **encoding}, web=web)
        finally:
            server.scrapes_in_flight -= counted

    async def _reply(self, request: http1.Request | None, status: HTTPStatus, body: bytes, content_type: str,
                     extra: dict[str, str] | None = None, web: WebConfig | None = None, close: bool = False) -> None:
        fields = {"Server": f"alnair-exporter/{version()}", "Content-Type": content_type,
                  "Content-Length": str(len(body)), **(web.headers if web else {}), **(extra or {})}
        close = close or request is None or not request.keep_alive
        self.writer.write(http1.response_head(status, fields, close))
        if request is None or request.method != "HEAD":
            self.writer.write(body)
        await asyncio.wait_for(self.writer.drain(), READ_TIMEOUT)


async def _read_what_is_left(read) -> None:
    """Reads and drops what the client still sends, until it closes, LINGER_BYTES or LINGER_SECONDS."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LINGER_SECONDS):
            total = 0
            while total < LINGER_BYTES and (chunk := await read()):
                total += len(chunk)


async def _close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Closes after what is buffered has gone out, reading what the client still sends meanwhile (see _linger);
    a client that takes READ_TIMEOUT to read the rest is cut off."""
    if writer.can_write_eof():
        with contextlib.suppress(OSError):  # ConnectionError is one
            writer.write_eof()
            await _read_what_is_left(lambda: reader.read(65536))
    writer.close()
    try:
        await asyncio.wait_for(writer.wait_closed(), READ_TIMEOUT)
    except (TimeoutError, ssl.SSLError, ConnectionError, OSError):
        writer.transport.abort()


def index_page(server: ExporterServer) -> str:
    rows = []
    for runner in server.runners:
        s = runner.snapshot
        state = "refused" if runner.refusal else "hung" if runner.hung() else s.state
        detail = runner.refusal or s.detail
        rows.append(f"<tr><td>{html.escape(runner.name)}</td><td>{state}</td><td>{runner.interval:g}s</td>"
                    f"<td>{s.duration_seconds * 1000:.1f} ms</td><td>{html.escape(detail)}</td></tr>")
    enabled = {r.name for r in server.runners}
    rows += [f"<tr><td>{html.escape(name)}</td><td>disabled</td><td></td><td></td><td></td></tr>"
             for name in server.known if name not in enabled]
    path = html.escape(server.metrics_path)
    return ("<!doctype html><html><head><title>Alnair exporter</title></head><body>"
            f"<h1>Alnair exporter {html.escape(version())}</h1><p><a href=\"{path}\">Metrics</a> &middot; <a href=\"/healthz\">Health</a></p>"
            "<table><tr><th>collector</th><th>state</th><th>interval</th><th>last sample</th><th>detail</th></tr>"
            + "".join(rows) + "</table></body></html>\n")


def _listening_socket(address: tuple[str, int]) -> socket.socket:
    host, port = address
    family = socket.AF_INET6 if ":" in host or host == "" else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:  # ":port" serves IPv4 too
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host or "::", port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
