"""The cache's Redis side: open a dataset's manifest, read blobs, and write blobs, manifest entries and
counters in one pipelined round trip."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import keys

SOCKET_READ_SIZE = 4 << 20  # a batch of 100 KB samples arrives in a few reads, not hundreds

# KEYS: dataset hash, manifest, dataset registry. ARGV: dataset name, fingerprint, samples.
# A new fingerprint means the origin changed: the old manifest is dropped. Returns the manifest.
OPEN = """
redis.call('SADD', KEYS[3], ARGV[1])
if redis.call('HGET', KEYS[1], 'fingerprint') ~= ARGV[2] then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[2], 'samples', ARGV[3], 'logical_bytes', 0)
end
return redis.call('GET', KEYS[2])
"""

# KEYS: dataset hash, manifest, content index. ARGV: fingerprint, then (index, entry, size) per sample.
# Writes only under the fingerprint the writer read its samples with; keeps the dataset's logical bytes
# and the distinct content's physical bytes.
RECORD = """
if redis.call('HGET', KEYS[1], 'fingerprint') ~= ARGV[1] then return -1 end
if redis.call('EXISTS', KEYS[2]) == 0 then redis.call('HSET', KEYS[1], 'logical_bytes', 0) end
for i = 2, #ARGV, 3 do
  local offset, entry, size = tonumber(ARGV[i]) * 40, ARGV[i + 1], tonumber(ARGV[i + 2])
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


def connect(url: str, timeout: float, read_size: int = SOCKET_READ_SIZE) -> redis.Redis:
    """A client that gives up within `timeout` (connect or any read) and never retries on its own:
    the caller falls back to the origin instead. Each connection holds a `read_size` buffer."""
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                retry=Retry(NoBackoff(), 0), socket_read_size=read_size)


@dataclass
class Writes:
    """What one batch learned from the origin, to be written back."""

    blobs: dict[bytes, bytes] = field(default_factory=dict)  # digest -> bytes
    entries: list[tuple[int, bytes, int]] = field(default_factory=list)  # (index, digest, size)


class CacheStore:
    def __init__(self, url: str, timeout: float):
        self.client = connect(url, timeout)
        self._open = self.client.register_script(OPEN)
        self._record = self.client.register_script(RECORD)

    def open(self, dataset: str, fingerprint: str, samples: int) -> bytes:
        keys_ = [keys.dataset(dataset), keys.manifest(dataset), keys.DATASETS]
        return self._open(keys=keys_, args=[dataset, fingerprint, samples]) or b""

    def get_blobs(self, digests: list[bytes]) -> list[bytes | None]:
        return self.client.mget([keys.blob(d) for d in digests])

    def write(self, dataset: str, fingerprint: str, writes: Writes, job: str, job_ttl: int,
              deltas: dict[str, float]) -> int:
        """One round trip; returns how many commands Redis refused (out of memory, say)."""
        pipe = self.client.pipeline(transaction=False)
        for digest, data in writes.blobs.items():
            pipe.set(keys.blob(digest), data)
        if writes.entries:
            args = [fingerprint]
            for index, digest, size in writes.entries:
                args += [index, keys.ENTRY.pack(digest, size), size]
            self._record(keys=[keys.dataset(dataset), keys.manifest(dataset), keys.CONTENT], args=args, client=pipe)
        if deltas:
            self._add_counters(pipe, dataset, job, job_ttl, deltas)
        if not len(pipe):
            return 0
        results = pipe.execute(raise_on_error=False)
        return sum(isinstance(r, redis.ResponseError) for r in results)

    @staticmethod
    def _add_counters(pipe, dataset: str, job: str, job_ttl: int, deltas: dict[str, float]) -> None:
        now = time.time()
        for key in (keys.dataset(dataset), keys.job(job)):
            for name, value in deltas.items():
                if isinstance(value, float):
                    pipe.hincrbyfloat(key, name, value)
                else:
                    pipe.hincrby(key, name, value)
        pipe.expire(keys.job(job), job_ttl)
        pipe.zadd(keys.JOBS, {job: now})
        pipe.zremrangebyscore(keys.JOBS, "-inf", now - job_ttl)
        # Metadata is read once per job: touching it keeps it warm for an LRU eviction policy.
        pipe.touch(keys.manifest(dataset), keys.CONTENT, keys.DATASETS)

    def close(self) -> None:
        self.client.close()
