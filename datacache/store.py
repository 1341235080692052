"""The cache's Redis side: open a dataset's manifest, read blobs, and write blobs, manifest entries, check
digests and counters in one pipelined round trip; on one server (CacheStore) or a Redis Cluster (ClusterStore)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from alnair.abi import cache_keys as keys
from alnair.abi import cache_urls

from . import cluster as cluster_
from .resp_client import MgetPipeline, RespClient

SOCKET_READ_SIZE = 4 << 20  # a batch of 100 KB samples arrives in a few reads, not hundreds

# KEYS: dataset hash, manifest, check digests, dataset registry. ARGV: dataset name, fingerprint, samples.
# A new fingerprint means the origin changed: the old manifest and checks are dropped. Returns both.
OPEN = """
redis.call('SADD', KEYS[4], ARGV[1])
if redis.call('HGET', KEYS[1], 'fingerprint') ~= ARGV[2] then
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[2], 'samples', ARGV[3], 'logical_bytes', 0)
end
return {redis.call('GET', KEYS[2]) or '', redis.call('GET', KEYS[3]) or ''}
"""

# KEYS: dataset hash, manifest, content index, check digests. ARGV: fingerprint, then (index, entry, size,
# check digest) per sample. Writes only under the fingerprint the writer read its samples with; keeps the
# dataset's logical bytes and the distinct content's physical bytes.
RECORD = f"""
if redis.call('HGET', KEYS[1], 'fingerprint') ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('HSET', KEYS[1], 'logical_bytes', 0) end
for i = 2, #ARGV, 4 do
  local index, entry, size = tonumber(ARGV[i]), ARGV[i + 1], tonumber(ARGV[i + 2])
  local offset = index * 40
  redis.call('SETRANGE', KEYS[4], index * {keys.CHECK_SIZE}, ARGV[i + 3])
  local old = redis.call('GETRANGE', KEYS[2], offset, offset + 39)
  if old ~= entry then
    local old_size = 0
    if #old == 40 then
      for j = 33, 40 do old_size = old_size * 256 + string.byte(old, j) end
    end
    redis.call('SETRANGE', KEYS[2], offset, entry)
    redis.call('HINCRBY', KEYS[1], 'logical_bytes', size - old_size)
  end
  if redis.call('HSETNX', KEYS[3], string.sub(entry, 1, 32), size) == 1 then
    redis.call('HINCRBY', KEYS[3], 'total', size)
  end
end
return 0
"""

# KEYS: dataset hash, manifest, check digests. ARGV: fingerprint, then (index, SHA-256, check digest) per
# sample whose cached bytes SHA-256 vouched for. Sets a check digest only beside the entry it was made for.
RECORD_CHECKS = f"""
if redis.call('HGET', KEYS[1], 'fingerprint') ~= ARGV[1] then return -1 end
for i = 2, #ARGV, 3 do
  local index = tonumber(ARGV[i])
  if redis.call('GETRANGE', KEYS[2], index * 40, index * 40 + 31) == ARGV[i + 1] then
    redis.call('SETRANGE', KEYS[3], index * {keys.CHECK_SIZE}, ARGV[i + 2])
  end
