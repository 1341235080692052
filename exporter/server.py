"""The exporter's HTTP endpoint: /metrics, /healthz and an index page, with the web config's TLS, basic auth,
headers and rate limit, and --web.max-requests bounding concurrent scrapes.

Connections, timeouts and shutdown are alnair.webserver's (aiohttp underneath): a refusal (503, 429, 401) costs
a few Python lines on the loop and no thread, so a flood of anonymous clients cannot take the CPU from admitted
scrapes through thread switching. Renders and bcrypt checks run on small thread pools off the loop.
"""

from __future__ import annotations

import asyncio
import html
import ipaddress
import logging
import ssl
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus

from aiohttp import web as aio

from alnair.commandline import version
from alnair.webserver.server import BoundedServer

from .sampler import CollectorRunner
from .scrape import CONTENT_TYPE, ScrapeAssembler
from .web_tls import refusal_after_handshake
from .webconfig import BCRYPT_PARALLEL, LiveWebConfig, WebConfig

log = logging.getLogger(__name__)
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IDLE_TIMEOUT = 30.0  # to send each request head, from the connection or the last reply
MAX_CONNECTIONS = 256  # connections open at once from other peers, and as many from --web.priority-sources
RENDER_WORKERS = 4  # threads that render scrapes; a render takes about a millisecond from the cached part
TEXT = "text/plain; charset=utf-8"


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


class ExporterServer(BoundedServer):
    def __init__(
        self,
        address: tuple[str, int],
        web: WebConfig,
        assembler: ScrapeAssembler,
        runners: list[CollectorRunner],
        known: list[str],
        metrics_path: str,
        max_requests: int,
        max_connections: int = MAX_CONNECTIONS,
        priority_sources: Sequence[IPNetwork] = (),
    ):
        super().__init__(address, log, IDLE_TIMEOUT, max_connections)
        self.live_web = LiveWebConfig(web)
        self.assembler = assembler
        self.runners = runners
        self.known = known
        self.metrics_path = metrics_path
        self.max_requests = max_requests
        self.priority_sources = tuple(priority_sources)
        self.scrapes_in_flight = 0  # changed on the loop's thread only
        self._renderers = ThreadPoolExecutor(RENDER_WORKERS, thread_name_prefix="http-render")
        self._checkers = ThreadPoolExecutor(BCRYPT_PARALLEL, thread_name_prefix="http-auth")

    @property
    def web(self) -> WebConfig:
        """The web config now: the file is read again when it, or a certificate it names, changes."""
        return self.live_web.current()

    def tls_context(self) -> ssl.SSLContext | None:
        return self.web.ssl_context

    def has_priority(self, client_host: str | None) -> bool:
        """A scrape from --web.priority-sources (Prometheus's own address, say) never waits for a slot, and its
        connections are never closed for anyone else's."""
        if not self.priority_sources or not client_host:
            return False
        address = ipaddress.ip_address(client_host.split("%")[0])
        address = getattr(address, "ipv4_mapped", None) or address  # ":port" serves IPv4 as ::ffff:a.b.c.d
        return any(address in network for network in self.priority_sources)

    def server_close(self) -> None:
        super().server_close()
        self._renderers.shutdown(wait=False, cancel_futures=True)
        self._checkers.shutdown(wait=False, cancel_futures=True)

    def unhealthy(self) -> list[str]:
        return [r.name for r in self.runners if r.hung()]

    async def answer(self, request: aio.BaseRequest) -> aio.StreamResponse:
        web = self.web  # one config for the whole request, should the file change meanwhile
        refused = refusal_after_handshake(request.get_extra_info("ssl_object")) if web.ssl_context else ""
        if refused:  # as Go fails the handshake: the client gets no answer
            log.debug("connection from %s closed: %s", request.remote, refused)
            if request.transport is not None:
                request.transport.abort()
            return aio.Response()
        if request.method not in ("GET", "HEAD"):
            return reply(HTTPStatus.METHOD_NOT_ALLOWED, b"Method Not Allowed\n", web, extra={"Allow": "GET, HEAD"})
        # As the toolkit: rate_limit first, for every path; a priority source is exempt, so a flood cannot use up
        # Prometheus's tokens.
        if not self.has_priority(request.remote) and not web.allows_request():
            return reply(HTTPStatus.TOO_MANY_REQUESTS, b"Too Many Requests\n", web)
        if not await self._check_basic_auth(web, request.headers.get("Authorization")):
            return reply(
                HTTPStatus.UNAUTHORIZED, b"Unauthorized\n", web, extra={"WWW-Authenticate": 'Basic realm="alnair"'}
            )
        if request.path == self.metrics_path:
            return await self._metrics(request, web)
        if request.path == "/healthz":
            hung = self.unhealthy()
            if hung:
                return reply(
                    HTTPStatus.SERVICE_UNAVAILABLE, f"collectors not sampling: {', '.join(hung)}\n".encode(), web
                )
            return reply(HTTPStatus.OK, b"ok\n", web)
        if request.path == "/":
            return reply(HTTPStatus.OK, index_page(self).encode(), web, "text/html; charset=utf-8")
        return reply(HTTPStatus.NOT_FOUND, b"Not Found\n", web)

    async def _metrics(self, request: aio.BaseRequest, web: WebConfig) -> aio.StreamResponse:
        """A scrape holds one of --web.max-requests slots from its render until its reply is handed to the kernel,
        so the bound also bounds the memory of replies in flight; a priority source takes none."""
        counted = self.max_requests > 0 and not self.has_priority(request.remote)
        if counted and self.scrapes_in_flight >= self.max_requests:
            self.assembler.count_rejected_scrape()
            return reply(HTTPStatus.SERVICE_UNAVAILABLE, b"Too many concurrent scrapes\n", web)
        self.scrapes_in_flight += counted
        try:
            gzipped = accepts_gzip(request.headers.get("Accept-Encoding", ""))
            body = await asyncio.get_running_loop().run_in_executor(self._renderers, self.assembler.render, gzipped)
            encoding = {"Content-Encoding": "gzip"} if gzipped else {}
            response = aio.StreamResponse(headers=headers(web, CONTENT_TYPE, {"Vary": "Accept-Encoding", **encoding}))
            response.content_length = len(body)
            await self.send(request, response, body)
            return response
        finally:
            self.scrapes_in_flight -= counted

    async def _check_basic_auth(self, web: WebConfig, authorization: str | None) -> bool:
        known = web.known_verdict(authorization)
        if known is not None:
            return known
        return await asyncio.get_running_loop().run_in_executor(self._checkers, web.check_basic_auth, authorization)


