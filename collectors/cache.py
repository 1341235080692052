"""The cache collector: Redis INFO and keys per database, the dataset cache's per-dataset and per-job
counters, and logical vs physical bytes, for each Redis given by --collector.cache.redis-url."""
from __future__ import annotations

import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from redis.backoff import NoBackoff
from redis.retry import Retry

from alnair.abi import cache_keys as keys
from alnair.exporter.plugin import CollectorUnavailable, RepeatedList, add_flag, comma_separated, duration

REDIS_SCHEMES = ("redis", "rediss", "unix")

# (INFO field, metric suffix, help, counter?)
INFO_FIELDS = [
    ("keyspace_hits", "keyspace_hits", "Key lookups that found their key.", True),
    ("keyspace_misses", "keyspace_misses", "Key lookups that did not.", True),
    ("evicted_keys", "evicted_keys", "Keys evicted by the maxmemory policy.", True),
    ("expired_keys", "expired_keys", "Keys removed because they expired.", True),
    ("total_commands_processed", "commands_processed", "Commands the server has processed.", True),
    ("used_memory", "memory_used_bytes", "Memory the server has allocated.", False),
    ("maxmemory", "memory_max_bytes", "The maxmemory limit (0: none).", False),
    ("connected_clients", "connected_clients", "Client connections open.", False),
]

# (hash field, metric suffix, help): the same for a dataset and for a job.
CACHE_COUNTERS = [
    (keys.HITS, "hits", "Samples served from the cache, their bytes verified against their hash."),
    (keys.MISSES, "misses", "Samples Redis lacked (never cached, evicted or corrupt), read from the origin."),
    (keys.FALLBACKS, "fallbacks", "Samples read from the origin because Redis was unreachable or slow."),
    (keys.CORRUPT, "corrupt_values", "Cached values whose bytes did not match their hash, replaced from the origin."),
    (keys.REDIS_ERRORS, "redis_errors", "Redis operations that failed: unreachable, timed out or refused."),
    (keys.CACHE_BYTES, "cache_read_bytes", "Bytes of samples served from the cache."),
    (keys.ORIGIN_BYTES, "origin_read_bytes", "Bytes of samples read from the origin."),
]


def parse_redis_url(text: str) -> str:
    parsed = urllib.parse.urlparse(text)
    if parsed.scheme not in REDIS_SCHEMES or not (parsed.netloc or parsed.path):
        raise ValueError(f"not a Redis URL (redis://host:port/db, rediss://..., unix:///path): {text!r}")
    return text


def connect(url: str, timeout: float) -> redis.Redis:
    """A client that gives up within `timeout` and never retries on its own: a Redis that is down costs
    one timeout per sample, and is reported down."""
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0))


def url_label(url: str) -> str:
    """The URL without its credentials: how a target is named in the `redis` label."""
    parsed = urllib.parse.urlparse(url)
    host = parsed.netloc.rpartition("@")[2]
    return urllib.parse.urlunparse(parsed._replace(netloc=host))


@dataclass
class Reading:
    """What one Redis said in one sample; `info` is None when it did not answer."""

    label: str
    info: dict | None = None
    datasets: dict[str, dict[str, float]] = field(default_factory=dict)
    jobs: dict[str, dict[str, float]] = field(default_factory=dict)
    physical_bytes: float = 0.0


def numbers(fields: dict[bytes, bytes]) -> dict[str, float]:
    """A counter hash's numeric fields (not the fingerprint, nor anything else a writer put there)."""
    values = {}
    for name, value in fields.items():
        try:
            values[name.decode()] = float(value)
        except ValueError:
            pass
    values.pop(keys.FINGERPRINT, None)
    return values


def read_target(label: str, client: redis.Redis) -> Reading:
    try:
        info = client.info()
        pipe = client.pipeline(transaction=False)
        pipe.smembers(keys.DATASETS).zrange(keys.JOBS, 0, -1).hget(keys.CONTENT, keys.CONTENT_TOTAL)
        dataset_names, job_names, physical = pipe.execute()
        dataset_names = sorted(n.decode(errors="replace") for n in dataset_names)
        job_names = [n.decode(errors="replace") for n in job_names]
        for name in dataset_names:
            pipe.hgetall(keys.dataset(name))
        for name in job_names:
            pipe.hgetall(keys.job(name))
        hashes = [numbers(h) for h in pipe.execute()]
    except redis.RedisError:
        return Reading(label)
    datasets = dict(zip(dataset_names, hashes))
    jobs = {name: h for name, h in zip(job_names, hashes[len(dataset_names):]) if h}  # {}: expired
    return Reading(label, info, {name: h for name, h in datasets.items() if h}, jobs, float(physical or 0))


