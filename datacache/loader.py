"""CacheLoader: batches of a CachedDataset fetched ahead by threads with pipelined MGETs, delivered in
order; no PyTorch needed."""

from __future__ import annotations

import itertools
import queue
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .dataset import CachedDataset


class _Failed:
    """A fetching thread's exception, raised to the consumer in the failed batch's place."""

    def __init__(self, error: BaseException):
        self.error = error


class _ReadAhead:
    """The first batches of an epoch, fetched by a thread of their own while the consumer finishes the epoch before:
    an epoch's first batch otherwise waits for all its misses at once, with nothing to hide them behind."""

    def __init__(self, loader: CacheLoader, epoch: int, batches: list[list[int]]):
        self.epoch, self.batches = epoch, batches
        self.ready: queue.Queue = queue.Queue(maxsize=len(batches) + 1)  # never full: the thread never blocks
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=loader._fetch, args=(batches, self.ready, self.stop), daemon=True, name="cache-loader-ahead"
        )
        self.thread.start()

    def serves(self, epoch: int, batches: list[list[int]]) -> bool:
        """Whether these are the first batches of what the loader now wants (its epoch, seed or size may have been
        changed since)."""
        return self.epoch == epoch and self.batches == batches[: len(self.batches)]

    def cancel(self) -> None:
        self.stop.set()
        self.thread.join()


class CacheLoader:
    """Iterates over a CachedDataset in batches, one epoch per `iter()`.

    `workers` threads each fetch every `workers`-th batch through `CachedDataset.batches`: one
    connection with the next batch's MGET sent before the last one's reply is read, so Redis builds a
    reply while the thread checks the previous one. The socket reads and hash checks release the GIL.
    One by default: one such thread keeps a Redis busy, and more served fewer samples per second on
    2 CPUs and on 16 alike (GIL hand-offs; docs/benchmarks.md). A batch's origin reads run in
    parallel anyway (CachedDataset), so a slow origin does not call for more workers either.
    Up to `prefetch` batches wait ready ahead of the consumer. With `read_ahead` (the default), from the loader's
    second epoch on (one iterated once may be a one-off pass), the next epoch's first `prefetch` batches are fetched
    while the consumer takes this epoch's last ones, so an epoch does not begin with a batch of misses and nothing
    to hide them behind. A run that stops there has read them for nothing (their hits and misses count);
    `close()` ends such a read.
    With `shuffle`, epoch e visits the samples in the order random.Random(seed + e) gives, so a run
    is reproducible. `collate` turns a batch's list of samples into what the loop wants. The time the loop
    waits for each batch is counted as the job's data stall (CachedDataset.timed), for the space policy.
    """

    def __init__(
        self,
        dataset: CachedDataset,
        batch_size: int,
        *,
        workers: int | None = None,
        prefetch: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        read_ahead: bool = True,
    ):
        if batch_size < 1 or (workers is not None and workers < 1) or (prefetch is not None and prefetch < 1):
            raise ValueError("batch_size, workers and prefetch must be >= 1")
        self.dataset = dataset
        self.batch_size = batch_size
        self.workers = workers or 1
        self.prefetch = prefetch or 2 * self.workers
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self.collate = collate
        self.read_ahead = read_ahead
        self.epoch = 0
        self._ahead: _ReadAhead | None = None
        self._passes = 0  # epochs begun

    def __len__(self) -> int:
        full, rest = divmod(len(self.dataset), self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def batch_indices(self, epoch: int) -> list[list[int]]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + epoch).shuffle(order)
        batches = [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        return batches[: len(self)]

    def __iter__(self) -> Iterator[Any]:
        epoch, batches = self.epoch, self.batch_indices(self.epoch)
        self.epoch += 1
        self._passes += 1
        ahead, self._ahead = self._ahead, None
        if ahead and not ahead.serves(epoch, batches):
            ahead.cancel()
            ahead = None
        rest = batches[len(ahead.batches) :] if ahead else batches
        workers = min(self.workers, len(rest)) or 1
        # Batch k comes from thread k % workers, through that thread's queue: the order needs no sorting.
        ready = [queue.Queue(maxsize=max(1, self.prefetch // workers)) for _ in range(workers)]
        stop = threading.Event()
        threads = [
            threading.Thread(
                target=self._fetch, args=(rest[w::workers], ready[w], stop), daemon=True, name=f"cache-loader-{w}"
            )
            for w in range(workers)
        ]
        for thread in threads:
            thread.start()
        delivered = self._delivered(ready, len(rest))
        if ahead:
            delivered = itertools.chain(self._delivered([ahead.ready], len(ahead.batches)), delivered)
        read_ahead_at = max(0, len(batches) - self.prefetch) if self.read_ahead and self._passes > 1 else -1
        try:
            for k, batch in enumerate(self.dataset.timed(delivered)):  # the consumer's stall counted
                if k == read_ahead_at:  # the threads have (nearly) fetched the rest: the next epoch's turn
                    self._ahead = _ReadAhead(self, epoch + 1, self.batch_indices(epoch + 1)[: self.prefetch])
                yield self._collated(batch)
        finally:
            stop.set()
            for waiting in ready:  # a thread blocked on a full queue puts its batch, sees `stop` and ends
                while not waiting.empty():
                    waiting.get_nowait()
            for thread in threads:
                thread.join()
            if ahead:
                ahead.cancel()

    def close(self) -> None:
        """Ends the next epoch's read ahead, if one runs (iterating again starts that epoch afresh)."""
        ahead, self._ahead = self._ahead, None
        if ahead:
            ahead.cancel()

    @staticmethod
    def _delivered(ready: list[queue.Queue], count: int) -> Iterator[list[Any]]:
        for k in range(count):
            batch = ready[k % len(ready)].get()
            if isinstance(batch, _Failed):
                raise batch.error
            yield batch

    def _fetch(self, batches: list[list[int]], ready: queue.Queue, stop: threading.Event) -> None:
        fetched = self.dataset.batches(batches)
        try:
            for samples in fetched:
                ready.put(samples)
                if stop.is_set():
                    return
        except BaseException as e:
            ready.put(_Failed(e))
        finally:
            fetched.close()

    def _collated(self, samples: list[Any]) -> Any:
        return self.collate(samples) if self.collate else samples
