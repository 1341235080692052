"""CacheLoader: batches of a CachedDataset fetched by parallel threads, several batches ahead,
delivered in order; no PyTorch needed."""
from __future__ import annotations

import os
import random
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator

from .dataset import CachedDataset


class CacheLoader:
    """Iterates over a CachedDataset in batches, one epoch per `iter()`.

    `workers` threads each fetch whole batches (one MGET and one write-back each, on their own
    connection); the socket reads and hash checks release the GIL, so threads scale without
    copying samples between processes. By default one per CPU, at most 4: more threads than CPUs
    only add GIL hand-offs (bench/cache_loader.py). Up to `prefetch` batches are in flight ahead of
    the consumer.
    With `shuffle`, epoch e visits the samples in the order random.Random(seed + e) gives, so a run
    is reproducible. `collate` turns a batch's list of samples into what the loop wants.
    """

    def __init__(self, dataset: CachedDataset, batch_size: int, *, workers: int | None = None, prefetch: int | None = None,
                 shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 collate: Callable[[list[Any]], Any] | None = None):
        if batch_size < 1 or (workers is not None and workers < 1) or (prefetch is not None and prefetch < 1):
            raise ValueError("batch_size, workers and prefetch must be >= 1")
        self.dataset = dataset
        self.batch_size = batch_size
        self.workers = workers or min(4, os.cpu_count() or 1)
        self.prefetch = prefetch or 2 * self.workers
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.collate = collate
        self.epoch = 0

    def __len__(self) -> int:
        full, rest = divmod(len(self.dataset), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def batch_indices(self, epoch: int) -> list[list[int]]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return batches[:len(self)]

    def __iter__(self) -> Iterator[Any]:
        batches = iter(self.batch_indices(self.epoch))
        self.epoch += 1
        in_flight: deque[Future] = deque()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="cache-loader") as pool:
            try:
                for indices in batches:
                    in_flight.append(pool.submit(self.dataset.__getitems__, indices))
                    if len(in_flight) >= self.prefetch:
                        yield self._collated(in_flight.popleft().result())
                while in_flight:
                    yield self._collated(in_flight.popleft().result())
            finally:
                for future in in_flight:  # the consumer stopped early: drop what it will not take
                    future.cancel()

    def _collated(self, samples: list[Any]) -> Any:
        return self.collate(samples) if self.collate else samples