def reply(
    status: HTTPStatus, body: bytes, web: WebConfig, content_type: str = TEXT, extra: dict[str, str] | None = None
) -> aio.Response:
    return aio.Response(status=status, body=body, headers=headers(web, content_type, extra))


def headers(web: WebConfig, content_type: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"Server": f"alnair-exporter/{version()}", "Content-Type": content_type, **web.headers, **(extra or {})}


def index_page(server: ExporterServer) -> str:
    rows = []
    for runner in server.runners:
        s = runner.snapshot
        state = "refused" if runner.refusal else "hung" if runner.hung() else s.state
        detail = runner.refusal or s.detail
        rows.append(
            f"<tr><td>{html.escape(runner.name)}</td><td>{state}</td><td>{runner.interval:g}s</td>"
            f"<td>{s.duration_seconds * 1000:.1f} ms</td><td>{html.escape(detail)}</td></tr>"
        )
    enabled = {r.name for r in server.runners}
    rows += [
        f"<tr><td>{html.escape(name)}</td><td>disabled</td><td></td><td></td><td></td></tr>"
        for name in server.known
        if name not in enabled
    ]
    path = html.escape(server.metrics_path)
    return (
        "<!doctype html><html><head><title>Alnair exporter</title></head><body>"
        f'<h1>Alnair exporter {html.escape(version())}</h1><p><a href="{path}">Metrics</a> &middot; <a '
        'href="/healthz">Health</a></p>'
        "<table><tr><th>collector</th><th>state</th><th>interval</th><th>last sample</th><th>detail</th></tr>"
        + "".join(rows)
        + "</table></body></html>\n"
    )
