"""CachedDataset: samples by index, from Redis when it holds verified bytes, else from the origin,
which then repopulates the cache. torch.utils.data.DataLoader takes it as a map-style dataset."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import redis

from . import allocator, content, keys, process_record
from .counters import PendingCounters
from .health import RedisHealth
from .manifest import Manifest
from .origin import Origin
from .singleflight import SingleFlight
from .store import CacheStore, Writes

log = logging.getLogger(__name__)
UNREACHABLE = (redis.ConnectionError, redis.TimeoutError)

_runtime_lock = threading.Lock()


def _new_runtime_lock() -> None:
    global _runtime_lock
    _runtime_lock = threading.Lock()


os.register_at_fork(after_in_child=_new_runtime_lock)  # a forked worker must not inherit a held lock


@dataclass
class _Runtime:
    """What belongs to one process: connections, pending counters, in-flight reads. A DataLoader
    worker (forked or spawned) builds its own on first use."""

    pid: int
    store: CacheStore
    health: RedisHealth
    counters: PendingCounters = field(default_factory=PendingCounters)
    origin_reads: SingleFlight = field(default_factory=SingleFlight)
    opened: bool = False


class CachedDataset:
    """A dataset whose raw sample bytes are cached in Redis under their SHA-256.

    `dataset[i]` and `dataset.__getitems__(indices)` return `transform(bytes)` (the bytes if no
    transform): the transform runs on every read, so augmentation still differs per epoch. A batch is
    one MGET; every cached value is checked against its manifest's check digest (or SHA-256
    where the manifest has none yet), and anything absent, evicted or wrong is read from the origin
    and written back. If Redis does not answer within `timeout` seconds, the
    batch comes from the origin and Redis is tried again after `retry_seconds`.
    """

    def __init__(self, redis_url: str, name: str, origin: Origin, *, transform: Callable[[bytes], Any] | None = None,
                 job: str | None = None, timeout: float = 0.2, retry_seconds: float = 1.0, job_ttl_seconds: int = 3600):
        if not timeout > 0 or not retry_seconds > 0 or job_ttl_seconds < 1:
            raise ValueError("timeout and retry_seconds must be > 0, job_ttl_seconds >= 1")
        self.redis_url = redis_url
        self.name = keys.check_name("dataset", name)
        self.job = keys.check_name("job", job or os.environ.get("ALNAIR_JOB_NAME") or socket.gethostname())
        self.origin = origin
        self.transform = transform
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self.job_ttl_seconds = job_ttl_seconds
        self.fingerprint = origin.fingerprint()
        self.manifest = Manifest(len(origin))
        self._runtime: _Runtime | None = None
        self._runtime_here()

    def __len__(self) -> int:
        return self.manifest.samples

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """One batch: one MGET, origin reads for what the cache lacks, one write-back round trip."""
        with process_record.timing_fetch():
            started = time.perf_counter()
            runtime = self._runtime_here()
            samples, writes = self._fetch(runtime, [self._checked(i) for i in indices])
            runtime.counters.observe_fetch(time.perf_counter() - started)
        self._write_back(runtime, writes)
        return [self.transform(s) for s in samples] if self.transform else samples

    def close(self) -> None:
        """Write what is still pending and drop this process's connections."""
        runtime = self._runtime_here()
        self._write_back(runtime, Writes())
        runtime.store.close()

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
                    runtime = _Runtime(os.getpid(), CacheStore(self.redis_url, self.timeout), RedisHealth(self.retry_seconds))
                    self._open(runtime)
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

    def _fetch(self, runtime: _Runtime, indices: list[int]) -> tuple[list[bytes], Writes]:
        if not runtime.opened and runtime.health.available():
            self._open(runtime)  # Redis was away when this process started
        digests = [self.manifest.digest(i) for i in indices]
        samples: list[bytes | None] = [None] * len(indices)
        redis_up = runtime.health.available()
        writes = Writes()
        if redis_up:
            redis_up = self._from_cache(runtime, indices, digests, samples, writes)
        from_origin = [position for position, sample in enumerate(samples) if sample is None]
        for position in from_origin:
            samples[position] = self._from_origin(runtime, indices[position], writes)
        self._count(runtime, **{keys.MISSES if redis_up else keys.FALLBACKS: len(from_origin),
                                keys.ORIGIN_BYTES: sum(len(samples[p]) for p in from_origin)})
        return samples, writes if redis_up else Writes()

    def _from_cache(self, runtime: _Runtime, indices: list[int], digests: list[bytes | None],
                    samples: list[bytes | None], writes: Writes) -> bool:
        """Fill `samples` with the verified values Redis holds; False if Redis could not be asked."""
        wanted = [position for position, digest in enumerate(digests) if digest is not None]
        if not wanted:
            return True
        try:
            values = runtime.store.get_blobs([digests[p] for p in wanted])
        except redis.RedisError as e:
            self._redis_failed(runtime, e)
            return False
        hits = corrupt = cache_bytes = 0
        for position, value in zip(wanted, values):
            if value is None:
                continue
            if self._verified(indices[position], digests[position], value, writes):
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

    def _from_origin(self, runtime: _Runtime, index: int, writes: Writes) -> bytes:
        data = runtime.origin_reads.run(index, lambda: self.origin.read(index))
        digest = content.address(data)
        check = content.check_digest(data, digest)
        self.manifest.learn(index, digest, len(data), check)
        writes.blobs[digest] = data
        writes.entries.append((index, digest, len(data), check))
        return data

    def _write_back(self, runtime: _Runtime, writes: Writes) -> None:
        """Blobs, manifest entries and counters in one round trip; counters wait for the next one if
        Redis is away."""
        if not runtime.health.available():
            return
        deltas = runtime.counters.take()
        try:
            refused = runtime.store.write(self.name, self.fingerprint, writes, self.job, self.job_ttl_seconds, deltas)
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
        self._count(runtime, **{keys.REDIS_ERRORS: 1})
        if isinstance(error, UNREACHABLE):
            if runtime.health.available():
                log.warning("dataset cache %s: Redis unreachable, reading from the origin for %gs: %s",
                            self.name, self.retry_seconds, error)
            runtime.health.failed()
        else:  # refused (out of memory, say): counted, and Redis is still asked
            log.debug("dataset cache %s: Redis error: %s", self.name, error)
