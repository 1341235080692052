"""What `alnair profile` reads: the time range and the label matchers, as PromQL selectors for the three kinds of
query (process info, per-process values, per-node values)."""

from __future__ import annotations

import datetime
import re
import time
from dataclasses import dataclass

from alnair.commandline import parse_duration_seconds

from .prometheus import ProfileError


def parse_time(text: str) -> float:
    """Unix seconds, or an RFC 3339 / ISO 8601 time (UTC when it names no zone); a time RFC 3339 can write (years 1 to
    9999), so every message can name it: nan, inf and 1e20 are not times."""
    wrong = ValueError(f"not a time (Unix seconds or RFC 3339 like 2026-12-01T10:00:00Z): {text!r}")
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise wrong from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
        seconds = moment.timestamp()
    try:
        rfc3339(seconds)
    except (ValueError, OverflowError, OSError):  # NaN, infinities, beyond year 9999 or the platform's time_t
        raise wrong from None
    return seconds


def parse_last(text: str) -> float:
    seconds = parse_duration_seconds(text)
    if not seconds > 0:
        raise ValueError(f"must be longer than 0: {text!r}")
    return seconds


def quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def regex_of(values: list[str]) -> str:
    """A PromQL regex string matching exactly these values."""
    return quoted("|".join(re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\1", v) for v in sorted(values)))


@dataclass
class Selection:
    start: float
    end: float
    namespace: str | None = None
    pod: str | None = None
    pids: tuple[str, ...] = ()
    instance: str | None = None
    raw: str = ""  # matchers added to every query, e.g. job="alnair"

    def __post_init__(self):
        if not self.start < self.end:
            raise ProfileError(
                f"empty range: the start ({rfc3339(self.start)}) is not before the end ({rfc3339(self.end)})"
            )
        self.raw = self.raw.strip().removeprefix("{").removesuffix("}").strip()

    def _matchers(self, names: tuple[str, ...]) -> list[str]:
        given = {"namespace": self.namespace, "pod": self.pod, "instance": self.instance}
        out = [f"{name}={quoted(given[name])}" for name in names if given.get(name) is not None]
        if "pid" in names and self.pids:
            out.append(f"pid=~{regex_of(list(self.pids))}")
        return out + ([self.raw] if self.raw else [])

    def info(self) -> str:
        """For *_process_info: pod and namespace are labels of those series only."""
        return ",".join(self._matchers(("namespace", "pod", "pid", "instance")))

    def process(self, pids: list[str] | None = None) -> str:
        """For per-process values; `pids` narrows them to the jobs found (when a pod or namespace chose them)."""
        matchers = self._matchers(("pid", "instance"))
        if pids is not None:
            matchers = [m for m in matchers if not m.startswith("pid=~")] + [f"pid=~{regex_of(pids)}"]
        return ",".join(matchers)

    def node(self) -> str:
        return ",".join(self._matchers(("instance",)))

    def describe(self) -> str:
        given = self.info()
        return "{" + given + "}" if given else "the range"

    def span(self) -> str:
        return f"{rfc3339(self.start)} to {rfc3339(self.end)}"


def rfc3339(seconds: float) -> str:
    """RFC 3339 in UTC, to the microsecond the time has: 2026-12-05T10:11:12Z, 2026-12-05T10:11:12.25Z."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    fraction = f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else ""
    return f"{moment:%Y-%m-%dT%H:%M:%S}{fraction}Z"


def time_range(start: float | None, end: float | None, last: float | None) -> tuple[float, float]:
    """--start/--end, or --last before --end (default: now); the last hour when neither is given."""
    end = time.time() if end is None else end
    if start is None:
        start = end - (3600.0 if last is None else last)
    return start, end
