"""The training program's counters in process memory: the hot paths add to them, the publisher copies them.

A step is one batch a training loop took from its iterator. Step time runs from the
moment the loop asks for a batch to the moment it asks for the next one, so it holds
the data wait and the loop body; data-stall fraction is data wait / step time. The ask
that finds the iterator run out (a multi-worker DataLoader joins its workers in it) is
data wait too, and the pass's last step time ends when it returns: a wait published
while in progress is then never more than the final figure.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable

from alnair.abi import layout
from alnair.abi.records import as_text

MAX_NAME_BYTES = layout.PYTHON_NAME_LEN - 1  # keep the NUL
MAX_VALUE = 2**64 - 1  # the record's uint64: published sums saturate here rather than wrap
MAX_SPELLINGS = 256  # names cached per table: a program may make up spellings without end


def shown(value) -> str:
    """repr for a warning line; never raises, as repr of an int past 4300 digits or a hostile object would."""
    try:
        return repr(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be shown>"


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


class LoaderPass:
    """One training pass over a DataLoader iterator, logged by the loop and summed by the publisher.

    Per batch the loop thread only appends two monotonic ns to `times`, when it asked and
    when the batch came (a C call each: the per-step budget is 2 µs), and, for passes
    whose sampler does not give the batch sizes, the size to `sizes` before the second.
    `fold` takes the complete pairs off the front with C-level slicing and sums every 100 ms.
    """

    __slots__ = ("times", "sizes", "items", "full", "rest", "iterator", "ended_at", "steps", "last_arrival")

    def __init__(self, iterator, items: int, full: int, rest: int):
        self.times: list[int] = []
        self.sizes: list[int] | None = None if items else []
        self.items, self.full, self.rest = items, full, rest  # see torch_hooks.sampler_batches
        self.iterator = weakref.ref(iterator)
        self.ended_at = 0  # set by the loop when its last ask returned (iterator run out); `times` ends with that ask
        self.steps = 0  # batches folded so far
        self.last_arrival = 0

    def samples_after(self, steps: int) -> int:
        """Items in the first `steps` batches: full ones, then the rest; batches beyond what the
        sampler's length promised count as full."""
        if self.rest and steps > self.full:
            return self.items * (steps - 1) + self.rest
        return self.items * steps

    def abandoned(self) -> bool:
        """The loop stopped asking: its iterator is gone or began another pass (a `break`)."""
        iterator = self.iterator()
        return iterator is None or iterator._alnair_pass is not self


