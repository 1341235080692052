"""A small Prometheus HTTP API client on the standard library: instant queries whose range selectors return the
raw samples of every matching series, checked answers, and errors as one line (ProfileError, PrometheusFailed).

Whatever a server answers is untrusted: each request has a deadline over the whole exchange and a bound on the
answer's size, every part of an answer is checked before use, and server text is made printable."""

from __future__ import annotations

import http.client
import json
import math
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

# One query's range selector covers at most this much time: Prometheus refuses a query that would load more than
# --query.max-samples (50 M by default) at once, and a long range at a short scrape interval gets there.
WINDOW_SECONDS = 6 * 3600
TIMEOUT_SECONDS = 120.0
MiB = 1 << 20
# Parsed, an answer takes some 10 times its size in memory (64 MiB: 0.65 GB more RSS). 64 MiB holds 2.4 M samples:
# a family of 1,000 jobs scraped every 10 s over a 6 h window is 2.2 M.
MAX_ANSWER_BYTES = 64 * MiB
CHUNK_BYTES = MiB
SERVER_TEXT_CHARS = 200  # of a server's error text in a message: one line a reader can take in


class ProfileError(Exception):
    """A problem the user can fix, said in one line (the command exits 2 with it): bad flags, or a server whose
    answers are not Prometheus's."""

    exit_status = 2

    def __init__(self, message: str):
        super().__init__(printable(message))  # server text in a message must not drive the terminal it reaches


class PrometheusFailed(ProfileError):
    """Prometheus did not answer: unreachable, slower than the timeout, HTTP 5xx or its own error (exit 1)."""

    exit_status = 1


def printable(text: str) -> str:
    """`text` with every unprintable character (C0, DEL, C1, bidi controls) as its Python escape, like \\x1b."""
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _excerpt(text: object) -> str:
    text = str(text)
    return text if len(text) <= SERVER_TEXT_CHARS else text[:SERVER_TEXT_CHARS] + "..."


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


class _Deadline:
    """Shuts a request's sockets down when its time is up: a server that drips a byte every few seconds restarts
    the socket timeout with each byte, so only a deadline over the whole request ends it."""

    def __init__(self, seconds: float):
        self.expired = False
        self.sockets: list[socket.socket] = []
        self.timer = threading.Timer(seconds, self._expire)
        self.timer.daemon = True

    def __enter__(self) -> _Deadline:
        self.timer.start()
        return self

    def __exit__(self, *exception) -> None:
        self.timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        self.sockets.append(sock)
        if self.expired:  # the time ran out while it connected (_expire may have missed it)
            _shut(sock)

    def _expire(self) -> None:
        self.expired = True
        for sock in self.sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # a read blocked in another thread returns at once
    except OSError:
        pass  # already closed


class _DeadlineHandler(urllib.request.HTTPSHandler, urllib.request.HTTPHandler):
    """urllib's http and https handlers, whose connections hand their socket to the deadline once connected."""

    def __init__(self, deadline: _Deadline):
        super().__init__()
        self.deadline = deadline

    def do_open(self, http_class, request, **kwargs):
        deadline = self.deadline

        class Watched(http_class):
            def connect(self):
                super().connect()
                deadline.watch(self.sock)

        return super().do_open(Watched, request, **kwargs)


