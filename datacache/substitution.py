"""Substitutable reads (CachedDataset(substitutable=True)): within an epoch, a sample that misses the cache is
replaced at once by a cached sample not yet served, taken from the end of the epoch, and takes that sample's
place there while its origin read runs: every sample is served once per epoch, in another order."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from .store import Writes

SUBSTITUTE_ROUNDS = 3  # tries per batch to find cached substitutes (each a round trip) before waiting for the origin


@dataclass
class Deferred:
    """A missed sample whose origin read runs while the epoch goes on; served in the slot it was given."""

    read: Future  # its bytes
    writes: Writes  # what its read learned, written back with the batch that serves it
    fallback: bool  # missed because Redis (its node) did not answer, not because Redis lacked it


class EpochPlan:
    """The batches of one pass of `CachedDataset.batches`, whose not-yet-asked part (the tail) gives up
    substitutes: a substitute's slot then holds the sample it stood in for."""

    def __init__(self, batches: list[list[int]]):
        self.batches = batches
        self.asked = 0  # batches asked so far; those after are the tail
        self.deferred: dict[int, Deferred] = {}  # sample index -> its origin read
        self._cursor = (len(batches), 0)  # (batch, position): the tail is searched from the end, once

    def candidates(self, count: int, known: Callable[[int], bool]) -> list[tuple[int, int]]:
        """Up to `count` slots (batch, position) of the tail, from the end backward, whose samples the
        manifest knows (`known`: likely cached) and whose origin reads were not started."""
        found: list[tuple[int, int]] = []
        while len(found) < count:
            batch, position = self._cursor
            if position == 0:
                if batch - 1 < self.asked:
                    break
                self._cursor = (batch - 1, len(self.batches[batch - 1]))
                continue
            if batch < self.asked:
                break
            self._cursor = (batch, position - 1)
            index = self.batches[batch][position - 1]
            if index not in self.deferred and known(index):
                found.append((batch, position - 1))
        return found

    def give(self, slot: tuple[int, int], index: int) -> None:
        """`index` (a deferred sample) is served in `slot`, whose own sample was served in its place."""
        self.batches[slot[0]][slot[1]] = index
