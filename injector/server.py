"""HTTPS for the webhook: POST /mutate and GET /healthz, HTTP/1.1 with keep-alive, a thread per connection.

The API server is the one real client and keeps its connections open, so a thread each is cheap and plain.
Every new connection is set up with the certificate as it is on disk then (LiveTLS), so cert-manager's
rotation takes effect without a restart; connections already open keep the certificate they began with."""
from __future__ import annotations

import errno
import hashlib
import http.server
import logging
import os
import socket
import socketserver
import ssl
import sys
import time
from http import HTTPStatus
from pathlib import Path

from alnair.commandline import version

from .patch import Settings
from .review import BadReview, answer

log = logging.getLogger("alnair.injector")
# Longer than the API server's idle timeout for webhook connections (Go's 90 s): it closes an idle connection
# first, so a request never races our close. Also the most a handshake or a body may take.
IDLE_TIMEOUT = 120.0
MAX_BODY_BYTES = 8 << 20  # the API server's requests stay under 3 MiB (etcd's object limit, and more)
RETRY_SECONDS = 1.0  # certificate files that do not load are tried again no sooner than this
SETTLE_SECONDS = 1.0  # files changed this recently are looked at again: a second write may keep mtime and size
TEXT = "text/plain; charset=utf-8"


class TLSError(Exception):
    """The certificate or key cannot be used; the message is one line naming them and the problem."""


def load_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as e:
        raise TLSError(f"cannot load --tls.cert-file {cert_file} with --tls.key-file {key_file}: "
                       f"{getattr(e, 'strerror', None) or e}") from None
    return context


def _digest(files: tuple[str, str]) -> bytes:
    content = hashlib.sha256()
    for flag, path in zip(("--tls.cert-file", "--tls.key-file"), files):
        try:
            content.update(Path(path).read_bytes() + b"\0")
        except OSError as e:
            raise TLSError(f"cannot read {flag} {path}: {e.strerror}") from None
    return content.digest()