class Prometheus:
    def __init__(self, url: str, timeout: float = TIMEOUT_SECONDS, max_bytes: int = MAX_ANSWER_BYTES):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ProfileError(f"--prometheus: not an http:// or https:// URL: {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_bytes = max_bytes

    def _get(self, path: str, params: dict[str, str]) -> object:
        """The `data` of Prometheus's answer, once it is known to be a success."""
        status, body = self._fetch(path, params)
        answer = _loads(body)
        if isinstance(answer, dict) and answer.get("status") == "error":
            raise _refusal(answer)
        if status >= 500:
            raise PrometheusFailed(f"Prometheus at {self.url} failed: HTTP {status} for {path}")
        if status != 200:
            raise ProfileError(f"{self.url} is not a Prometheus: HTTP {status} for {path}")
        if not isinstance(answer, dict):
            raise self._malformed(path, "did not answer a JSON object")
        if answer.get("status") != "success" or "data" not in answer:
            raise self._malformed(path, "answered no status success with data")
        return answer["data"]

    def _fetch(self, path: str, params: dict[str, str]) -> tuple[int, bytearray]:
        """The HTTP status and body of one request, within the timeout and the size bound."""
        # Queries are POSTed (1,000 jobs' pid matchers overflow a URL); the status endpoints answer GET only.
        data = urllib.parse.urlencode(params).encode() if params else None
        request = urllib.request.Request(self.url + path, data=data, method="POST" if params else "GET")
        with _Deadline(self.timeout) as deadline:
            # The user's proxy settings apply (urllib reads them); a loopback Prometheus is reached directly.
            opener = urllib.request.build_opener(_DeadlineHandler(deadline))
            try:
                try:
                    response = opener.open(request, timeout=self.timeout)
                except urllib.error.HTTPError as e:
                    response = e  # Prometheus answers a bad query with 4xx and a JSON error
                with response:
                    body = self._read(response, path)
            except (OSError, http.client.HTTPException) as e:
                if not deadline.expired:
                    raise self._unanswered(path, e) from None
            if deadline.expired:  # a shut socket ends a read early, as an error or as the end of the body
                raise PrometheusFailed(f"Prometheus at {self.url} did not answer {path} within {self.timeout:g} s")
        return response.status, body

    def _read(self, response, path: str) -> bytearray:
        """The body, in chunks, refused once it passes the bound: a hostile answer is never held whole."""
        body = bytearray()
        while chunk := response.read1(CHUNK_BYTES):
            body += chunk
            if len(body) > self.max_bytes:
                raise ProfileError(
                    f"{self.url}: the answer to {path} is larger than {self.max_bytes / MiB:g} MiB: "
                    "ask for less (a shorter range, narrower selectors) or raise --max-answer-mib"
                )
        return body

    def _unanswered(self, path: str, error: Exception) -> ProfileError:
        """The error for a request that got no HTTP answer in time or none at all."""
        if isinstance(error, OSError):  # URLError too: refused, reset, name unknown
            reason = getattr(error, "reason", error)
            return PrometheusFailed(f"cannot reach Prometheus at {self.url}: {_excerpt(reason)}")
        return ProfileError(f"{self.url} is not a Prometheus: {path} did not answer HTTP ({_excerpt(repr(error))})")

    def _malformed(self, path: str, what: str) -> ProfileError:
        return ProfileError(f"{self.url} is not a Prometheus: {path} {what}")

    def check(self) -> str:
        """Prometheus's version; a ProfileError when the URL is unreachable or not a Prometheus."""
        data = self._get("/api/v1/status/buildinfo", {})
        if not isinstance(data, dict) or not isinstance(data.get("version"), str):
            raise ProfileError(f"{self.url} is not a Prometheus: /api/v1/status/buildinfo has no version")
        return data["version"]

    def raw(self, selector: str, start: float, end: float) -> list[Series]:
        """Every sample of every series `selector` matches in [start, end], one query per window of the range."""
        merged: dict[tuple, Series] = {}
        windows = max(1, math.ceil((end - start) / WINDOW_SECONDS))
        step = (end - start) / windows
        path = "/api/v1/query"
        for index in range(windows):
            until = start + step * (index + 1)
            seconds = max(1, math.ceil(until - max(start, until - step)))
            data = self._get(path, {"query": f"{selector}[{seconds}s]", "time": f"{until:.3f}"})
            result = data.get("result") if isinstance(data, dict) and data.get("resultType") == "matrix" else None
            if not isinstance(result, list):
                raise self._malformed(path, "answered no matrix result")
            for number, item in enumerate(result):
                try:
                    _merge(merged, item, start)
                except _Malformed as e:
                    raise self._malformed(path, f"answered result[{number}]{e}") from None
        return list(merged.values())


def _loads(body: bytes | bytearray):
    """The body's JSON, None when it has none."""
    try:
        return json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError):  # RecursionError: arrays nested past the parser's depth
        return None


def _not_json(constant: str):
    raise ValueError(f"{constant} is not JSON")  # Python's parser takes NaN and Infinity; Prometheus never sends them


def _refusal(answer: dict) -> ProfileError:
    """Prometheus's own error: a query it cannot parse is the user's to fix (exit 2), any other its failure (1)."""
    reason = _excerpt(answer.get("error", "no reason given"))
    if answer.get("errorType") == "bad_data":
        return ProfileError(f"Prometheus refused the query: {reason}")
    return PrometheusFailed(f"Prometheus failed the query: {reason}")


class _Malformed(Exception):
    """Which part of a result item is not as Prometheus sends it (raw() says where the item is)."""


def _merge(merged: dict[tuple, Series], item, start: float) -> None:
    """Adds one window's samples to its series; a sample on the boundary of two windows (range selectors are closed
    in Prometheus 2) or before the range is dropped."""
    labels, times, values = _series(item)
    key = tuple(sorted(labels.items()))
    series = merged.get(key)
    if series is None:
        series = merged[key] = Series(labels, [], [])
    last = series.times[-1] if series.times else None
    if times and not _fresh(times[0], last, start):  # points are in time order: only a head can be stale
        kept = [i for i, t in enumerate(times) if _fresh(t, last, start)]
        times, values = [times[i] for i in kept], [values[i] for i in kept]
    series.times.extend(times)
    series.values.extend(values)


_NOT_PAIRS = ".values that are not [time, value] pairs of finite times and numbers"


def _series(item) -> tuple[dict[str, str], list[float], list[float]]:
    """A result item's labels (made printable) and samples, checked: finite times, numeric values (NaN and
    infinities, which an exporter may expose, are left out as gaps)."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict) or "values" not in item:
        raise _Malformed(" that is not a series (metric and values)")
    metric, points = item["metric"], item["values"]
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        raise _Malformed(".metric that is not labels (names to strings)")
    if not isinstance(points, list):
        raise _Malformed(_NOT_PAIRS)
    try:
        # comprehensions: a million samples a second; t + 0.0 takes numbers only, float(v) Prometheus's strings
        times = [t + 0.0 for t, _ in points]
        values = [float(v) for _, v in points]
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer past a float's range
        raise _Malformed(_NOT_PAIRS) from None
    if not all(map(math.isfinite, times)):
        raise _Malformed(_NOT_PAIRS)
    if not all(map(math.isfinite, values)):
        kept = [i for i, v in enumerate(values) if math.isfinite(v)]
        times, values = [times[i] for i in kept], [values[i] for i in kept]
    return {name: printable(value) for name, value in metric.items()}, times, values


def _fresh(t: float, last: float | None, start: float) -> bool:
    return t > last if last is not None else t >= start
