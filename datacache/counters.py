"""Counter deltas a process has not written to Redis yet: hits, misses, bytes, fallbacks, errors, fetch latency."""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter

from alnair.abi import cache_keys as keys


class PendingCounters:
    """Added to by every fetching thread; taken as a whole by the thread that writes them to Redis,
    and put back if that write fails, so no increment is lost while Redis is away."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pending: Counter[str] = Counter()
        self._taken_at = float("-inf")

    def add(self, **deltas: float) -> None:
        with self._lock:
            self._pending.update(deltas)

    def observe_fetch(self, seconds: float) -> None:
        slot = bisect.bisect_left(keys.FETCH_BUCKETS, seconds)
        bucket = keys.bucket_field(keys.FETCH_BUCKETS[slot]) if slot < len(keys.FETCH_BUCKETS) else keys.FETCH_OVERFLOW
        self.add(**{keys.FETCHES: 1, keys.FETCH_SECONDS: seconds, bucket: 1})

    def take(self, every: float = 0) -> dict[str, float]:
        """What is pending; nothing if the last take was less than `every` seconds ago."""
        now = time.monotonic()
        with self._lock:
            if now < self._taken_at + every:
                return {}
            self._taken_at = now
            taken, self._pending = self._pending, Counter()
        return {field: value for field, value in taken.items() if value}

    def restore(self, deltas: dict[str, float]) -> None:
        self.add(**deltas)