class LiveTLS:
    """The context to set up a new connection with: the files are stat'ed for each (two stat calls against a
    handshake's milliseconds) and loaded again when their content changed. Files that do not load (a rotation
    seen half-written) keep the context as it was, logged once per distinct problem and tried again at most
    once every RETRY_SECONDS. Used from the accepting thread only, so it takes no lock."""

    def __init__(self, cert_file: str, key_file: str):
        self.files = (cert_file, key_file)
        self._stamps = self._stat()
        self._digest = _digest(self.files)
        self._context = load_context(*self.files)
        self._problem, self._retry_at = "", 0.0

    def context(self) -> ssl.SSLContext:
        if time.time() >= self._retry_at:
            stamps = self._stat()
            if stamps is None or stamps != self._stamps:
                self._reload(stamps)
        return self._context

    def _reload(self, stamps: tuple | None) -> None:
        try:
            digest = _digest(self.files)
            if digest != self._digest:  # a new stamp over the same bytes (a touch, a fresh file) changes nothing
                self._context = load_context(*self.files)
                log.info("certificate %s read again", self.files[0])
        except TLSError as e:
            self._retry_at = time.time() + RETRY_SECONDS
            if str(e) != self._problem:
                self._problem = str(e)
                log.warning("%s; new connections keep the certificate read before", e)
            return
        self._stamps, self._digest, self._problem = stamps, digest, ""

    def _stat(self) -> tuple | None:
        """What identifies the files' content; None (looked at again) while one is missing or changed within
        SETTLE_SECONDS, since a second write in the same clock tick can keep mtime and size."""
        try:
            stats = [os.stat(path) for path in self.files]
        except OSError:
            return None
        if any(time.time() - s.st_mtime < SETTLE_SECONDS for s in stats):
            return None
        return tuple((s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns) for s in stats)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses its connections
    server_version = f"alnair-injector/{version()}"
    sys_version = ""
    timeout = IDLE_TIMEOUT
    # Buffered: head and body leave in one write when the request is answered (handle_one_request flushes), so
    # a reply is one TLS record, not a head that waits for the client's delayed ACK before the body goes.
    wbufsize = 1 << 16
    server: "InjectorServer"

    def setup(self) -> None:
        super().setup()  # the timeout applies to the handshake too
        self.request.do_handshake()

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._reply(HTTPStatus.OK, b"ok\n")
        elif self.path == "/mutate":
            self._reply(HTTPStatus.METHOD_NOT_ALLOWED, b"POST an AdmissionReview to /mutate\n", {"Allow": "POST"})
        else:
            self._reply(HTTPStatus.NOT_FOUND, b"Not Found\n")

    def do_POST(self) -> None:
        if self.path.partition("?")[0] != "/mutate":
            self._reply(HTTPStatus.NOT_FOUND, b"Not Found\n")
            return
        body = self._body()
        if body is not None:
            status, reply, content_type = self._answer(body)
            self._reply(status, reply, content_type=content_type)

    def _answer(self, body: bytes) -> tuple[HTTPStatus, bytes, str]:
        """The review's answer; 400 for a body that is not one, 500 for an error of the injector's own: both
        logged, since a connection dropped unanswered reaches the API server's log only as an EOF."""
        try:
            return HTTPStatus.OK, answer(body, self.server.settings), "application/json"
        except BadReview as e:
            log.warning("bad AdmissionReview from %s: %s", self.client_address[0], e)
            return HTTPStatus.BAD_REQUEST, f"{e}\n".encode(), TEXT
        except Exception:
            log.exception("cannot answer the review from %s", self.client_address[0])
            return HTTPStatus.INTERNAL_SERVER_ERROR, b"the injector failed on this review; its log says why\n", TEXT

    def _body(self) -> bytes | None:
        """The request body, or None once a refusal is sent (no length, too long: the connection closes)."""
        length = self.headers.get("Content-Length", "")
        if not length.isdigit():
            self.close_connection = True
            self._reply(HTTPStatus.LENGTH_REQUIRED, b"a Content-Length is required\n")
            return None
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BODY_BYTES} bytes\n".encode())
            return None
        return self.rfile.read(int(length))

    def _reply(self, status: HTTPStatus, body: bytes, extra: dict[str, str] | None = None,
               content_type: str = TEXT) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": content_type, "Content-Length": str(len(body)), **(extra or {})}.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # the access log, at debug rather than on stderr
        log.debug("%s %s", self.client_address[0], format % args)


class InjectorServer(socketserver.ThreadingTCPServer):
    """Accepts on one thread; each connection's TLS handshake and requests run on a thread of its own, so a slow
    client never holds up the accept loop."""

    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], tls: LiveTLS, settings: Settings):
        self.address_family = socket.AF_INET6 if ":" in address[0] or not address[0] else socket.AF_INET
        self.tls, self.settings = tls, settings
        super().__init__((address[0] or "::", address[1]), Handler)

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:  # ":port" serves IPv4 too
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def get_request(self):
        conn, address = self.socket.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a reply larger than the buffer: no Nagle wait
        return self.tls.context().wrap_socket(conn, server_side=True, do_handshake_on_connect=False), address

    def handle_error(self, request, client_address) -> None:
        """A failed handshake, a client gone or timed out: one debug line, not socketserver's traceback."""
        log.debug("connection from %s ended: %s", client_address[0], sys.exc_info()[1])


def listen(address: tuple[str, int], tls: LiveTLS, settings: Settings) -> InjectorServer:
    """The server, bound; on a host without IPv6, ':port' falls back to every IPv4 interface."""
    try:
        return InjectorServer(address, tls, settings)
    except OSError as e:
        if address[0] or e.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL):
            raise
        return InjectorServer(("0.0.0.0", address[1]), tls, settings)