end
return 0
"""


# KEYS: dataset hash, job hash, jobs, then the metadata to keep warm for LRU (manifest, content index,
# dataset registry, check digests). ARGV: job, job TTL, now, the number of integer deltas, then (field, delta) pairs,
# integers first. One command instead of two increments per field: counters travel with every batch.
ADD_COUNTERS = """
local integers = tonumber(ARGV[4])
for i = 5, #ARGV, 2 do
  local increment = (i - 5) / 2 < integers and 'HINCRBY' or 'HINCRBYFLOAT'
  redis.call(increment, KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call(increment, KEYS[2], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[3] - ARGV[2])
redis.call('TOUCH', KEYS[4], KEYS[5], KEYS[6], KEYS[7])
return 0
"""


def connect(url: str, timeout: float, read_size: int = SOCKET_READ_SIZE) -> redis.Redis:
    """A client that gives up within `timeout` (connect or any read) and never retries on its own:
    the caller falls back to the origin instead. Each connection holds a `read_size` buffer."""
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=Retry(NoBackoff(), 0), socket_read_size=read_size)


def counter_args(deltas: dict[str, float]) -> list:
    """ADD_COUNTERS's count of integer deltas, then (field, delta) pairs, integers first."""
    ordered = sorted(deltas.items(), key=lambda item: isinstance(item[1], float))
    return [sum(not isinstance(value, float) for value in deltas.values()), *(x for item in ordered for x in item)]


@dataclass
class Writes:
    """What one batch learned from the origin, to be written back."""

    blobs: dict[bytes, bytes] = field(default_factory=dict)  # digest -> bytes
    entries: list[tuple[int, bytes, int, bytes]] = field(default_factory=list)  # (index, digest, size, check)
    checks: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # (index, digest, check) of cached bytes

    def __bool__(self) -> bool:
        return bool(self.blobs or self.entries or self.checks)

    def merge(self, other: "Writes") -> None:
        self.blobs.update(other.blobs)
        self.entries.extend(other.entries)
        self.checks.extend(other.checks)


class CacheStore:
    def __init__(self, url: str, timeout: float):
        self.client = connect(url, timeout)
        self._direct = RespClient(url, timeout, self.client)
        self._open = self.client.register_script(OPEN)
        self._record = self.client.register_script(RECORD)
        self._record_checks = self.client.register_script(RECORD_CHECKS)
        self._add_counters = self.client.register_script(ADD_COUNTERS)

    def open(self, dataset: str, fingerprint: str, samples: int) -> tuple[bytes, bytes]:
        """The dataset's manifest and check digests."""
        keys_ = [keys.dataset(dataset), keys.manifest(dataset), keys.checks(dataset), keys.DATASETS]
        manifest, checks = self._open(keys=keys_, args=[dataset, fingerprint, samples])
        return manifest, checks

    def blob_reads(self, on_error: Callable[[redis.RedisError], None]) -> MgetPipeline:
        """Pipelined MGETs of blobs (their keys.blob names) on a connection of its own; close it when done.
        A failure raises (`on_error` is for a cluster's reads, which fail node by node)."""
        return self._direct.pipeline()

    def read_now(self, names: list[str], on_error: Callable[[redis.RedisError], None]) -> list[bytes | None]:
        """One MGET on a connection of its own (substitutes for a batch's misses); a failure raises."""
        return self._direct.mget(names)

    def write(self, dataset: str, fingerprint: str, writes: Writes, job: str, job_ttl: int,
              deltas: dict[str, float]) -> int:
        """One round trip; returns how many commands Redis refused (out of memory, say)."""
        if not writes:
            # A batch the cache served: one EVALSHA on the cache's own connection, without a pipeline
            # (redis-py asks SCRIPT EXISTS before it executes a pipeline that holds a script: a second
            # round trip) and without redis-py's ~100 µs of CPU per command.
            if not deltas:
                return 0
            try:
                self._direct.run_script(self._add_counters, *self._counters_call(dataset, job, job_ttl, deltas))
            except redis.ResponseError:
                return 1
            return 0
        pipe = self.client.pipeline(transaction=False)
        for digest, data in writes.blobs.items():
            pipe.set(keys.blob(digest), data)
        if writes.entries:
            args = [fingerprint]
            for index, digest, size, check in writes.entries:
                args += [index, keys.ENTRY.pack(digest, size), size, check]
            self._record(keys=[keys.dataset(dataset), keys.manifest(dataset), keys.CONTENT, keys.checks(dataset)],
                         args=args, client=pipe)
        if writes.checks:
            self._record_checks(keys=[keys.dataset(dataset), keys.manifest(dataset), keys.checks(dataset)],
                                args=[fingerprint, *(x for item in writes.checks for x in item)], client=pipe)
        if deltas:
            counters_keys, counters_args = self._counters_call(dataset, job, job_ttl, deltas)
            self._add_counters(keys=counters_keys, args=counters_args, client=pipe)
        results = pipe.execute(raise_on_error=False)
        return sum(isinstance(r, redis.ResponseError) for r in results)

    @staticmethod
    def _counters_call(dataset: str, job: str, job_ttl: int, deltas: dict[str, float]) -> tuple[list, list]:
        """ADD_COUNTERS's keys and arguments."""
        return counters_keys(dataset, job, False), [job, job_ttl, time.time(), *counter_args(deltas)]

    def close(self) -> None:
        self._direct.close()
        self.client.close()


def counters_keys(dataset: str, job: str, cluster: bool) -> list[str]:
    """ADD_COUNTERS's keys."""
    names = [keys.dataset(dataset), keys.job(job), keys.JOBS, keys.manifest(dataset), keys.CONTENT, keys.DATASETS,
             keys.checks(dataset)]
    return [keys.metadata(name, cluster) for name in names]


class ClusterStore:
    """CacheStore's interface on a Redis Cluster: blobs by their own slots, every metadata key in the one
    slot of keys.CLUSTER_TAG (so each script runs on one node), reads pipelined to every node at once.
    A node that fails raises cluster.NodeUnavailable (the metadata's) or costs only its own keys."""

    def __init__(self, url: str, timeout: float, retry_seconds: float):
        self.cluster = cluster_.Cluster(url, timeout, retry_seconds)
        self._open, self._record, self._record_checks, self._add_counters = (
            Script(None, source.encode()) for source in (OPEN, RECORD, RECORD_CHECKS, ADD_COUNTERS))

    @staticmethod
    def _meta(*names: str) -> list[str]:
        return [keys.metadata(name, True) for name in names]

    def open(self, dataset: str, fingerprint: str, samples: int) -> tuple[bytes, bytes]:
        keys_ = self._meta(keys.dataset(dataset), keys.manifest(dataset), keys.checks(dataset), keys.DATASETS)
        manifest, checks = self.cluster.script(self._open, keys_, [dataset, fingerprint, samples], array=True)
        return manifest or b"", checks or b""

    def blob_reads(self, on_error: Callable[[redis.RedisError], None]) -> cluster_.ClusterReads:
        return cluster_.ClusterReads(self.cluster, on_error)

    def read_now(self, names: list[str], on_error: Callable[[redis.RedisError], None]) -> list:
        """The values of `names` at once, from every node they live on; UNAVAILABLE where a node failed."""
        reads = cluster_.ClusterReads(self.cluster, on_error)
        try:
            reads.send(names)
            return reads.receive()
        finally:
            reads.close()

    def write(self, dataset: str, fingerprint: str, writes: Writes, job: str, job_ttl: int,
              deltas: dict[str, float]) -> int:
        """Blobs to their nodes at once, then the metadata's scripts; returns how many commands failed."""
        failed = cluster_.set_blobs(self.cluster, {keys.blob(d): data for d, data in writes.blobs.items()})
        calls = []
        if writes.entries:
            args = [fingerprint]
            for index, digest, size, check in writes.entries:
                args += [index, keys.ENTRY.pack(digest, size), size, check]
            calls.append((self._record, self._meta(keys.dataset(dataset), keys.manifest(dataset), keys.CONTENT,
                                                   keys.checks(dataset)), args))
        if writes.checks:
            calls.append((self._record_checks, self._meta(keys.dataset(dataset), keys.manifest(dataset), keys.checks(dataset)),
                          [fingerprint, *(x for item in writes.checks for x in item)]))
        if deltas:
            calls.append((self._add_counters, counters_keys(dataset, job, True),
                          [job, job_ttl, time.time(), *counter_args(deltas)]))
        for script, keys_, args in calls:
            try:
                self.cluster.script(script, keys_, args)
            except redis.ResponseError:
                failed += 1
        return failed

    def close(self) -> None:
        self.cluster.close()


def open_store(url: str, timeout: float, retry_seconds: float) -> CacheStore | ClusterStore:
    """The store for `url`: a Redis Cluster for redis+cluster://, else one server."""
    if cache_urls.is_cluster(url):
        return ClusterStore(url, timeout, retry_seconds)
    return CacheStore(url, timeout)
