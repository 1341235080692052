"""The explicit API training programs call: custom counters and timed phases (`alnair.counter`, `alnair.phase`).

Works without PyTorch and without the environment switch. Nothing here raises into the program:
names are mapped to what the record can hold, and bad names and amounts are reported once on
stderr and ignored (the rules: docs/python-api.md).
"""

from __future__ import annotations

import time

from .recorder import CounterSlot, shown
from .this_process import RECORDER

_clock = time.monotonic_ns


class Counter:
    """A monotonic count exported as alnair_python_custom_total{name}; it saturates at 2**64 - 1."""

    __slots__ = ("_slot",)

    def __init__(self, slot: CounterSlot | None):
        self._slot = slot

    def inc(self, amount: int = 1) -> None:
        if self._slot is None:
            return
        if type(amount) is not int or amount < 0:
            name = self._slot.name
            RECORDER.warn_once(
                f"inc:{name}", f"counter {name!r}: inc() takes an int >= 0, got {shown(amount)}; ignored"
            )
            return
        RECORDER.add(self._slot, amount)


def counter(name: str) -> Counter:
    return Counter(RECORDER.counter_slot(name))


class phase:
    """`with alnair.phase("preprocess"):` adds the time inside to the phase's total
    and counts one completion; an exception leaving the block still counts."""

    __slots__ = ("_slot", "_entered_at")

    def __init__(self, name: str):
        self._slot = RECORDER.phase_slot(name)

    def __enter__(self) -> phase:
        self._entered_at = _clock()
        return self

    def __exit__(self, *exc) -> None:
        if self._slot is not None:
            RECORDER.phase_done(self._slot, _clock() - self._entered_at)
