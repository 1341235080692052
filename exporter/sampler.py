"""Background sampling: one thread per collector keeps its latest rendered snapshot,
so a scrape only concatenates bytes and a slow or hung collector never blocks it."""
from __future__ import annotations

import argparse
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

from .collector import Collector, CollectorUnavailable

log = logging.getLogger(__name__)

MIN_STALE_SECONDS = 30.0
UNAVAILABLE_RETRY_SECONDS = 60.0


@dataclass(frozen=True)
class Snapshot:
    """What one sample produced. `generation` changes whenever the snapshot does."""

    generation: int
    text: bytes  # rendered exposition text; empty unless the sample succeeded
    success: bool
    state: str  # "starting", "ok", "unavailable" or "error"
    detail: str  # the error, or "" when ok
    duration_seconds: float
    completed_monotonic: float
    last_success_unix: float | None


class _Families:
    """Adapter: generate_latest renders any object with collect()."""

    def __init__(self, families: Iterable[Metric]):
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(collected: Iterable[Metric] | bytes) -> bytes:
    """Prometheus text exposition of what a collector returned (families, or text already)."""
    if isinstance(collected, bytes):
        return collected
    return generate_latest(_Families(list(collected)))


class CollectorRunner:
    """Samples one collector every `interval` seconds on its own daemon thread.

    The collector is constructed on that thread too, so a source that is missing at
    start (no GPU, Redis down) is retried instead of failing the exporter."""

    def __init__(self, collector_class: type[Collector], options: argparse.Namespace, interval: float,
                 clock: Callable[[], float] = time.monotonic):
        self.name = collector_class.name
        self.collector_class = collector_class
        self.options = options
        self.interval = interval
        self.stale_after = max(3 * interval, MIN_STALE_SECONDS)
        self.clock = clock
        self.collector: Collector | None = None
        self.snapshot = Snapshot(0, b"", False, "starting", "", 0.0, clock(), None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"collector-{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self.collector is not None and not self._thread.is_alive():
            self.collector.close()

    def hung(self) -> bool:
        """No sample finished within the stale window: the thread is stuck or dead."""
        return not self._thread.is_alive() or self.clock() - self.snapshot.completed_monotonic > self.stale_after

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self.clock()
            self.sample_once()
            pause = UNAVAILABLE_RETRY_SECONDS if self.snapshot.state == "unavailable" else self.interval
            self._stop.wait(max(0.0, pause - (self.clock() - started)))

    def sample_once(self) -> Snapshot:
        started = self.clock()
        try:
            if self.collector is None:
                self.collector = self.collector_class(self.options)
            text = render(self.collector.collect())
            state, detail = "ok", ""
        except CollectorUnavailable as e:
            text, state, detail = b"", "unavailable", str(e)
        except Exception as e:  # a collector bug must not end its thread
            text, state, detail = b"", "error", f"{type(e).__name__}: {e}"
        self._publish(text, state, detail, self.clock() - started)
        return self.snapshot

    def _publish(self, text: bytes, state: str, detail: str, duration: float) -> None:
        previous = self.snapshot
        if (state, detail) != (previous.state, previous.detail) and state != "ok":
            log.warning("collector %s %s: %s", self.name, state, detail)
        elif state == "ok" and previous.state not in ("ok", "starting"):
            log.info("collector %s recovered", self.name)
        success = state == "ok"
        self.snapshot = Snapshot(
            generation=previous.generation + 1,
            text=text,
            success=success,
            state=state,
            detail=detail,
            duration_seconds=duration,
            completed_monotonic=self.clock(),
            last_success_unix=time.time() if success else previous.last_success_unix,
        )