class Recorder:
    """Counters of one process; the publisher reads them without a lock and never blocks the program.

    A hooked training loop logs its batches into LoaderPasses, which the publisher's
    `fold` adds to the step totals; optimizer steps are counted by the thread running
    the loop. None of these take a lock (the
    per-step cost budget is 2 µs); the explicit API may be called from any thread, so its
    updates take `lock` and bump `version`.
    """

    def __init__(self, start_publishing: Callable[[], bool] = lambda: False) -> None:
        self.start_publishing = start_publishing  # called at the first event; True when a publisher runs
        self.counters: dict[str, CounterSlot] = {}  # by published name, in creation order: what the publisher copies
        self.phases: dict[str, PhaseSlot] = {}
        self._counter_names: dict[str, CounterSlot] = {}  # each name as the program spelt it, to its slot
        self._phase_names: dict[str, PhaseSlot] = {}
        self._warned: set[str] = set()
        self.passes: list[LoaderPass] = []  # appended by the loop thread, folded and dropped by the publisher
        self.reset()

    def reset(self) -> None:
        """Zero everything (a fork child counts its own work); slots handed out stay valid."""
        for loader_pass in self.passes:  # a fork child: the parent's passes would log into lists nobody folds
            iterator = loader_pass.iterator()
            if iterator is not None:
                iterator._alnair_times = None
        self.passes.clear()
        self.lock = threading.Lock()
        self.version = 0  # bumped by every explicit-API update
        self.steps = self.samples = self.epochs = self.optimizer_steps = 0
        self.data_wait_ns = self.step_ns = 0
        self.first_step_boottime_ns = 0  # CLOCK_BOOTTIME of the first step, like the process start time
        self.publishing = False  # the publisher runs: passes get folded
        for slot in self.counters.values():
            slot.value = 0
        for phase_slot in self.phases.values():
            phase_slot.count = phase_slot.total_ns = 0
        self.idle = True  # nothing recorded yet: no segment, no thread

    def _recorded(self) -> None:
        """The first event: start publishing."""
        if self.idle:
            self.idle = False
            self.publishing = self.start_publishing()

    # ---- a training loop's steps (monotonic ns) ----

    def pass_started(self, iterator, items: int, full: int, rest: int) -> LoaderPass | None:
        """A DataLoader pass to log; None when nothing would fold its log (no publisher)."""
        self._recorded()
        if not self.publishing:
            return None
        loader_pass = LoaderPass(iterator, items, full, rest)
        self.passes.append(loader_pass)
        return loader_pass

    def loop_ended(self, asked: int, returned: int, previous_arrival: int) -> None:
        """The ask at `asked` found the iterator run out at `returned`: the last step ends there, an epoch is done."""
        if previous_arrival:
            self.step_ns += returned - previous_arrival
            self.data_wait_ns += returned - asked
            self.epochs += 1

    def optimizer_stepped(self, optimizer=None, args=None, kwargs=None) -> None:
        """Also torch's optimizer step post hook as it is, (optimizer, args, kwargs) unused: one call per step."""
        self.optimizer_steps += 1
        if self.idle:
            self._recorded()

    # ---- the publisher's side ----

    def fold(self) -> int:
        """Sum the passes' logged batches into the totals; drop finished passes.
        Returns when the oldest wait still in progress began (monotonic ns), 0 if none."""
        waiting_since = 0
        for loader_pass in list(self.passes):
            ended_at = loader_pass.ended_at  # read first: once set, the log is complete
            times = loader_pass.times
            pairs = len(times) // 2
            if pairs:
                self._fold_batches(loader_pass, times[: 2 * pairs])
                del times[: 2 * pairs]
            pending = times[:1]  # the loop may drop its last ask meanwhile: a slice never raises
            if ended_at:
                if pending:
                    self.loop_ended(pending[0], ended_at, loader_pass.last_arrival)
                self.passes.remove(loader_pass)
            elif pending:
                waiting_since = min(waiting_since or pending[0], pending[0])
            elif loader_pass.abandoned():
                self.passes.remove(loader_pass)
        return waiting_since

    def _fold_batches(self, loader_pass: LoaderPass, times: list[int]) -> None:
        """times: ask, arrival, ask, arrival... of whole batches."""
        batches, arrivals = len(times) // 2, times[1::2]
        if loader_pass.sizes is None:
            samples = loader_pass.samples_after(loader_pass.steps + batches) - loader_pass.samples_after(
                loader_pass.steps
            )
        else:  # each size was logged before its arrival
            samples = sum(loader_pass.sizes[:batches])
            del loader_pass.sizes[:batches]
        step_ns = arrivals[-1] - (loader_pass.last_arrival or times[0])  # the steps run back to back
        self.data_wait_ns += sum(arrivals) - sum(times[::2])
        self.step_ns += step_ns
        self.samples += samples
        self.steps += batches
        if not self.first_step_boottime_ns:  # CLOCK_BOOTTIME runs ahead of the monotonic clock by the time suspended
            self.first_step_boottime_ns = arrivals[0] + time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
        loader_pass.steps += batches
        loader_pass.last_arrival = arrivals[-1]

    # ---- the explicit API ----

    def counter_slot(self, name: str) -> CounterSlot | None:
        return self._slot(self.counters, self._counter_names, name, CounterSlot, layout.PYTHON_MAX_COUNTERS, "counter")

    def phase_slot(self, name: str) -> PhaseSlot | None:
        return self._slot(self.phases, self._phase_names, name, PhaseSlot, layout.PYTHON_MAX_PHASES, "phase")

    def _slot(self, table: dict, names: dict, name: str, make, limit: int, what: str):
        """The slot the name publishes into, made on first use; None (reported once) for a bad name or a full table."""
        try:
            return names[name]  # the hot path: one lookup of a name seen before
        except Exception:  # not seen yet (KeyError), or not even hashable: the slow path tells which
            pass
        try:
            return self._new_slot(table, names, name, make, limit, what)
        except Exception as e:  # a str subclass whose hash or compare raises: still nothing into the program
            self.warn_once(f"{what}:unreadable", f"a {what} name raised {type(e).__name__}; not recorded")
            return None

    def _new_slot(self, table: dict, names: dict, name: str, make, limit: int, what: str):
        published = self._published(name, what)
        if published is None:
            return None
        hash(name)  # a str subclass whose hash raises is refused (in _slot) before it makes a slot it cannot cache
        with self.lock:  # check and add together: racing threads must not grow the table past the record's
            slot = table.get(published)
            if slot is None and len(table) < limit:
                slot = table[published] = make(published)
        if slot is None:
            self.warn_once(
                f"{what}:full", f"at most {limit} {what}s per process; {shown(name)} and later ones are not recorded"
            )
        elif len(names) < MAX_SPELLINGS:  # bounded, and refused names never cached: made-up ones would grow it
            names[name] = slot
        return slot

    def _published(self, name: str, what: str) -> str | None:
        """The name's published form; None, reported once, when the record cannot hold it."""
        # The name as the record holds it (docs/python-api.md): names split by a NUL never publish as one.
        published = as_text(name) if isinstance(name, str) else ""
        if not published or len(published.encode()) > MAX_NAME_BYTES:
            text = shown(name)
            self.warn_once(
                f"{what}:{text}", f"{what} name must be 1 to {MAX_NAME_BYTES} bytes of text, got {text}; not recorded"
            )
            return None
        return published

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

    def warn_once(self, key: str, message: str) -> None:
        """One line on stderr per problem: never an exception into the training program."""
        if key not in self._warned:
            self._warned.add(key)
            try:
                print(f"alnair: {message}", file=sys.stderr)
            except Exception:  # stderr closed or gone: the line is lost, the program runs on
                pass
