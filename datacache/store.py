"""The cache's Redis side: open a dataset's manifest, read blobs, and write blobs, manifest entries, check
digests and counters in one pipelined round trip; on one server (CacheStore) or a Redis Cluster (ClusterStore)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from alnair.abi import cache_keys as keys, cache_urls

from . import cluster as cluster_
from .policy import ACCOUNT, ADMIT, JobSettings
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


def connect(url: str, timeout: float, read_size: int = SOCKET_READ_SIZE) -> redis.Redis:
    """A client that gives up within `timeout` (connect or any read) and never retries on its own:
    the caller falls back to the origin instead. Each connection holds a `read_size` buffer."""
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        socket_read_size=read_size,
    )


def counter_args(deltas: dict[str, float]) -> list:
    """ACCOUNT's count of integer deltas, then (field, delta) pairs, integers first."""
    ordered = sorted(deltas.items(), key=lambda item: isinstance(item[1], float))
    return [sum(not isinstance(value, float) for value in deltas.values()), *(x for item in ordered for x in item)]


def account_call(
    dataset: str, job: JobSettings, footprint: int, deltas: dict[str, float], cluster: bool
) -> tuple[list, list]:
    """ACCOUNT's keys and arguments."""
    names = [
        keys.dataset(dataset),
        keys.job(job.name),
        keys.job_space(job.name),
        keys.JOBS,
        keys.NAMESPACES,
        keys.POLICY,
        keys.HOLDERS,
        keys.manifest(dataset),
        keys.CONTENT,
        keys.DATASETS,
        keys.checks(dataset),
        keys.SPACE,
        keys.HELD,
    ]
    return (
        [keys.metadata(name, cluster) for name in names],
        [
            keys.metadata(keys.PREFIX, cluster),
            job.name,
            job.ttl_seconds,
            time.time(),
            *job.script_args(),
            dataset,
            footprint,
            *counter_args(deltas),
        ],
    )


def admit_call(job: JobSettings, blobs: dict[bytes, bytes], cluster: bool) -> tuple[list, list]:
    """ADMIT's keys and arguments for the blobs a batch read from the origin."""
    names = [
        keys.POLICY,
        keys.SPACE,
        keys.HELD,
        keys.HOLDERS,
        keys.JOBS,
        keys.job(job.name),
        keys.job_space(job.name),
        keys.held(job.name),
    ]
    args = [keys.metadata(keys.PREFIX, cluster), time.time(), job.name, *job.script_args()]
    for digest, data in blobs.items():
        args += [digest, len(data)]
    return [keys.metadata(name, cluster) for name in names], args


def admission(
    job: JobSettings, blobs: dict[bytes, bytes], cluster: bool, run: Callable[[list, list], list]
) -> tuple[list[bytes], list[bytes], int]:
    """(to store, evicted, refused) for the blobs a batch read from the origin, by ADMIT as `run(keys, args)` runs it
    (its reply: the count to store, those digests, then the evicted ones); all refused if Redis refuses the script."""
    if not blobs:
        return [], [], 0
    try:
        reply = run(*admit_call(job, blobs, cluster))
    except redis.ResponseError:
        return [], [], 1
    count = int(reply[0])
    return reply[1 : 1 + count], reply[1 + count :], 0


@dataclass
class Writes:
    """What one batch learned from the origin, to be written back."""

    blobs: dict[bytes, bytes] = field(default_factory=dict)  # digest -> bytes
    entries: list[tuple[int, bytes, int, bytes]] = field(default_factory=list)  # (index, digest, size, check)
    checks: list[tuple[int, bytes, bytes]] = field(default_factory=list)  # (index, digest, check) of cached bytes

    def __bool__(self) -> bool:
        return bool(self.blobs or self.entries or self.checks)

    def merge(self, other: Writes) -> None:
        self.blobs.update(other.blobs)
        self.entries.extend(other.entries)
        self.checks.extend(other.checks)


def record_args(fingerprint: str, entries: list[tuple[int, bytes, int, bytes]]) -> list:
    """RECORD's arguments."""
    args = [fingerprint]
    for index, digest, size, check in entries:
        args += [index, keys.ENTRY.pack(digest, size), size, check]
    return args


