"""One in-flight origin read per key: callers asking for a key being read wait for that read's result."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class SingleFlight:
    def __init__(self):
        self._lock = threading.Lock()
        self._in_flight: dict[Hashable, Future] = {}

    def run(self, key: Hashable, read: Callable[[], T]) -> T:
        with self._lock:
            future = self._in_flight.get(key)
            leader = future is None
            if leader:
                future = self._in_flight[key] = Future()
        if not leader:
            return future.result()  # blocks on a condition variable, no polling
        try:
            future.set_result(read())
        except BaseException as e:
            future.set_exception(e)
        finally:
            with self._lock:
                del self._in_flight[key]
        return future.result()
