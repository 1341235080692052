"""HTTP/1.1 on asyncio streams: a request head read within limits, a response head written.

Only what a scraper, a probe and a browser send is understood: GET and HEAD, keep-alive, no request bodies
beyond a small one that is read and dropped. Anything else gets its status and the connection closes."""
from __future__ import annotations

import asyncio
import email.utils
import re
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Mapping

MAX_HEAD_BYTES = 65536  # request line and headers together, as http.server bounds each line
MAX_HEADERS = 100  # as http.client and http.server bound them
MAX_DISCARDED_BODY = 65536  # a GET's body, read and dropped to keep the connection in step
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110's field-name


class BadRequest(Exception):
    """The request cannot be answered on this connection: reply with status, then close."""

    def __init__(self, status: HTTPStatus, reason: str):
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: Mapping[str, str]  # lower-case names; a repeated field keeps its first value
    keep_alive: bool

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on the connection, or None when the client closed it between requests.
    The reader's limit must be MAX_HEAD_BYTES."""
    try:
        first = await reader.readexactly(1)
        # A TLS ClientHello (0x16) or other binary is told at its first byte, not after a head that never ends.
        if not (_TOKEN.fullmatch(first) or first in b"\r\n"):
            raise BadRequest(HTTPStatus.BAD_REQUEST, "not an HTTP request")
        head = first + await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise BadRequest(HTTPStatus.BAD_REQUEST, "connection closed inside the request head") from None
    except asyncio.LimitOverrunError:
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large") from None
    request = parse_head(head.lstrip(b"\r\n"))  # RFC 9112 lets a server ignore empty lines before a request
    await _discard_body(reader, request.headers)
    return request


def parse_head(head: bytes) -> Request:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed request line")
    method, target, version = (p.decode("latin-1") for p in parts)
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        bad = HTTPStatus.HTTP_VERSION_NOT_SUPPORTED if version.startswith("HTTP/") else HTTPStatus.BAD_REQUEST
        raise BadRequest(bad, f"version {version!r}")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too many headers")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):  # also refuses obsolete line folding
            raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed header line")
        headers.setdefault(name.decode("ascii").lower(), value.strip(b" \t").decode("latin-1"))
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep_alive = "close" not in tokens and (version == "HTTP/1.1" or "keep-alive" in tokens)
    return Request(method, target, headers, keep_alive)


async def _discard_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> None:
    if "transfer-encoding" in headers:
        raise BadRequest(HTTPStatus.NOT_IMPLEMENTED, "chunked request bodies are not read")
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed Content-Length")
    if int(length) > MAX_DISCARDED_BODY:
        raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
    if int(length):
        await reader.readexactly(int(length))


_date_cache: tuple[int, str] = (0, "")


def http_date() -> str:
    """The Date header's value, formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, email.utils.formatdate(now, usegmt=True))
    return _date_cache[1]


def response_head(status: int, fields: Mapping[str, str], close: bool) -> bytes:
    """The status line and header fields; `fields` come after Date, before Connection."""
    phrase = HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {phrase}", f"Date: {http_date()}"]
    lines += [f"{name}: {value}" for name, value in fields.items()]
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
