"""HTTPS for the webhook: POST /mutate and GET /healthz, HTTP/1.1 with keep-alive, on alnair.webserver.

Connections are bounded whatever arrives (MAX_CONNECTIONS, the one idle the longest closed for a new one), and
so is what a review may hold: its body, read within BODY_TIMEOUT, and REVIEWS_AT_ONCE bodies read and answered
at once, on one thread off the loop. Every new connection is set up with the certificate as it is on disk then
(LiveTLS), so cert-manager's rotation takes effect without a restart; connections already open keep the
certificate they began with."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import ssl
import time
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path

from aiohttp import web

from alnair.commandline import version
from alnair.webserver.server import BoundedServer

from .patch import Settings
from .review import BadReview, answer

log = logging.getLogger("alnair.injector")
# Longer than the API server's idle timeout for webhook connections (Go's 90 s): it closes an idle connection
# first, so a request never races our close. Also the most a request head may take.
IDLE_TIMEOUT = 120.0
# The API server holds a few connections per instance. Each open one costs ~6 KB here, ~270 KB once its TLS
# handshake is done (asyncio's TLS read buffer): at most ~35 MiB for them all (docs/benchmarks.md).
MAX_CONNECTIONS = 128
MAX_BODY_BYTES = 8 << 20  # the API server's requests stay under 3 MiB (etcd's object limit, and more)
BODY_TIMEOUT = 10.0  # the API server waits at most 30 s for a webhook (timeoutSeconds), the chart's 5 s
REVIEWS_AT_ONCE = 4  # bodies held at once: at most 32 MiB of them, whatever the clients send
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
        raise TLSError(
            f"cannot load --tls.cert-file {cert_file} with --tls.key-file {key_file}: "
            f"{getattr(e, 'strerror', None) or e}"
        ) from None
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
    once every RETRY_SECONDS. Used from the server's loop only, so it takes no lock."""

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


class InjectorServer(BoundedServer):
    def __init__(self, address: tuple[str, int], tls: LiveTLS, settings: Settings):
        super().__init__(address, log, IDLE_TIMEOUT, MAX_CONNECTIONS)
        self.tls, self.settings = tls, settings
        self._reviews = asyncio.Semaphore(REVIEWS_AT_ONCE)
        self._reviewer = ThreadPoolExecutor(1, thread_name_prefix="review")  # the loop stays free meanwhile

    def tls_context(self) -> ssl.SSLContext:
        return self.tls.context()

    def server_close(self) -> None:
        super().server_close()
        self._reviewer.shutdown(wait=False, cancel_futures=True)

    async def answer(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "GET" and request.path == "/healthz":
            return reply(HTTPStatus.OK, b"ok\n")
        if request.path != "/mutate":
            return reply(HTTPStatus.NOT_FOUND, b"Not Found\n")
        if request.method != "POST":
            return reply(HTTPStatus.METHOD_NOT_ALLOWED, b"POST an AdmissionReview to /mutate\n", {"Allow": "POST"})
        problem = body_problem(request.content_length)
        if problem is not None:
            status, reason = problem
            log.warning("review request from %s refused: %s", request.remote, reason)
            return closing(reply(status, f"{reason}\n".encode()))
        async with self._reviews:
            try:
                async with asyncio.timeout(BODY_TIMEOUT):  # read as sent: request.read() stops at 1 MiB
                    body = await request.content.readexactly(request.content_length)
            except TimeoutError:
                log.warning("the review from %s did not arrive within %g s", request.remote, BODY_TIMEOUT)
                return closing(reply(HTTPStatus.REQUEST_TIMEOUT, b"the body did not arrive in time\n"))
            except (asyncio.IncompleteReadError, ConnectionError):
                log.warning("the connection from %s ended inside its review's body", request.remote)
                return closing(reply(HTTPStatus.BAD_REQUEST, b"the body ended early\n"))
            status, text, content_type = await asyncio.get_running_loop().run_in_executor(
                self._reviewer, review, body, self.settings, request.remote
            )
        return reply(status, text, content_type=content_type)


def body_problem(content_length: int | None) -> tuple[HTTPStatus, str] | None:
    """Why a body is not read (no length, too long: answered, and the connection closed), or None to read it."""
    if content_length is None:
        return HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required"
    if content_length > MAX_BODY_BYTES:
        return HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"at most {MAX_BODY_BYTES} bytes"
    return None


def review(body: bytes, settings: Settings, client: str) -> tuple[HTTPStatus, bytes, str]:
    """The review's answer; 400 for a body that is not one, 500 for an error of the injector's own: both logged,
    since a connection dropped unanswered reaches the API server's log only as an EOF."""
    try:
        return HTTPStatus.OK, answer(body, settings), "application/json"
    except BadReview as e:
        log.warning("bad AdmissionReview from %s: %s", client, e)
        return HTTPStatus.BAD_REQUEST, f"{e}\n".encode(), TEXT
    except Exception:
        log.exception("cannot answer the review from %s", client)
        return HTTPStatus.INTERNAL_SERVER_ERROR, b"the injector failed on this review; its log says why\n", TEXT


def reply(
    status: HTTPStatus, body: bytes, extra: dict[str, str] | None = None, content_type: str = TEXT
) -> web.Response:
    headers = {"Server": f"alnair-injector/{version()}", "Content-Type": content_type, **(extra or {})}
    return web.Response(status=status, body=body, headers=headers)


def closing(response: web.Response) -> web.Response:
    response.force_close()
    return response
