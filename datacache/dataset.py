"""CachedDataset: samples by index, from Redis when it holds verified bytes, else from the origin,
which then repopulates the cache. torch.utils.data.DataLoader takes it as a map-style dataset."""

from __future__ import annotations

import logging
import multiprocessing.util
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis

from alnair.abi import cache_keys as keys, cache_urls

from . import allocator, content, process_record, worker_batches
from .cluster import UNAVAILABLE, ClusterReads, NodeDown, NodeUnavailable
from .counters import PendingCounters
from .health import RedisHealth
from .manifest import Manifest
from .origin import Origin
from .policy import JobSettings, footprint
from .resp_client import MgetPipeline
from .singleflight import SingleFlight
from .store import Writes, open_store
from .substitution import SUBSTITUTE_ROUNDS, Deferred, EpochPlan

T = TypeVar("T")
log = logging.getLogger(__name__)
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)
PIPELINE_DEPTH = 2  # MGETs in flight per connection in `batches`; 3 gained nothing (docs/benchmarks.md)
COUNTER_SECONDS = 0.5  # how often `batches` writes counters to Redis
ORIGIN_READS = 8  # origin reads of one process at once, for an origin that does not say (Origin.parallel_reads)

_runtime_lock = threading.Lock()


def _new_runtime_lock() -> None:
    global _runtime_lock
    _runtime_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_runtime_lock)  # a forked worker must not inherit a held lock


@dataclass
class _Asked:
    """A batch whose MGET is on its way: what was asked, and what the answer will need."""

    indices: list[int]
    digests: list[bytes | None]  # per position, from the manifest when asked
    fetch: process_record.FetchTimer  # running from the ask to the answer
    wanted: list[int] = field(default_factory=list)  # positions whose digests were known: the MGET's keys, in order
    redis_up: bool = True  # Redis was asked (misses) rather than skipped or failed (fallbacks)
    unavailable: set[int] = field(default_factory=set)  # positions whose cluster node failed or was down (fallbacks)
    deferred: list[int] = field(default_factory=list)  # positions given to deferred samples (substitutable datasets)
    sent: bool = False
    origin: dict[int, Future] = field(default_factory=dict)  # position -> its origin read
    writes: Writes = field(default_factory=Writes)  # what the batch learned from the origin


@dataclass
class _Runtime:
    """What belongs to one process: connections, pending counters, in-flight reads. A DataLoader
    worker (forked or spawned) builds its own on first use."""

    pid: int
    store: Any  # store.CacheStore, or store.ClusterStore for a redis+cluster:// URL
    health: RedisHealth
    origin_pool: ThreadPoolExecutor  # a batch's origin reads run at once
    counters: PendingCounters = field(default_factory=PendingCounters)
    origin_reads: SingleFlight = field(default_factory=SingleFlight)
    opened: bool = False
    flushed_at_exit: bool = False  # a multiprocessing child's counters are written when it exits
    served: int = 0  # samples served by this process, and their bytes: the mean size that makes the footprint
    served_bytes: int = 0


