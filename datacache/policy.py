"""The space policy (docs/datacache.md, "Space for many jobs"): what a job asks for (namespace, priority, quota) from
its arguments and environment, and the Lua that places its samples under the operator's caps (keys.POLICY): space
accounted per job and namespace, admission and eviction by each job's measured benefit, its value kept with its
counters. Every decision runs in Redis, atomically, on the metadata's node: no process of its own."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from alnair.abi import cache_keys as keys

NAMESPACE_ENV, PRIORITY_ENV, QUOTA_ENV = "ALNAIR_JOB_NAMESPACE", "ALNAIR_CACHE_PRIORITY", "ALNAIR_CACHE_QUOTA"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")  # a pod's own namespace
DEFAULT_NAMESPACE = "default"
PRIORITY_LIMIT = 1000.0  # the highest a job may ask; the operator's max_priority may lower it
TTL_FIELD, MARK_FIELD = "ttl", "mark"  # a job space's TTL (it outlives it while holding space), REVALUE's last counters
SIZE = re.compile(r"([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?")
UNITS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}


def parse_size(text: str) -> int:
    """Bytes from `8Gi`, `500M` or `1000000` (Kubernetes' binary and decimal suffixes); ValueError otherwise."""
    match = SIZE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a size (bytes, or a number with Ki, Mi, Gi, Ti, k, M, G or T): {text!r}")
    return int(match.group(1)) * UNITS[match.group(2)]


def check_priority(priority: float) -> float:
    if isinstance(priority, bool) or not isinstance(priority, (int, float)) or not 0 <= priority <= PRIORITY_LIMIT:
        raise ValueError(f"priority must be a number from 0 to {PRIORITY_LIMIT:g}: {priority!r}")
    return float(priority)


@dataclass(frozen=True)
class JobSettings:
    """What one job asks of the space policy; the operator's caps (keys.POLICY) bound it in Redis."""

    name: str
    namespace: str = DEFAULT_NAMESPACE
    priority: float = 1.0  # scales the job's value: 0 never takes space from another job
    quota_bytes: int | None = None  # the most it may hold; None: only the operator's cap
    ttl_seconds: int = 3600  # its counters live this long after its last batch

    @classmethod
    def resolve(
        cls,
        name: str,
        namespace: str | None,
        priority: float | None,
        quota_bytes: int | str | None,
        ttl_seconds: int,
        environ: Mapping[str, str] = os.environ,
    ) -> JobSettings:
        """Arguments first, then $ALNAIR_JOB_NAMESPACE (else the pod's service-account namespace, else "default"),
        $ALNAIR_CACHE_PRIORITY and $ALNAIR_CACHE_QUOTA; a bad value raises ValueError naming its source."""
        namespace = namespace or environ.get(NAMESPACE_ENV) or _pod_namespace() or DEFAULT_NAMESPACE
        if priority is None:
            priority = _from_env(environ, PRIORITY_ENV, float, 1.0)
        if quota_bytes is None:
            quota_bytes = _from_env(environ, QUOTA_ENV, parse_size, None)
        elif isinstance(quota_bytes, str):
            quota_bytes = parse_size(quota_bytes)
        if quota_bytes is not None and (
            isinstance(quota_bytes, bool) or not isinstance(quota_bytes, int) or quota_bytes < 0
        ):
            raise ValueError(f"quota_bytes must be a size >= 0: {quota_bytes!r}")
        return cls(name, keys.check_name("namespace", namespace), check_priority(priority), quota_bytes, ttl_seconds)

    def script_args(self) -> list:
        """namespace, priority, quota ("" for none): the arguments ADMIT and ACCOUNT share."""
        return [self.namespace, self.priority, "" if self.quota_bytes is None else self.quota_bytes]


def _from_env(environ: Mapping[str, str], name: str, parse, default):
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = parse(text)
    except ValueError as e:
        raise ValueError(f"${name}: {e}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"${name}: not a finite number: {text!r}")
    return value


def _pod_namespace() -> str | None:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None
    except OSError:
        return None


def footprint(samples: int, served: int, served_bytes: int) -> int:
    """Bytes of one pass over a dataset of `samples`, from the mean size of those served so far (0: none yet)."""
    return samples * served_bytes // served if served else 0


# Key names relative to the metadata keys' prefix (keys.metadata's), for the keys a script finds as it goes.
SPACE_KEY, NAMESPACE_KEY, HELD_KEY = (
    name("")[len(keys.PREFIX) :] for name in (keys.job_space, keys.namespace, keys.held)
)

# Lua shared by ADMIT and ACCOUNT. HMGET gives false for an absent field, which tonumber makes nil.
PRELUDE = f"""
local function number(value, default)
  return tonumber(value) or default
end

local function cap(value)
  value = tonumber(value)
  return (value and value > 0) and value or math.huge
end

-- The operator's caps over a job of namespace ns that asks for priority and quota (nil: none): capacity (0: the
-- policy is off), the job's quota and its namespace's (math.huge: none), its priority, margin, idle and window seconds.
local function caps(policy, ns, priority, quota)
  local f = redis.call('HMGET', policy, '{keys.CAPACITY_BYTES}', '{keys.JOB_QUOTA_BYTES}',
                       '{keys.NAMESPACE_QUOTA_BYTES}', '{keys.NAMESPACE_QUOTA_BYTES}:' .. ns,
                       '{keys.MAX_PRIORITY}', '{keys.MAX_PRIORITY}:' .. ns,
                       '{keys.MARGIN}', '{keys.IDLE_SECONDS}', '{keys.WINDOW_SECONDS}')
  return {{capacity = number(f[1], 0), job_quota = math.min(cap(f[2]), quota or math.huge),
          ns_quota = cap(f[4] or f[3]), priority = math.min(priority, number(f[6] or f[5], math.huge)),
          margin = number(f[7], 0.25), idle = number(f[8], 60), window = number(f[9], 1)}}
end

-- The job's namespace: the one it asks for, unless it holds space, charged to the one it had then.
local function namespace_of(space_key, asked)
  local f = redis.call('HMGET', space_key, '{keys.CACHED_BYTES}', '{keys.NAMESPACE}')
  if number(f[1], 0) > 0 and f[2] then return f[2] end
  return asked
end

-- A job's space hash lives as long as its counters, or while it holds space.
local function keep(space_key, ttl)
  if number(redis.call('HGET', space_key, '{keys.CACHED_BYTES}'), 0) > 0 then
    redis.call('PERSIST', space_key)
  else
    redis.call('EXPIRE', space_key, ttl)
  end
end
"""

# Every `window` seconds, from the job's counters since the last time: its stall per miss (the stall its consumers
# measured over its misses; where none measured, its fetch time over its misses: every miss assumed to stall it) and
# its reads per second, each averaged with the last estimate; its value, priority x stall per miss x reads per second
# / bytes of one pass over its datasets (the stall seconds one cached byte saves it per second); and the stall its
# hits saved. MARK_FIELD holds the counters of the last time: "time hits missed stall consumer fetch".
REVALUE = f"""
local function revalue(job_key, space_key, ns_key, holders, job, now, window)
  local f = redis.call('HMGET', job_key, '{keys.HITS}', '{keys.MISSES}', '{keys.FALLBACKS}', '{keys.STALL_SECONDS}',
                       '{keys.CONSUMER_SECONDS}', '{keys.FETCH_SECONDS}')
  local s = redis.call('HMGET', space_key, '{MARK_FIELD}', '{keys.STALL_PER_MISS}', '{keys.READ_RATE}',
                       '{keys.CACHED_BYTES}', '{keys.PRIORITY}')
  local mark = {{}}
  for x in string.gmatch(s[1] or '', '%S+') do mark[#mark + 1] = tonumber(x) end
  if #mark == 6 and now - mark[1] < window then return end
  local current = {{now, number(f[1], 0), number(f[2], 0) + number(f[3], 0), number(f[4], 0), number(f[5], 0),
                   number(f[6], 0)}}
  redis.call('HSET', space_key, '{MARK_FIELD}', table.concat(current, ' '))
  if #mark ~= 6 or now <= mark[1] then return end
  local hits, missed = current[2] - mark[2], current[3] - mark[3]
  local stall_per_miss, rate = tonumber(s[2]), (hits + missed) / (now - mark[1])
  if missed > 0 then
    local measured = current[5] > mark[5]
    local sample = (measured and current[4] - mark[4] or current[6] - mark[6]) / missed
    stall_per_miss = stall_per_miss and (stall_per_miss + sample) / 2 or sample
  end
  rate = (number(s[3], rate) + rate) / 2
  local footprint, all = 0, redis.call('HGETALL', space_key)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, {len(keys.FOOTPRINT_PREFIX)}) == '{keys.FOOTPRINT_PREFIX}' then
      footprint = footprint + number(all[i + 1], 0)
    end
  end
  local value = 0
  if stall_per_miss and footprint > 0 then value = number(s[5], 1) * stall_per_miss * rate / footprint end
  redis.call('HSET', space_key, '{keys.READ_RATE}', rate, '{keys.VALUE}', value, '{keys.FOOTPRINT_BYTES}', footprint)
  if stall_per_miss then
    redis.call('HSET', space_key, '{keys.STALL_PER_MISS}', stall_per_miss)
    if hits > 0 then
      redis.call('HINCRBYFLOAT', space_key, '{keys.STALL_SAVED_SECONDS}', hits * stall_per_miss)
      redis.call('HINCRBYFLOAT', ns_key, '{keys.STALL_SAVED_SECONDS}', hits * stall_per_miss)
    end
  end
  if number(s[4], 0) > 0 then redis.call('ZADD', holders, value, job) end
end
"""

# KEYS: dataset hash, job hash, job space hash, jobs, namespaces, policy, holders, then the metadata kept warm for
# Redis's LRU (the manifest, content index, dataset registry, check digests, space, held). ARGV: the metadata keys'
# prefix, job, job TTL, now, namespace, priority, quota ("": none), dataset, bytes of one pass over it (0: not known
# yet), the number of integer deltas, then (field, delta) pairs, integers first. Adds the counters to the dataset's,
# job's and namespace's hashes, records what the job asks as the caps leave it, revalues it and lists it: one command
# per write-back, not two increments per field.
ACCOUNT = (
    PRELUDE
    + REVALUE
    + f"""
local prefix, job, ttl, now = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local dataset_key, job_key, space_key, jobs, namespaces, policy, holders = unpack(KEYS, 1, 7)
local ns = namespace_of(space_key, ARGV[5])
local ns_key = prefix .. '{NAMESPACE_KEY}' .. ns
local c = caps(policy, ns, tonumber(ARGV[6]), tonumber(ARGV[7]))
local integers = tonumber(ARGV[10])
for i = 11, #ARGV, 2 do
  local increment = (i - 11) / 2 < integers and 'HINCRBY' or 'HINCRBYFLOAT'
  for _, key in ipairs({{dataset_key, job_key, ns_key}}) do redis.call(increment, key, ARGV[i], ARGV[i + 1]) end
end
redis.call('EXPIRE', job_key, ttl)
redis.call('HSET', space_key, '{keys.NAMESPACE}', ns, '{keys.PRIORITY}', c.priority, '{keys.QUOTA_BYTES}', c.job_quota,
           '{TTL_FIELD}', ttl)
if tonumber(ARGV[9]) > 0 then redis.call('HSET', space_key, '{keys.FOOTPRINT_PREFIX}' .. ARGV[8], ARGV[9]) end
redis.call('SADD', namespaces, ns)
revalue(job_key, space_key, ns_key, holders, job, now, c.window)
keep(space_key, ttl)
redis.call('ZADD', jobs, now, job)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', jobs, '-inf', now - ttl)) do
  redis.call('ZADD', holders, 'XX', 0, gone)  -- a job gone: its space is the first to go
end
redis.call('ZREMRANGEBYSCORE', jobs, '-inf', now - ttl)
redis.call('TOUCH', policy, namespaces, ns_key, unpack(KEYS, 8))
return 0
"""
)

# KEYS: policy, space, held, holders, jobs, job hash, job space hash, the job's held set. ARGV: the metadata keys'
# prefix, now, job, namespace, priority, quota ("": none), then (raw digest, size) per blob read from the origin.
# Returns the digests to store and those evicted to make room (store.admission reads them): the caller deletes those,
# then stores these (a digest evicted and admitted again in one call is in both). With the policy off (no capacity),
# every digest is stored and Redis's own maxmemory policy evicts, as before it. Otherwise a blob already held is stored
# again (it missed: evicted by Redis, or lost); a new one is admitted while its job and namespace stay within their
# quotas, into free space, or into space taken from the job of lowest value when this job's value exceeds that one's
# by the margin and this job has read one pass over its datasets: a scan, whose samples are never read twice, only
# fills free space.
ADMIT = (
    PRELUDE
    + f"""
local function demote_idle(jobs, holders, since)
  for _, idle in ipairs(redis.call('ZRANGEBYSCORE', jobs, '-inf', since)) do
    redis.call('ZADD', holders, 'XX', 0, idle)
  end
end

-- The job whose space goes first, if `value` exceeds its value by the margin: the one of lowest value but `job`.
local function victim_below(holders, job, value, margin)
  local lowest = redis.call('ZRANGE', holders, 0, 1, 'WITHSCORES')
  for i = 1, #lowest, 2 do
    if lowest[i] ~= job then
      if tonumber(lowest[i + 1]) * (1 + margin) < value then return lowest[i] end
      return nil
    end
  end
  return nil
end

-- The oldest blob `victim` holds, let go: its digest, or nil if it holds none.
local function evict(prefix, held, holders, space, victim)
  local own, space_key = prefix .. '{HELD_KEY}' .. victim, prefix .. '{SPACE_KEY}' .. victim
  local popped = redis.call('ZPOPMIN', own)
  if #popped == 0 then
    redis.call('ZREM', holders, victim)
    return nil
  end
  local size = number(redis.call('HGET', held, popped[1]), 0)
  redis.call('HDEL', held, popped[1])
  redis.call('HINCRBY', space, '{keys.SPACE_USED}', -size)
  local ns = redis.call('HGET', space_key, '{keys.NAMESPACE}') or '{DEFAULT_NAMESPACE}'
  for _, key in ipairs({{space_key, prefix .. '{NAMESPACE_KEY}' .. ns}}) do
    redis.call('HINCRBY', key, '{keys.CACHED_BYTES}', -size)
    redis.call('HINCRBY', key, '{keys.EVICTIONS}', 1)
    redis.call('HINCRBY', key, '{keys.EVICTED_BYTES}', size)
  end
  if redis.call('EXISTS', own) == 0 then
    redis.call('ZREM', holders, victim)
    keep(space_key, number(redis.call('HGET', space_key, '{TTL_FIELD}'), 3600))
  end
  return popped[1]
end

-- One flat array of bulk strings (the cache's RESP reader reads no nested arrays): the count to store, those, then
-- the evicted.
local function reply(stored, evicted)
  local flat = {{tostring(#stored)}}
  for _, digest in ipairs(stored) do flat[#flat + 1] = digest end
  for _, digest in ipairs(evicted) do flat[#flat + 1] = digest end
  return flat
end

local prefix, now, job = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local policy, space, held, holders, jobs, job_key, space_key, own = unpack(KEYS)
local ns = namespace_of(space_key, ARGV[4])
local ns_key = prefix .. '{NAMESPACE_KEY}' .. ns
local c = caps(policy, ns, tonumber(ARGV[5]), tonumber(ARGV[6]))
local stored, evicted = {{}}, {{}}
if c.capacity <= 0 then
  for i = 7, #ARGV, 2 do stored[#stored + 1] = ARGV[i] end
  return reply(stored, evicted)
end
local function holding(key) return number(redis.call('HGET', key, '{keys.CACHED_BYTES}'), 0) end
local function used() return number(redis.call('HGET', space, '{keys.SPACE_USED}'), 0) end
redis.call('HSET', space_key, '{keys.NAMESPACE}', ns)
-- A quota lowered below what the job or its namespace holds: the job's own oldest blobs go first.
while holding(space_key) > c.job_quota or holding(ns_key) > c.ns_quota do
  local digest = evict(prefix, held, holders, space, job)
  if not digest then break end
  evicted[#evicted + 1] = digest
end
local s = redis.call('HMGET', space_key, '{keys.VALUE}', '{keys.FOOTPRINT_BYTES}')
local f = redis.call('HMGET', job_key, '{keys.CACHE_BYTES}', '{keys.ORIGIN_BYTES}')
local value, footprint = number(s[1], 0), number(s[2], 0)
local proven = footprint > 0 and number(f[1], 0) + number(f[2], 0) >= footprint
demote_idle(jobs, holders, now - c.idle)
local admitted, rejected = 0, 0
for i = 7, #ARGV, 2 do
  local digest, size = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('HEXISTS', held, digest) == 1 then
    stored[#stored + 1] = digest
  elseif holding(space_key) + size > c.job_quota or holding(ns_key) + size > c.ns_quota then
    rejected = rejected + 1
  else
    for _ = 1, 64 do
      if used() + size <= c.capacity or not proven then break end
      local victim = victim_below(holders, job, value, c.margin)
      if not victim then break end
      evicted[#evicted + 1] = evict(prefix, held, holders, space, victim)
    end
    if used() + size <= c.capacity then
      redis.call('HSET', held, digest, size)
      redis.call('ZADD', own, redis.call('HINCRBY', space, '{keys.SPACE_SEQ}', 1), digest)
      redis.call('HINCRBY', space, '{keys.SPACE_USED}', size)
      redis.call('HINCRBY', space_key, '{keys.CACHED_BYTES}', size)
      redis.call('HINCRBY', ns_key, '{keys.CACHED_BYTES}', size)
      stored[#stored + 1] = digest
      admitted = admitted + 1
    else
      rejected = rejected + 1
    end
  end
end
for _, key in ipairs({{space_key, ns_key}}) do
  redis.call('HINCRBY', key, '{keys.ADMITTED}', admitted)
  redis.call('HINCRBY', key, '{keys.REJECTED}', rejected)
end
if holding(space_key) > 0 then redis.call('ZADD', holders, value, job) end
keep(space_key, number(redis.call('HGET', space_key, '{TTL_FIELD}'), 3600))
return reply(stored, evicted)
"""
)
