"""Whether to ask Redis at all: after a failure the cache goes straight to the origin for
`retry_seconds`, then tries Redis again, so an outage costs one timeout per interval, not per batch."""

from __future__ import annotations

import time
from collections.abc import Callable


class RedisHealth:
    def __init__(self, retry_seconds: float, clock: Callable[[], float] = time.monotonic):
        self.retry_seconds = retry_seconds
        self.clock = clock
        self._down_until = float("-inf")

    def available(self) -> bool:
        return self.clock() >= self._down_until

    def failed(self) -> None:
        self._down_until = self.clock() + self.retry_seconds
