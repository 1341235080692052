"""Which connections may be open. Priority peers and everyone else each have their own limit, so no number of
connections from elsewhere keeps a priority peer out; at a limit, the connection of that class idle the longest
(between requests, or still sending one) is closed for the new one, and only when every one of them is being
answered is the new one refused."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator


class Slot:
    """One open connection's place; `close` ends the connection at whatever stage it is (set by the server)."""

    __slots__ = ("priority", "busy", "released", "close")

    def __init__(self, priority: bool):
        self.priority = priority
        self.busy = 0  # requests being answered
        self.released = False
        self.close: Callable[[], object] = lambda: None


class ConnectionBounds:
    def __init__(self, limit: int):
        self.limit = limit
        self._open = {False: 0, True: 0}
        self._idle: dict[bool, OrderedDict[Slot, None]] = {False: OrderedDict(), True: OrderedDict()}  # oldest first

    def open_connections(self, priority: bool | None = None) -> int:
        return sum(self._open.values()) if priority is None else self._open[priority]

    def admit(self, priority: bool) -> tuple[Slot | None, Slot | None]:
        """(the new connection's slot, the idle one it takes the place of, for the caller to close); the slot is
        None when the class is at its limit and none of its connections is idle."""
        evicted = None
        if self._open[priority] >= self.limit:
            if not self._idle[priority]:
                return None, None
            evicted = next(iter(self._idle[priority]))
            self.release(evicted)
        slot = Slot(priority)
        self._open[priority] += 1
        self._idle[priority][slot] = None
        return slot, evicted

    @contextlib.contextmanager
    def answering(self, slot: Slot) -> Iterator[None]:
        """While a request is answered its connection is not idle; after, it is the most recently idle."""
        slot.busy += 1
        self._idle[slot.priority].pop(slot, None)
        try:
            yield
        finally:
            slot.busy -= 1
            if not slot.busy and not slot.released:
                self._idle[slot.priority][slot] = None

    def release(self, slot: Slot) -> None:
        """The connection is closed (or being closed); its place is free. Idempotent."""
        if not slot.released:
            slot.released = True
            self._open[slot.priority] -= 1
            self._idle[slot.priority].pop(slot, None)
