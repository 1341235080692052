"""Copies the process's counters into its python-kind segment every 100 ms from a daemon thread.

The segment and the thread start with the first recorded event, so processes that
record nothing (most DataLoader workers) publish nothing. A fork child starts over
with zeroed counters and, once it records something, its own segment.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

from alnair.abi import layout

from .recorder import MAX_VALUE, Recorder
from .segment_writer import WriterSegment

# Ten times the C monitor's period: each tick takes the GIL from the training thread, which cost a bare
# torch step about 1.8 us at 10 ms and 0.6 us at 100 ms (docs/benchmarks.md); readers sample at 1 s or slower.
PERIOD_SECONDS = 0.100


class Publisher:
    def __init__(self, recorder: Recorder):
        self.recorder = recorder
        self.flag_sources: list[Callable[[], int]] = []  # each gives layout.PYTHON_* bits for the record
        self._start_lock = threading.Lock()
        self._forget_state()

    def _forget_state(self) -> None:
        self.segment: WriterSegment | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._record = layout.PythonRecord(max_counters=layout.PYTHON_MAX_COUNTERS, max_phases=layout.PYTHON_MAX_PHASES)
        self._published_version: tuple = ()
        self._published_ns = (0, 0)  # data wait, step time: published values never go back
        self._start_ns = 0
        self._failed = False

    def start(self) -> bool:
        """Create the segment and the thread; if that fails, say so once and carry on without.
        True when publishing."""
        with self._start_lock:
            if self.segment is not None or self._failed:
                return self.segment is not None
            try:
                self.segment = WriterSegment(layout.KIND_PYTHON, layout.PYTHON_RECORD_SIZE)
            except Exception as e:  # OSError mostly; whatever it is, the program runs on without metrics
                self._failed = True
                print(f"alnair: python metrics off, cannot create a segment: {e}", file=sys.stderr)
                return False
            self._record.flags = self._flags()
            self._start_ns = self.segment.header.start_time_ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
            self.publish()
            self._thread = threading.Thread(target=self._run, name="alnair-publisher", daemon=True)
            self._thread.start()
            self._stop_with_multiprocessing_child()
            return True

    def _stop_with_multiprocessing_child(self) -> None:
        """multiprocessing children (DataLoader workers) end in os._exit, past atexit: remove the
        segment in multiprocessing's own exit hook instead of leaving it for the exporter to reclaim."""
        multiprocessing = sys.modules.get("multiprocessing")
        if multiprocessing is not None and multiprocessing.parent_process() is not None:
            import multiprocessing.util

            multiprocessing.util.Finalize(None, self.stop, exitpriority=0)

    def _flags(self) -> int:
        flags = 0
        for source in self.flag_sources:
            try:
                flags |= source()
            except Exception:  # a flag is not worth failing the program for
                pass
        return flags

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_SECONDS):
            self.publish()

    def publish(self) -> None:
        try:
            self._publish()
        except Exception as e:  # not even a bug of ours may reach the training program
            self.recorder.warn_once("publish", f"cannot publish python metrics: {e!r}")

    def _publish(self) -> None:
        segment = self.segment
        if segment is None:  # stopped meanwhile (stop() waits for the thread only so long)
            return
        r, record = self.recorder, self._record
        waiting_since = r.fold()
        version = (r.version, r.steps, r.epochs, r.optimizer_steps)  # anything new since the last publish?
        data_wait, step = r.data_wait_ns, r.step_ns
        if version == self._published_version and not waiting_since:
            return
        if waiting_since:  # a wait in progress counts now: a hung loader shows as a stall before its batch comes
            waited = max(0, time.monotonic_ns() - waiting_since)
            data_wait, step = data_wait + waited, step + waited
        data_wait, step = max(self._published_ns[0], data_wait), max(self._published_ns[1], step)
        self._published_ns = (data_wait, step)
        record.steps, record.samples, record.epochs = r.steps, r.samples, r.epochs
        record.optimizer_steps, record.data_wait_ns, record.step_ns = r.optimizer_steps, data_wait, step
        if r.first_step_boottime_ns:
            record.first_step_ns = max(0, r.first_step_boottime_ns - self._start_ns)
        self._copy_table(record.counters, "counter_count", list(r.counters.values()), ("value",))
        self._copy_table(record.phases, "phase_count", list(r.phases.values()), ("count", "total_ns"))
        segment.publish(bytes(record))
        self._published_version = version

    def _copy_table(self, entries, valid: str, slots: list, fields: tuple[str, ...]) -> None:
        """Slots into the record's table; names are written once, as slots are only ever appended.
        A slot's name is already its published form (abi.records.as_text): it encodes and fits."""
        record = self._record
        for i in range(getattr(record, valid), len(slots)):
            entries[i].name = slots[i].name.encode()
        setattr(record, valid, len(slots))
        for entry, slot in zip(entries, slots):
            for field in fields:  # saturate: a uint64 field keeps only the low 64 bits of a larger int
                setattr(entry, field, min(getattr(slot, field), MAX_VALUE))

    def stop(self) -> None:
        """At exit: a last publish, then remove the segment."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(1.0)
        if self.segment is not None:
            if self._thread is None or not self._thread.is_alive():  # one publisher at a time: folding is not reentrant
                self.publish()
            self.segment.close()
            self.segment = None

    def after_fork_in_child(self) -> None:
        """The parent's thread did not survive the fork and its lock is not ours."""
        if self.segment is not None:
            self.segment.forget()
        self._start_lock = threading.Lock()
        self._forget_state()
        self.recorder.reset()
