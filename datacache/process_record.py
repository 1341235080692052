"""The loader's counters mirrored into this process's python-kind shared-memory record, through the
public `alnair.counter` / `alnair.phase` API (exported as alnair_python_custom_total and _phase_*)."""

from __future__ import annotations

import time

import alnair
from alnair.abi import cache_keys as keys

PREFIX = "datacache."
# Totals of every dataset this process reads: per dataset they stay in Redis, as a record holds at
# most 32 counters of 47-byte names.
MIRRORED = (
    keys.HITS,
    keys.MISSES,
    keys.FALLBACKS,
    keys.CORRUPT,
    keys.REDIS_ERRORS,
    keys.CACHE_BYTES,
    keys.ORIGIN_BYTES,
    keys.SUBSTITUTED,
)
FETCH_PHASE = PREFIX + "fetch"  # one completion per fetch, its seconds the fetch latency


def add(deltas: dict[str, int]) -> None:
    for field, value in deltas.items():
        if value and field in MIRRORED:
            alnair.counter(PREFIX + field).inc(value)


class FetchTimer:
    """One batch's fetch, from when it is asked of Redis to when its samples are ready: the phase in the
    record and the seconds for Redis's latency histogram. Pipelined, the two ends are in different
    calls, hence not a `with` block."""

    __slots__ = ("_phase", "_started")

    def __init__(self):
        self._phase = alnair.phase(FETCH_PHASE).__enter__()
        self._started = time.perf_counter()

    def done(self) -> float:
        """Ends the phase; returns the seconds it measured (a little less than the phase's)."""
        seconds = time.perf_counter() - self._started
        self._phase.__exit__(None, None, None)
        return seconds
