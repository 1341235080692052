"""The dataset cache's Redis schema: key names, manifest and check-digest entries and counter fields,
written by the cache in training jobs (alnair.datacache) and read by the exporter's cache collector."""

from __future__ import annotations

import re
import struct

PREFIX = "alnair:"
DATASETS = PREFIX + "datasets"  # set of dataset names
JOBS = PREFIX + "jobs"  # sorted set: job name -> unix time of its last counter flush
NAMESPACES = PREFIX + "namespaces"  # set of the namespaces jobs ran in
# The space policy (datacache/policy.py). POLICY: the operator's caps (hash, POLICY_FIELDS); SPACE: the bytes held
# under the policy (SPACE_USED) and the admission sequence (SPACE_SEQ); HELD: raw digest -> size of every blob held;
# HOLDERS: sorted set, job -> its value (VALUE) for every job holding bytes; held(job): sorted set, raw digest ->
# admission sequence of the blobs that job holds; job_space(job): the job's place under the policy (a hash: what it
# asked as the caps leave it, its estimates, the space it holds and its counters of admissions and evictions),
# beside its counters in job(job).
POLICY = PREFIX + "policy"
SPACE = PREFIX + "space"
HELD = PREFIX + "held"
HOLDERS = PREFIX + "holders"
CONTENT = PREFIX + "content"  # hash: raw digest -> size, plus the field CONTENT_TOTAL
CONTENT_TOTAL = "total"  # bytes of distinct content (a digest field is 32 bytes, never this)

# A manifest is one string: entry i at offset i * ENTRY_SIZE, the 32-byte SHA-256 of sample i's bytes
# followed by its size (uint64, big-endian). All zero: not known yet.
ENTRY = struct.Struct(">32sQ")
ENTRY_SIZE = ENTRY.size
UNKNOWN_DIGEST = bytes(32)
# Beside it, a dataset's check digests: entry i at offset i * CHECK_SIZE, the XXH3-128 of sample i's bytes
# seeded by its SHA-256 (datacache/content.py). All zero: not known (a manifest written before them).
CHECK_SIZE = 16
UNKNOWN_CHECK = bytes(CHECK_SIZE)

# Counter fields, the same in a dataset's hash and in a job's hash.
HITS, MISSES, FALLBACKS, CORRUPT, REDIS_ERRORS = "hits", "misses", "fallbacks", "corrupt", "redis_errors"
CACHE_BYTES, ORIGIN_BYTES = "cache_bytes", "origin_bytes"
SUBSTITUTED = "substituted"  # hits served in place of a sample that missed (substitutable datasets)
FETCHES, FETCH_SECONDS = "fetches", "fetch_seconds"
FETCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Time consumers waited for a batch (CachedDataset.timed, CacheLoader), and spent between batches (waiting or working).
STALL_SECONDS, CONSUMER_SECONDS = "stall_seconds", "consumer_seconds"
# Dataset-only fields.
FINGERPRINT, SAMPLES, LOGICAL_BYTES = "fingerprint", "samples", "logical_bytes"
# Fields of a job_space hash (the space policy's counters also in a namespace's hash), then those of a job_space only.
ADMITTED, REJECTED, EVICTIONS, EVICTED_BYTES = "admitted", "rejected", "evictions", "evicted_bytes"
STALL_SAVED_SECONDS = "stall_saved_seconds"  # hits times the job's stall per miss: the stall the cache saved it
CACHED_BYTES = "cached_bytes"  # bytes held under the policy (a gauge)
NAMESPACE, PRIORITY, QUOTA_BYTES = "namespace", "priority", "quota_bytes"  # the job's, within the operator's caps
STALL_PER_MISS, READ_RATE, VALUE = "stall_per_miss", "read_rate", "value"  # the job's estimates (policy.py)
FOOTPRINT_BYTES = "footprint_bytes"  # bytes of one pass over the job's datasets
FOOTPRINT_PREFIX = "footprint:"  # a job's field per dataset: FOOTPRINT_PREFIX + dataset -> bytes of one pass over it
# The operator's caps, fields of POLICY; a namespace's own cap is its field followed by ":" and the namespace.
CAPACITY_BYTES, JOB_QUOTA_BYTES, NAMESPACE_QUOTA_BYTES = "capacity_bytes", "job_quota_bytes", "namespace_quota_bytes"
MAX_PRIORITY, MARGIN, IDLE_SECONDS, WINDOW_SECONDS = "max_priority", "margin", "idle_seconds", "window_seconds"
SPACE_USED, SPACE_SEQ = "used_bytes", "seq"

# On a Redis Cluster every metadata key (manifests, check digests, counter hashes, the registries, the content
# index) carries this hash tag, so they share one slot and a batch's scripts never cross slots; blobs carry
# none and spread over every slot by their digest. One server needs no tag: its names stay as they were.
CLUSTER_TAG = "{meta}"

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}")


def bucket_field(upper_bound: float) -> str:
    """Per-bucket (not cumulative) count of fetches that took at most `upper_bound` seconds."""
    return f"fetch_le_{upper_bound:g}"


FETCH_OVERFLOW = "fetch_le_inf"


def check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"{kind} name must match {NAME.pattern}: {name!r}")
    return name


def blob(digest: bytes) -> str:
    return f"{PREFIX}blob:{digest.hex()}"


def dataset(name: str) -> str:
    return f"{PREFIX}dataset:{name}"


def manifest(name: str) -> str:
    return f"{PREFIX}manifest:{name}"


def checks(name: str) -> str:
    return f"{PREFIX}xxh3:{name}"  # named by the algorithm: another's digests are never read as these


def job(name: str) -> str:
    return f"{PREFIX}job:{name}"


def namespace(name: str) -> str:
    return f"{PREFIX}namespace:{name}"


def held(job_name: str) -> str:
    return f"{PREFIX}held:{job_name}"


def job_space(job_name: str) -> str:
    return f"{PREFIX}job_space:{job_name}"


def per_namespace(field: str, namespace_name: str) -> str:
    """A POLICY field that caps one namespace (`namespace_quota_bytes:team-a`)."""
    return f"{field}:{namespace_name}"


def metadata(key: str, cluster: bool) -> str:
    """A metadata key as a cluster target names it (`alnair:{meta}:...`), or unchanged for one server."""
    return key.replace(PREFIX, f"{PREFIX}{CLUSTER_TAG}:", 1) if cluster else key