class CachedDataset:
    """A dataset whose raw sample bytes are cached in Redis under their SHA-256.

    `dataset[i]` and `dataset.__getitems__(indices)` return `transform(bytes)` (the bytes if no
    transform): the transform runs on every read, so augmentation still differs per epoch. A batch is
    one MGET; every cached value is checked against its manifest's check digest (or SHA-256
    where the manifest has none yet), and anything absent, evicted or wrong is read from the origin
    and written back. If Redis does not answer within `timeout` seconds, the
    batch comes from the origin and Redis is tried again after `retry_seconds`.

    With `substitutable`, `batches` (and so CacheLoader) serves a sample that misses later in the same
    pass and a cached one from the end of the pass in its place meanwhile (docs/datacache.md: when not to).

    `job`, `namespace`, `priority` and `quota_bytes` (default $ALNAIR_JOB_NAME, else the hostname;
    $ALNAIR_JOB_NAMESPACE; $ALNAIR_CACHE_PRIORITY; $ALNAIR_CACHE_QUOTA) are what the job asks of the space
    policy, within the operator's caps (docs/datacache.md, "Space for many jobs").
    """

    def __init__(
        self,
        redis_url: str,
        name: str,
        origin: Origin,
        *,
        transform: Callable[[bytes], Any] | None = None,
        job: str | None = None,
        timeout: float = 0.2,
        retry_seconds: float = 1.0,
        job_ttl_seconds: int = 3600,
        substitutable: bool = False,
        namespace: str | None = None,
        priority: float | None = None,
        quota_bytes: int | str | None = None,
    ):
        if not timeout > 0 or not retry_seconds > 0 or job_ttl_seconds < 1:
            raise ValueError("timeout and retry_seconds must be > 0, job_ttl_seconds >= 1")
        self.redis_url = cache_urls.check(redis_url)  # a bad URL is refused here, not at the first read
        self.name = keys.check_name("dataset", name)
        job = keys.check_name("job", job or os.environ.get("ALNAIR_JOB_NAME") or socket.gethostname())
        self.settings = JobSettings.resolve(job, namespace, priority, quota_bytes, job_ttl_seconds)
        self.job = self.settings.name
        self.origin = origin
        self.transform = transform
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.substitutable = substitutable
        self.fingerprint = origin.fingerprint()
        self.manifest = Manifest(len(origin))
        self._runtime: _Runtime | None = None
        self._runtime_here()

    def __len__(self) -> int:
        return self.manifest.samples

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """One batch: one MGET, origin reads for what the cache lacks, one write-back round trip (counters
        alone: in a multiprocessing child, such as a DataLoader worker, at most every COUNTER_SECONDS and
        when it exits). In a DataLoader worker the list is a WorkerBatch: its bytes reach the loader's process
        through shared memory."""
        runtime = self._runtime_here()
        counter_seconds = COUNTER_SECONDS if runtime.flushed_at_exit else 0
        fetched = self._batches([indices], 1, counter_seconds, counter_seconds)
        try:
            samples = next(fetched)
        finally:
            fetched.close()  # now, not when the generator is collected: the connection goes back, counters out
        return worker_batches.WorkerBatch(samples) if worker_batches.in_dataloader_worker() else samples

    def batches(
        self,
        index_batches: Iterable[Sequence[int]],
        depth: int = PIPELINE_DEPTH,
        counter_seconds: float = COUNTER_SECONDS,
    ) -> Iterator[list[Any]]:
        """`__getitems__` of each batch, in order, with up to `depth` batches' MGETs in flight on one
        connection: Redis builds the next reply while this thread receives and checks the last. Counters
        go to Redis at most every `counter_seconds` (with a batch's blobs, if it writes any) and when the
        run ends: a round trip of their own per batch would wait behind the next batch's reply.
        A substitutable dataset's batches are all taken first: the last ones give up substitutes."""
        return self._batches(index_batches, depth, counter_seconds, 0)

    def _batches(
        self, index_batches: Iterable[Sequence[int]], depth: int, counter_seconds: float, last_counter_seconds: float
    ) -> Iterator[list[Any]]:
        """`batches`, whose counters are written when it ends unless written less than `last_counter_seconds` ago."""
        runtime = self._runtime_here()
        reads = runtime.store.blob_reads(lambda error: self._redis_failed(runtime, error))
        asked: deque[_Asked] = deque()
        checked = ([self._checked(i) for i in indices] for indices in index_batches)
        plan = EpochPlan(list(checked)) if self.substitutable else None
        try:
            for indices in plan.batches if plan else checked:
                asked.append(self._ask(runtime, reads, list(indices), plan))
                if len(asked) >= depth:
                    yield self._answer(runtime, reads, asked.popleft(), counter_seconds, plan)
            while asked:
                yield self._answer(runtime, reads, asked.popleft(), counter_seconds, plan)
        finally:
            reads.close()
            self._write_back(runtime, Writes(), last_counter_seconds)

    def timed(self, batches: Iterable[T]) -> Iterator[T]:
        """`batches` as they come, measuring their consumer: how long it waited for each (its data stall) and the time
        from one to the next, counted for this job (stall_seconds, consumer_seconds): the space policy learns from
        them what a miss costs the job. CacheLoader measures itself; wrap anything else that yields this dataset's
        batches, such as `for batch in dataset.timed(DataLoader(dataset, ...))` or
        `dataset.timed(dataset.batches(...))`."""
        runtime = self._runtime_here()
        iterator, last = iter(batches), time.monotonic()
        try:
            while True:
                asked = time.monotonic()
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
                now = time.monotonic()
                self._count(runtime, **{keys.STALL_SECONDS: now - asked, keys.CONSUMER_SECONDS: now - last})
                self._write_back(runtime, Writes(), COUNTER_SECONDS)  # a DataLoader's process fetches nothing itself
                last = now
                yield batch
        finally:
            self._write_back(runtime, Writes())

    def close(self) -> None:
        """Write what is still pending and drop this process's connections and threads (a later read
        makes new ones)."""
        runtime = self._runtime_here()
        self._write_back(runtime, Writes())
        runtime.store.close()
        runtime.origin_pool.shutdown()
        self._runtime = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_runtime": None}  # connections and locks stay in their process

    def _checked(self, index: int) -> int:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range for {self.name!r} ({len(self)} samples)")
        return index

    def _runtime_here(self) -> _Runtime:
        runtime = self._runtime
        if runtime is None or runtime.pid != os.getpid():
            with _runtime_lock:
                runtime = self._runtime
                if runtime is None or runtime.pid != os.getpid():
                    allocator.keep_freed_memory()
                    pool = ThreadPoolExecutor(getattr(self.origin, "parallel_reads", ORIGIN_READS), "cache-origin")
                    store = open_store(self.redis_url, self.timeout, self.retry_seconds)
                    runtime = _Runtime(os.getpid(), store, RedisHealth(self.retry_seconds), pool)
                    self._open(runtime)
                    if multiprocessing.parent_process() is not None:  # its end runs multiprocessing's exit hooks
                        multiprocessing.util.Finalize(None, self._write_back, (runtime, Writes()), exitpriority=10)
                        runtime.flushed_at_exit = True
                    self._runtime = runtime
        return runtime

    def _open(self, runtime: _Runtime) -> None:
        """Register the dataset under this origin's fingerprint and take the entries Redis knows: a new
        process (a DataLoader worker of a later epoch, say) starts from what earlier ones learned."""
        try:
            self.manifest.merge(*runtime.store.open(self.name, self.fingerprint, len(self)))
            runtime.opened = True
        except redis.RedisError as e:
            self._redis_failed(runtime, e)

    def _ask(
        self, runtime: _Runtime, reads: MgetPipeline | ClusterReads, indices: list[int], plan: EpochPlan | None = None
    ) -> _Asked:
        """Sends the batch's MGET for the samples whose digests are known, unless Redis is away."""
        if not runtime.opened and runtime.health.available():
            self._open(runtime)  # Redis was away when this process started
        asked = _Asked(indices, [self.manifest.digest(i) for i in indices], process_record.FetchTimer())
        if plan is not None:
            plan.asked += 1
            asked.deferred = [position for position, index in enumerate(indices) if index in plan.deferred]
        asked.wanted = [
            position
            for position, digest in enumerate(asked.digests)
            if digest is not None and position not in asked.deferred
        ]
        for position, digest in enumerate(asked.digests):
            if digest is None and position not in asked.deferred:
                # never cached: its origin read starts now, beside the batches before it
                if plan is None:
                    self._start_origin_read(runtime, asked, position)
                else:
                    self._defer(runtime, plan, indices[position], fallback=False)
        asked.redis_up = runtime.health.available()
        if asked.redis_up and asked.wanted:
            try:
                reads.send([keys.blob(asked.digests[p]) for p in asked.wanted])
                asked.sent = True
            except redis.RedisError as e:
                self._redis_failed(runtime, e)
                asked.redis_up = False
        return asked

    def _answer(
        self,
        runtime: _Runtime,
        reads: MgetPipeline | ClusterReads,
        asked: _Asked,
        counter_seconds: float,
        plan: EpochPlan | None = None,
    ) -> list[Any]:
        """The asked batch: verified values from Redis, the rest from the origin (or, substitutable, from
        the end of the pass); then the write-back."""
        samples: list[bytes | None] = [None] * len(asked.indices)
        if asked.sent:
            asked.redis_up = self._from_cache(runtime, reads, asked, samples)
        if plan is not None:
            self._substitute(runtime, asked, samples, plan)
        from_origin = [position for position, sample in enumerate(samples) if sample is None]
        for position in from_origin:  # absent, evicted or wrong in Redis: read now, all at once
            if position not in asked.origin:
                self._start_origin_read(runtime, asked, position)
        for position in from_origin:
            samples[position] = asked.origin[position].result()
        fallbacks = len(asked.unavailable) if asked.redis_up else len(from_origin)
        self._count(
            runtime,
            **{
                keys.MISSES: len(from_origin) - fallbacks,
                keys.FALLBACKS: fallbacks,
                keys.ORIGIN_BYTES: sum(len(samples[p]) for p in from_origin),
            },
        )
        runtime.served += len(samples)
        runtime.served_bytes += sum(map(len, samples))
        runtime.counters.observe_fetch(asked.fetch.done())
        self._write_back(runtime, asked.writes if asked.redis_up else Writes(), counter_seconds)
        return [self.transform(s) for s in samples] if self.transform else samples

    def _from_cache(
        self, runtime: _Runtime, reads: MgetPipeline | ClusterReads, asked: _Asked, samples: list[bytes | None]
    ) -> bool:
        """Fill `samples` with the verified values of the asked MGET; False if Redis did not answer."""
        try:
            values = reads.receive()
        except redis.RedisError as e:
            self._redis_failed(runtime, e)
            return False
        if values is None:  # lost with the connection when an earlier batch's reply failed (counted then)
            return False
        hits = corrupt = cache_bytes = 0
        for position, value in zip(asked.wanted, values):
            if value is None:
                continue
            if value is UNAVAILABLE:  # its cluster node failed (counted by the reads): the origin's, a fallback
                asked.unavailable.add(position)
                continue
            if self._verified(asked.indices[position], asked.digests[position], value, asked.writes):
                samples[position] = value
                hits += 1
                cache_bytes += len(value)
            else:
                corrupt += 1  # read from the origin like a miss, and overwritten by the write-back
        self._count(runtime, **{keys.HITS: hits, keys.CORRUPT: corrupt, keys.CACHE_BYTES: cache_bytes})
        return True

    def _verified(self, index: int, digest: bytes, value: bytes, writes: Writes) -> bool:
        """Whether `value` is sample `index`'s bytes: its check digest as the manifest records it, or else
        (no check digest yet, as in a manifest written before them, or one out of step) its SHA-256,
        which then records the check digest for the next read."""
        check = self.manifest.check(index)
        if check is not None and content.check_digest(value, digest) == check:
            return True
        if content.address(value) != digest:
            return False
        check = content.check_digest(value, digest)
        self.manifest.learn_check(index, check)
        writes.checks.append((index, digest, check))
        return True

    def _substitute(self, runtime: _Runtime, asked: _Asked, samples: list[bytes | None], plan: EpochPlan) -> None:
        """Fills every position: deferred samples given this batch's slots, then, for each sample that missed
        (its origin read now deferred), a cached one from the end of the pass, or its own read if none is left."""
        for position in asked.deferred:  # its origin read has run since an earlier batch missed it
            self._serve_deferred(runtime, asked, samples, plan, position)
        missing = [position for position, sample in enumerate(samples) if sample is None]
        for position in missing:
            self._defer(runtime, plan, asked.indices[position], not asked.redis_up or position in asked.unavailable)
        asked.unavailable.clear()  # counted when served
        if missing and asked.redis_up and runtime.health.available():
            missing = self._fill(runtime, asked, samples, plan, missing)
        for position in missing:  # no substitute: wait for its own read
            self._serve_deferred(runtime, asked, samples, plan, position)

    def _fill(
        self, runtime: _Runtime, asked: _Asked, samples: list[bytes | None], plan: EpochPlan, missing: list[int]
    ) -> list[int]:
        """Serves cached samples from the end of the pass at the `missing` positions, each missed sample
        taking its substitute's slot there; returns the positions still unfilled."""
        missing, hits, cache_bytes = list(missing), 0, 0
        for _ in range(SUBSTITUTE_ROUNDS):
            slots = plan.candidates(len(missing), lambda index: self.manifest.digest(index) is not None)
            if not slots:
                break
            indices = [plan.batches[batch][position] for batch, position in slots]
            digests = [self.manifest.digest(index) for index in indices]
            try:
                values = runtime.store.read_now(
                    [keys.blob(d) for d in digests], lambda e: self._redis_failed(runtime, e)
                )
            except redis.RedisError as e:
                self._redis_failed(runtime, e)
                break
            for slot, index, digest, value in zip(slots, indices, digests, values):
                if isinstance(value, bytes) and self._verified(index, digest, value, asked.writes):
                    position = missing.pop(0)
                    samples[position] = value
                    plan.give(slot, asked.indices[position])
                    hits, cache_bytes = hits + 1, cache_bytes + len(value)
                else:  # it missed too: read now, served in its own slot
                    self._count(runtime, **{keys.CORRUPT: int(isinstance(value, bytes))})
                    self._defer(runtime, plan, index, fallback=value is UNAVAILABLE)
            if not missing:
                break
        self._count(runtime, **{keys.HITS: hits, keys.SUBSTITUTED: hits, keys.CACHE_BYTES: cache_bytes})
        return missing

    def _defer(self, runtime: _Runtime, plan: EpochPlan, index: int, fallback: bool) -> None:
        """Starts sample `index`'s origin read, to be served in whichever slot it is given."""
        if index not in plan.deferred:
            writes = Writes()
            plan.deferred[index] = Deferred(
                runtime.origin_pool.submit(self._from_origin, runtime, index, writes), writes, fallback
            )

    def _serve_deferred(
        self, runtime: _Runtime, asked: _Asked, samples: list[bytes | None], plan: EpochPlan, position: int
    ) -> None:
        deferred = plan.deferred.pop(asked.indices[position])
        samples[position] = deferred.read.result()
        asked.writes.merge(deferred.writes)
        self._count(
            runtime,
            **{keys.FALLBACKS if deferred.fallback else keys.MISSES: 1, keys.ORIGIN_BYTES: len(samples[position])},
        )

    def _start_origin_read(self, runtime: _Runtime, asked: _Asked, position: int) -> None:
        asked.origin[position] = runtime.origin_pool.submit(
            self._from_origin, runtime, asked.indices[position], asked.writes
        )

    def _from_origin(self, runtime: _Runtime, index: int, writes: Writes) -> bytes:
        data = runtime.origin_reads.run(index, lambda: self.origin.read(index))
        digest = content.address(data)
        check = content.check_digest(data, digest)
        self.manifest.learn(index, digest, len(data), check)
        writes.blobs[digest] = data
        writes.entries.append((index, digest, len(data), check))
        return data

    def _write_back(self, runtime: _Runtime, writes: Writes, counter_seconds: float = 0) -> None:
        """Blobs, manifest entries and counters in one round trip; counters wait for a later one if
        Redis is away, or if they were written less than `counter_seconds` ago and nothing else is."""
        if not runtime.health.available():
            return
        deltas = runtime.counters.take(0 if writes else counter_seconds)
        try:
            refused = runtime.store.write(
                self.name,
                self.fingerprint,
                writes,
                self.settings,
                footprint(len(self), runtime.served, runtime.served_bytes),
                deltas,
            )
        except redis.RedisError as e:
            runtime.counters.restore(deltas)
            self._redis_failed(runtime, e)
            return
        if refused:
            self._count(runtime, **{keys.REDIS_ERRORS: refused})

    @staticmethod
    def _count(runtime: _Runtime, **deltas: int) -> None:
        """Pending for Redis, and at once in this process's shared-memory record."""
        runtime.counters.add(**deltas)
        process_record.add(deltas)

    def _redis_failed(self, runtime: _Runtime, error: redis.RedisError) -> None:
        if isinstance(error, NodeDown):
            return  # not asked: its failure was counted when it happened, as with one server
        self._count(runtime, **{keys.REDIS_ERRORS: 1})
        if isinstance(error, NodeUnavailable):  # one cluster node: the store keeps it down, the others serve
            log.warning("dataset cache %s: %s", self.name, error)
        elif isinstance(error, UNREACHABLE):
            if runtime.health.available():
                log.warning(
                    "dataset cache %s: Redis unreachable, reading from the origin for %gs: %s",
                    self.name,
                    self.retry_seconds,
                    error,
                )
            runtime.health.failed()
        else:  # refused (out of memory, say): counted, and Redis is still asked
            log.debug("dataset cache %s: Redis error: %s", self.name, error)