class CacheStore:
    def __init__(self, url: str, timeout: float):
        self.client = connect(url, timeout)
        self._direct = RespClient(url, timeout, self.client)
        self._open = self.client.register_script(OPEN)
        self._record = self.client.register_script(RECORD)
        self._record_checks = self.client.register_script(RECORD_CHECKS)
        self._account = self.client.register_script(ACCOUNT)
        self._admit = self.client.register_script(ADMIT)

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

    def write(
        self, dataset: str, fingerprint: str, writes: Writes, job: JobSettings, footprint: int, deltas: dict[str, float]
    ) -> int:
        """The blobs the space policy admits (one round trip), then what it evicted deleted, those blobs, manifest
        entries and counters in one more; returns how many commands Redis refused (out of memory, say)."""
        if not writes:
            # A batch the cache served: one EVALSHA on the cache's own connection, without a pipeline
            # (redis-py asks SCRIPT EXISTS before it executes a pipeline that holds a script: a second
            # round trip) and without redis-py's ~100 µs of CPU per command.
            if not deltas:
                return 0
            try:
                self._direct.run_script(self._account, *account_call(dataset, job, footprint, deltas, False))
            except redis.ResponseError:
                return 1
            return 0
        stored, evicted, refused = admission(job, writes.blobs, False, lambda k, a: self._admit(keys=k, args=a))
        pipe = self.client.pipeline(transaction=False)
        if evicted:
            pipe.delete(*(keys.blob(digest) for digest in evicted))
        for digest in stored:
            pipe.set(keys.blob(digest), writes.blobs[digest])
        if writes.entries:
            self._record(
                keys=[keys.dataset(dataset), keys.manifest(dataset), keys.CONTENT, keys.checks(dataset)],
                args=record_args(fingerprint, writes.entries),
                client=pipe,
            )
        if writes.checks:
            self._record_checks(
                keys=[keys.dataset(dataset), keys.manifest(dataset), keys.checks(dataset)],
                args=[fingerprint, *(x for item in writes.checks for x in item)],
                client=pipe,
            )
        if deltas:
            account_keys, account_args = account_call(dataset, job, footprint, deltas, False)
            self._account(keys=account_keys, args=account_args, client=pipe)
        results = pipe.execute(raise_on_error=False)
        return refused + sum(isinstance(r, redis.ResponseError) for r in results)

    def close(self) -> None:
        self._direct.close()
        self.client.close()


class ClusterStore:
    """CacheStore's interface on a Redis Cluster: blobs by their own slots, every metadata key in the one
    slot of keys.CLUSTER_TAG (so each script runs on one node), reads pipelined to every node at once.
    A node that fails raises cluster.NodeUnavailable (the metadata's) or costs only its own keys."""

    def __init__(self, url: str, timeout: float, retry_seconds: float):
        self.cluster = cluster_.Cluster(url, timeout, retry_seconds)
        self._open, self._record, self._record_checks, self._account, self._admit = (
            Script(None, source.encode()) for source in (OPEN, RECORD, RECORD_CHECKS, ACCOUNT, ADMIT)
        )

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

    def write(
        self, dataset: str, fingerprint: str, writes: Writes, job: JobSettings, footprint: int, deltas: dict[str, float]
    ) -> int:
        """The space policy's admission on the metadata's node, then the evicted blobs deleted and the admitted ones
        stored, on their nodes at once, then the metadata's scripts; returns how many commands failed. The metadata's
        node down: NodeUnavailable, before any blob is written."""
        stored, evicted, failed = admission(
            job, writes.blobs, True, lambda k, a: self.cluster.script(self._admit, k, a, array=True)
        )
        commands = [("DEL", keys.blob(digest)) for digest in evicted]
        commands += [("SET", keys.blob(digest), writes.blobs[digest]) for digest in stored]
        failed += cluster_.blob_commands(self.cluster, commands)
        calls = []
        if writes.entries:
            calls.append(
                (
                    self._record,
                    self._meta(keys.dataset(dataset), keys.manifest(dataset), keys.CONTENT, keys.checks(dataset)),
                    record_args(fingerprint, writes.entries),
                )
            )
        if writes.checks:
            calls.append(
                (
                    self._record_checks,
                    self._meta(keys.dataset(dataset), keys.manifest(dataset), keys.checks(dataset)),
                    [fingerprint, *(x for item in writes.checks for x in item)],
                )
            )
        if deltas:
            calls.append((self._account, *account_call(dataset, job, footprint, deltas, True)))
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
