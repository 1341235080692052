"""A small Prometheus HTTP API client on the standard library: instant queries whose range selectors return the
raw samples of every matching series, checked answers, and errors as one line (ProfileError)."""
from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

# One query's range selector covers at most this much time: Prometheus refuses a query that would load more than
# --query.max-samples (50 M by default) at once, and a long range at a short scrape interval gets there.
WINDOW_SECONDS = 6 * 3600


class ProfileError(Exception):
    """A problem the user can fix, said in one line (the command exits 2 with it)."""


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


class Prometheus:
    def __init__(self, url: str, timeout: float = 120.0):
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ProfileError(f"--prometheus: not an http:// or https:// URL: {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        # The user's proxy settings apply (urllib reads them); a loopback Prometheus is reached directly.
        self.opener = urllib.request.build_opener()

    def _get(self, path: str, params: dict[str, str]) -> dict:
        # Queries are POSTed (1,000 jobs' pid matchers overflow a URL); the status endpoints answer GET only.
        data = urllib.parse.urlencode(params).encode() if params else None
        request = urllib.request.Request(self.url + path, data=data, method="POST" if params else "GET")
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as e:
            body = e.read()
            if e.code not in (400, 422, 503):  # Prometheus answers a bad query with 400/422 and a JSON error
                raise ProfileError(f"{self.url} is not a Prometheus: HTTP {e.code} for {path}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ProfileError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        try:
            answer = json.loads(body)
        except ValueError:
            raise ProfileError(f"{self.url} is not a Prometheus: {path} did not answer JSON") from None
        if not isinstance(answer, dict) or "status" not in answer:
            raise ProfileError(f"{self.url} is not a Prometheus: {path} answered JSON without a status")
        if answer["status"] != "success":
            raise ProfileError(f"Prometheus refused the query: {answer.get('error', 'no reason given')}")
        return answer["data"]

    def check(self) -> str:
        """Prometheus's version; a ProfileError when the URL is unreachable or not a Prometheus."""
        data = self._get("/api/v1/status/buildinfo", {})
        if not isinstance(data, dict) or "version" not in data:
            raise ProfileError(f"{self.url} is not a Prometheus: /api/v1/status/buildinfo has no version")
        return data["version"]

    def raw(self, selector: str, start: float, end: float) -> list[Series]:
        """Every sample of every series `selector` matches in [start, end], one query per window of the range."""
        merged: dict[tuple, Series] = {}
        windows = max(1, math.ceil((end - start) / WINDOW_SECONDS))
        step = (end - start) / windows
        for index in range(windows):
            until = start + step * (index + 1)
            seconds = max(1, math.ceil(until - max(start, until - step)))
            data = self._get("/api/v1/query", {"query": f"{selector}[{seconds}s]", "time": f"{until:.3f}"})
            for item in data["result"]:
                _merge(merged, item, start)
        return list(merged.values())


def _merge(merged: dict[tuple, Series], item: dict, start: float) -> None:
    """Adds one window's samples to its series; a sample on the boundary of two windows (range selectors are closed
    in Prometheus 2) or before the range is dropped."""
    key = tuple(sorted(item["metric"].items()))
    series = merged.get(key)
    if series is None:
        series = merged[key] = Series(item["metric"], [], [])
    last = series.times[-1] if series.times else None
    points = item["values"]
    if points and not _fresh(points[0][0], last, start):  # points are in time order: only a head can be stale
        points = [p for p in points if _fresh(p[0], last, start)]
    series.times.extend([p[0] for p in points])  # comprehensions: a million samples a second
    series.values.extend([float(p[1]) for p in points])


def _fresh(t: float, last: float | None, start: float) -> bool:
    return t > last if last is not None else t >= start
