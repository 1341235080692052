"""Background sampling: one thread per collector keeps its latest rendered snapshot,
so a scrape only concatenates bytes and a slow or hung collector never blocks it."""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .exposition import family_names, render
from .plugin import Collector, CollectorUnavailable
from .registry import CollectorSpec

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
    last_success_unix: float | None
    families: frozenset[str] = frozenset()  # the sample names `text` owns (exposition.family_names)


class CollectorRunner:
    """Samples one collector every `interval` seconds on its own daemon thread.

    The collector is constructed on that thread too, so a source that is missing at
    start (no GPU, Redis down) is retried instead of failing the exporter."""

    def __init__(
        self,
        spec: CollectorSpec,
        options: argparse.Namespace,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        retry_after: float = UNAVAILABLE_RETRY_SECONDS,
    ):
        self.name = spec.name
        self.spec = spec
        self.options = options
        self.interval = interval
        self.retry_after = retry_after  # the pause after an unavailable sample: its source is missing, not slow
        self.stale_after = max(3 * interval, MIN_STALE_SECONDS)
        self.clock = clock
        self.collector: Collector | None = None
        self.refusal = ""  # why the scrape refused this collector's families (exporter/scrape.py); sticky
        self.sampling_since: float | None = None  # when the sample in progress began; None between samples
        self.snapshot = Snapshot(0, b"", False, "starting", "", 0.0, None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"collector-{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        close = getattr(self.collector, "close", None)
        if close is not None and not self._thread.is_alive():
            close()

    def hung(self) -> bool:
        """The thread is dead, or stuck in a sample for longer than the stale window. A collector waiting to
        retry an unavailable source, or refused, is not hung: it reports so, but the exporter works."""
        if self.refusal:
            return False
        started = self.sampling_since
        return not self._thread.is_alive() or (started is not None and self.clock() - started > self.stale_after)

    def _run(self) -> None:
        while not self._stop.is_set() and not self.refusal:
            started = self.clock()
            self.sample_once()
            pause = self.retry_after if self.snapshot.state == "unavailable" else self.interval
            self._stop.wait(max(0.0, pause - (self.clock() - started)))

    def sample_once(self) -> Snapshot:
        self.sampling_since = started = self.clock()
        try:
            if self.collector is None:
                self.collector = self._build()
            text = render(self.collector.collect())
            state, detail = "ok", ""
        except CollectorUnavailable as e:
            text, state, detail = b"", "unavailable", str(e)
        except Exception as e:  # a collector bug must not end its thread
            text, state, detail = b"", "error", f"{type(e).__name__}: {e}"
        self._publish(text, state, detail, self.clock() - started)
        self.sampling_since = None
        return self.snapshot

    def _build(self) -> Collector:
        collector = self.spec.factory(self.options)
        if not isinstance(collector, Collector):
            raise TypeError(f"the factory gave a {type(collector).__name__}, which has no collect()")
        return collector

    def refuse(self, why: str) -> None:
        """Stop serving this collector for the rest of the process: it clashes with another's families."""
        if not self.refusal:
            self.refusal = why
            log.error("collector %s refused: %s", self.name, why)

    def _publish(self, text: bytes, state: str, detail: str, duration: float) -> None:
        previous = self.snapshot
        if (state, detail) != (previous.state, previous.detail) and state != "ok":
            log.warning("collector %s %s: %s", self.name, state, detail)
        elif state != "ok":
            log.debug("collector %s still %s", self.name, state)
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
            last_success_unix=time.time() if success else previous.last_success_unix,
            families=family_names(text) if success else previous.families,
        )