class CacheCollector:
    help = "Redis dataset cache: server INFO, keys per database, per-dataset and per-job cache counters, dedupe."
    default_enabled = False  # needs a Redis URL; Redis is cluster-wide, so one exporter should read it, not every node's
    default_interval_seconds = 5.0

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_flag(parser, "--collector.cache.redis-url", type=comma_separated(parse_redis_url), default=[], action=RepeatedList,
                 help="Redis to read, redis://[:password@]host:port/db (repeatable; comma-separated in the environment).")
        add_flag(parser, "--collector.cache.timeout", type=duration, default=1.0,
                 help="How long to wait for each Redis before reporting it down.")

    def __init__(self, options):
        urls = options.collector_cache_redis_url
        if not urls:
            raise CollectorUnavailable("no Redis to read: set --collector.cache.redis-url")
        self.targets = [(url_label(url), connect(url, options.collector_cache_timeout)) for url in urls]
        self.pool = ThreadPoolExecutor(len(self.targets), thread_name_prefix="cache-collector")

    def collect(self) -> Iterator[Metric]:
        readings = list(self.pool.map(lambda target: read_target(*target), self.targets))
        yield from server_metrics(readings)
        yield from cache_metrics(readings, "dataset", "dataset", lambda r: r.datasets)
        yield from cache_metrics(readings, "job", "job_name", lambda r: r.jobs)
        yield from dedupe_metrics(readings)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        for _, client in self.targets:
            client.close()


def server_metrics(readings: list[Reading]) -> Iterator[Metric]:
    up = GaugeMetricFamily("alnair_cache_up", "1 if Redis answered the last sample.", labels=["redis"])
    info = GaugeMetricFamily("alnair_cache_redis_info", "Redis identity and eviction policy.",
                             labels=["redis", "version", "role", "maxmemory_policy"])
    fields = [(CounterMetricFamily if counter else GaugeMetricFamily)(f"alnair_cache_{suffix}", text, labels=["redis"])
              for _, suffix, text, counter in INFO_FIELDS]
    db_keys = GaugeMetricFamily("alnair_cache_db_keys", "Keys in each database.", labels=["redis", "db"])
    db_expiring = GaugeMetricFamily("alnair_cache_db_expiring_keys", "Keys with an expiry in each database.", labels=["redis", "db"])
    for r in readings:
        up.add_metric([r.label], r.info is not None)
        if r.info is None:
            continue
        info.add_metric([r.label, str(r.info.get("redis_version", "")), str(r.info.get("role", "")),
                         str(r.info.get("maxmemory_policy", ""))], 1)
        for family, (info_field, _, _, _) in zip(fields, INFO_FIELDS):
            if info_field in r.info:
                family.add_metric([r.label], float(r.info[info_field]))
        for db, space in r.info.items():
            if db.startswith("db") and isinstance(space, dict):
                db_keys.add_metric([r.label, db[2:]], space.get("keys", 0))
                db_expiring.add_metric([r.label, db[2:]], space.get("expires", 0))
    yield from (up, info, *fields, db_keys, db_expiring)


def cache_metrics(readings: list[Reading], scope: str, label: str, hashes) -> Iterator[Metric]:
    """The dataset cache's counters and fetch latency, per dataset or per job (`scope`)."""
    labels = ["redis", label]
    counters = [CounterMetricFamily(f"alnair_cache_{scope}_{suffix}", text, labels=labels) for _, suffix, text in CACHE_COUNTERS]
    latency = HistogramMetricFamily(f"alnair_cache_{scope}_fetch_duration_seconds",
                                    "Time from asking for a batch of samples to holding their verified bytes.", labels=labels)
    for r in readings:
        for name, values in hashes(r).items():
            for family, (hash_field, _, _) in zip(counters, CACHE_COUNTERS):
                family.add_metric([r.label, name], values.get(hash_field, 0))
            latency.add_metric([r.label, name], cumulative_buckets(values), values.get(keys.FETCH_SECONDS, 0))
    yield from (*counters, latency)


def cumulative_buckets(values: dict[str, float]) -> list[tuple[str, float]]:
    buckets, total = [], 0.0
    for bound in keys.FETCH_BUCKETS:
        total += values.get(keys.bucket_field(bound), 0)
        buckets.append((f"{bound:g}", total))
    buckets.append(("+Inf", total + values.get(keys.FETCH_OVERFLOW, 0)))
    return buckets


def dedupe_metrics(readings: list[Reading]) -> Iterator[Metric]:
    samples = GaugeMetricFamily("alnair_cache_dataset_samples", "Samples in the dataset's origin.", labels=["redis", "dataset"])
    logical = GaugeMetricFamily("alnair_cache_dataset_logical_bytes",
                                "Bytes of the dataset's samples the manifest knows, as if stored alone.", labels=["redis", "dataset"])
    physical = GaugeMetricFamily("alnair_cache_physical_bytes",
                                 "Bytes of distinct content the manifests reference: each shared sample counted once.", labels=["redis"])
    for r in readings:
        if r.info is None:
            continue
        physical.add_metric([r.label], r.physical_bytes)
        for name, values in r.datasets.items():
            samples.add_metric([r.label, name], values.get(keys.SAMPLES, 0))
            logical.add_metric([r.label, name], values.get(keys.LOGICAL_BYTES, 0))
    yield from (samples, logical, physical)
