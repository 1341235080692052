"""The loader's counters mirrored into this process's python-kind shared-memory record, through the
public `alnair.counter` / `alnair.phase` API (exported as alnair_python_custom_total and _phase_*)."""
from __future__ import annotations

import alnair

from . import keys

PREFIX = "datacache."
# Totals of every dataset this process reads: per dataset they stay in Redis, as a record holds at
# most 32 counters of 47-byte names.
MIRRORED = (keys.HITS, keys.MISSES, keys.FALLBACKS, keys.CORRUPT, keys.REDIS_ERRORS, keys.CACHE_BYTES, keys.ORIGIN_BYTES)
FETCH_PHASE = PREFIX + "fetch"  # one completion per fetch, its seconds the fetch latency


def add(deltas: dict[str, int]) -> None:
    for field, value in deltas.items():
        if value and field in MIRRORED:
            alnair.counter(PREFIX + field).inc(value)


def timing_fetch() -> alnair.phase:
    return alnair.phase(FETCH_PHASE)
