"""The HTTP endpoint: /metrics, /healthz and an index page, with optional TLS, basic auth,
a rate limit and a bound on concurrent scrapes."""
from __future__ import annotations

import contextlib
import html
import ipaddress
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Sequence, Union

from alnair.commandline import version

from .sampler import CollectorRunner
from .scrape import CONTENT_TYPE, ScrapeAssembler
from .webconfig import LiveWebConfig, WebConfig, tls_accept

log = logging.getLogger(__name__)
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
HANDSHAKE_AND_READ_TIMEOUT = 30.0  # a client stalling TLS or headers holds only its own thread
MAX_CONNECTIONS = 256  # connections served at once, each on its own thread; more are answered 503 and closed
LISTEN_BACKLOG = 256  # connections the kernel holds before accept: a burst of new scrapers is never dropped
_REFUSED = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


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


class ExporterServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], web: WebConfig, assembler: ScrapeAssembler,
                 runners: list[CollectorRunner], known: list[str], metrics_path: str, max_requests: int,
                 max_connections: int = MAX_CONNECTIONS, priority_sources: Sequence[IPNetwork] = ()):
        host, port = address
        self.address_family = socket.AF_INET6 if ":" in host or host == "" else socket.AF_INET
        self.live_web = LiveWebConfig(web)
        self.assembler = assembler
        self.runners = runners
        self.known = known
        self.metrics_path = metrics_path
        self.scrape_slots = threading.BoundedSemaphore(max_requests) if max_requests else None
        self.connection_slots = threading.BoundedSemaphore(max_connections)
        self.priority_sources = tuple(priority_sources)
        super().__init__((host or "::", port), Handler)

    @property
    def web(self) -> WebConfig:
        """The web config now: the file is read again when it, or a certificate it names, changes."""
        return self.live_web.current()

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:  # ":port" serves IPv4 too
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def get_request(self):
        conn, addr = super().get_request()
        conn.settimeout(HANDSHAKE_AND_READ_TIMEOUT)
        context = self.web.ssl_context  # each new connection gets the certificate as it is on disk now
        if context is not None:
            # The handshake runs on the request's own thread, not the accept loop.
            conn = context.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, addr

    def process_request(self, request, client_address) -> None:
        """A thread for the connection while fewer than max_connections are open, else 503 and close."""
        if not self.connection_slots.acquire(blocking=False):
            if not isinstance(request, ssl.SSLSocket):  # a TLS client would not understand a plain answer
                with contextlib.suppress(OSError):
                    request.send(_REFUSED)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.connection_slots.release()

    def has_priority(self, client_host: str) -> bool:
        """A scrape from --web.priority-sources (Prometheus's own address, say) never waits for a slot."""
        if not self.priority_sources:
            return False
        address = ipaddress.ip_address(client_host.split("%")[0])
        address = getattr(address, "ipv4_mapped", None) or address  # ":port" serves IPv4 as ::ffff:a.b.c.d
        return any(address in network for network in self.priority_sources)

    def unhealthy(self) -> list[str]:
        return [r.name for r in self.runners if r.hung()]


class Handler(BaseHTTPRequestHandler):
    server: ExporterServer
    server_version = f"alnair-exporter/{version()}"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a small reply waits for the client's delayed ACK (~40 ms)

    def log_message(self, format: str, *args) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def handle(self) -> None:
        try:
            refused = tls_accept(self.connection) if isinstance(self.connection, ssl.SSLSocket) else ""
            if refused:
                log.debug("connection from %s closed: %s", self.client_address, refused)
                return
            super().handle()
        except (ssl.SSLError, ConnectionError, TimeoutError) as e:
            log.debug("connection from %s ended: %s", self.client_address, e)

    def do_GET(self) -> None:
        self.web = self.server.web  # one config for the whole request, should the file change meanwhile
        # As the toolkit: rate_limit first, for every path; a priority source is exempt, so a flood cannot use up
        # Prometheus's tokens.
        if not self.server.has_priority(self.client_address[0]) and not self.web.allows_request():
            self._reply(429, b"Too Many Requests\n", "text/plain; charset=utf-8")
            return
        if not self.web.check_basic_auth(self.headers.get("Authorization")):
            self._reply(401, b"Unauthorized\n", "text/plain", {"WWW-Authenticate": 'Basic realm="alnair"'})
            return
        path = self.path.split("?", 1)[0]
        if path == self.server.metrics_path:
            self._metrics()
        elif path == "/healthz":
            self._healthz()
        elif path == "/":
            self._reply(200, self._index().encode(), "text/html; charset=utf-8")
        else:
            self._reply(404, b"Not Found\n", "text/plain")

    def _metrics(self) -> None:
        slots = None if self.server.has_priority(self.client_address[0]) else self.server.scrape_slots
        if slots is not None and not slots.acquire(blocking=False):
            self.server.assembler.count_rejected_scrape()
            self._reply(503, b"Too many concurrent scrapes\n", "text/plain")
            return
        try:
            gzipped = accepts_gzip(self.headers.get("Accept-Encoding", ""))
            body = self.server.assembler.render(compress=gzipped)
            encoding = {"Content-Encoding": "gzip"} if gzipped else {}
            self._reply(200, body, CONTENT_TYPE, {"Vary": "Accept-Encoding", **encoding})
        finally:
            if slots is not None:
                slots.release()

    def _healthz(self) -> None:
        hung = self.server.unhealthy()
        if hung:
            self._reply(503, f"collectors not sampling: {', '.join(hung)}\n".encode(), "text/plain")
        else:
            self._reply(200, b"ok\n", "text/plain")

    def _index(self) -> str:
        rows = []
        for runner in self.server.runners:
            s = runner.snapshot
            state = "refused" if runner.refusal else "hung" if runner.hung() else s.state
            detail = runner.refusal or s.detail
            rows.append(f"<tr><td>{html.escape(runner.name)}</td><td>{state}</td><td>{runner.interval:g}s</td>"
                        f"<td>{s.duration_seconds * 1000:.1f} ms</td><td>{html.escape(detail)}</td></tr>")
        enabled = {r.name for r in self.server.runners}
        rows += [f"<tr><td>{html.escape(name)}</td><td>disabled</td><td></td><td></td><td></td></tr>"
                 for name in self.server.known if name not in enabled]
        path = html.escape(self.server.metrics_path)
        return ("<!doctype html><html><head><title>Alnair exporter</title></head><body>"
                f"<h1>Alnair exporter {html.escape(version())}</h1><p><a href=\"{path}\">Metrics</a> &middot; <a href=\"/healthz\">Health</a></p>"
                "<table><tr><th>collector</th><th>state</th><th>interval</th><th>last sample</th><th>detail</th></tr>"
                + "".join(rows) + "</table></body></html>\n")

    def _reply(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**self.web.headers, **(extra or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_HEAD = do_GET
