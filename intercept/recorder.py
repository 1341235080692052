"""The training program's counters in process memory: the hot paths add to them, the publisher copies them.

A step is one batch a training loop took from its iterator. Step time runs from the
moment the loop asks for a batch to the moment it asks for the next one (or the
iterator ends), so it holds the data wait and the loop body; data-stall fraction
is data wait / step time.
"""
from __future__ import annotations

import sys
import threading
import time

from alnair.collectors.shm import layout

MAX_NAME_BYTES = layout.PYTHON_NAME_LEN - 1  # keep the NUL


class CounterSlot:
    __slots__ = ("name", "value")

    def __init__(self, name: str):
        self.name = name
        self.value = 0


class PhaseSlot:
    __slots__ = ("name", "count", "total_ns")

    def __init__(self, name: str):
        self.name = name
        self.count = 0
        self.total_ns = 0


class Recorder:
    """Counters of one process; the publisher reads them without a lock and never blocks the program.

    The training loop's counters are written by the thread running the loop, without
    a lock (the per-step cost budget is 2 µs); the explicit API may be called from any
    thread, so its updates take `lock` and bump `version`.
    """

    def __init__(self) -> None:
        self.counters: dict[str, CounterSlot] = {}
        self.phases: dict[str, PhaseSlot] = {}
        self._warned: set[str] = set()
        self.reset()

    def reset(self) -> None:
        """Zero everything (a fork child counts its own work); slots handed out stay valid."""
        self.lock = threading.Lock()
        self.version = 0  # bumped by every explicit-API update
        self.steps = self.samples = self.epochs = self.optimizer_steps = 0
        self.data_wait_ns = self.step_ns = 0
        self.waiting_since_ns = 0  # monotonic ns when the current wait for a batch began; 0: none
        self.first_step_boottime_ns = 0  # CLOCK_BOOTTIME of the first step, like the process start time
        for slot in self.counters.values():
            slot.value = 0
        for slot in self.phases.values():
            slot.count = slot.total_ns = 0
        self.idle = True  # nothing recorded yet: no segment, no thread

    def _recorded(self) -> None:
        """The first event: start publishing (imported here, as the publisher imports this module)."""
        if self.idle:
            self.idle = False
            from .publisher import PUBLISHER

            PUBLISHER.start()

    # ---- the training loop's hot path (monotonic ns) ----

    def batch_arrived(self, asked_at: int, arrived_at: int, samples: int, previous_arrival: int) -> None:
        """A batch asked for at asked_at came at arrived_at; previous_arrival is the
        loop's previous batch (0 for the first of a pass), whose body ends at asked_at."""
        self.data_wait_ns += arrived_at - asked_at
        self.step_ns += arrived_at - (previous_arrival or asked_at)
        self.samples += samples
        self.steps += 1
        self.waiting_since_ns = 0
        if not self.first_step_boottime_ns:
            self.first_step_boottime_ns = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
            if self.idle:
                self._recorded()

    def loop_ended(self, at: int, previous_arrival: int) -> None:
        """The loop's iterator ran out at `at`: the last step's body ends there, an epoch is done."""
        self.waiting_since_ns = 0
        if previous_arrival:
            self.step_ns += at - previous_arrival
            self.epochs += 1

    def optimizer_stepped(self) -> None:
        self.optimizer_steps += 1
        if self.idle:
            self._recorded()

    # ---- the explicit API ----

    def counter_slot(self, name: str) -> CounterSlot | None:
        return self._slot(self.counters, name, CounterSlot, layout.PYTHON_MAX_COUNTERS, "counter")

    def phase_slot(self, name: str) -> PhaseSlot | None:
        return self._slot(self.phases, name, PhaseSlot, layout.PYTHON_MAX_PHASES, "phase")

    def _slot(self, table: dict, name: str, make, limit: int, what: str):
        """The named slot, made on first use; None (reported once) for a bad name or a full table."""
        slot = table.get(name) if isinstance(name, str) else None
        if slot is None and self._valid_name(name, table, limit, what):
            with self.lock:
                slot = table.setdefault(name, make(name))
        return slot

    def add(self, slot: CounterSlot, amount: int) -> None:
        with self.lock:
            slot.value += amount
            self.version += 1
        if self.idle:
            self._recorded()

    def phase_done(self, slot: PhaseSlot, elapsed_ns: int) -> None:
        with self.lock:
            slot.count += 1
            slot.total_ns += elapsed_ns
            self.version += 1
        if self.idle:
            self._recorded()

    def _valid_name(self, name: str, table: dict, limit: int, what: str) -> bool:
        if not isinstance(name, str) or not name or len(name.encode()) > MAX_NAME_BYTES:
            self.warn_once(f"{what}:{name!r}", f"{what} name must be 1 to {MAX_NAME_BYTES} bytes of text, got {name!r}; not recorded")
        elif len(table) >= limit:
            self.warn_once(f"{what}:full", f"at most {limit} {what}s per process; {name!r} and later ones are not recorded")
        else:
            return True
        return False

    def warn_once(self, key: str, message: str) -> None:
        """One line on stderr per problem: never an exception into the training program."""
        if key not in self._warned:
            self._warned.add(key)
            print(f"alnair: {message}", file=sys.stderr)


RECORDER = Recorder()
