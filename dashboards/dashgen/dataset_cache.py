"""Dataset cache: hit ratios per dataset and job, bytes from the cache and from the origin, fetch latency,
fallbacks and Redis errors; the space policy per job and namespace: space held against capacity and quotas, hits,
evictions, refused admissions, data stall and the stall the cache saves, each job's value; and the Redis behind it:
reachability, memory, evictions, deduplication; for a Redis Cluster target (redis+cluster://), its nodes: which
answer, memory against maxmemory, evictions, keys, the cluster's state and the hash slots it serves."""

from __future__ import annotations

from . import variables as v
from .model import Dashboard, Query, Variable, row, states, timeseries
from .promql import (
    CACHE_JOB,
    CLUSTER_SLOTS,
    DASHBOARD as S,
    DATASET,
    REDIS,
    by,
    cache_hit_ratio,
    cache_node_memory_of_max,
    dedupe_ratio,
    rate,
    ratio,
    selector,
)

PER_DATASET = ("redis", "dataset")
DATASET_LEGEND = "{{dataset}} ({{redis}})"


def dataset_rate(counter: str, legend: str) -> Query:
    return Query(by(PER_DATASET, "sum", rate(S, f"alnair_cache_dataset_{counter}_total", DATASET)), legend)


def latency(quantile: float) -> Query:
    buckets = by([*PER_DATASET, "le"], "sum", rate(S, "alnair_cache_dataset_fetch_duration_seconds_bucket", DATASET))
    return Query(f"histogram_quantile({quantile}, {buckets})", f"{DATASET_LEGEND} p{quantile * 100:g}")


# The namespaces jobs are charged to (the space policy's), filtered as the other dashboards filter pods' namespaces.
NAMESPACE = Variable(
    "namespace",
    "Namespace",
    'label_values(alnair_cache_namespace_hits_total{redis=~"$redis"}, namespace)',
    all_value=".*",
)
CACHE_NAMESPACE = ("redis", "namespace")
JOB_LEGEND, NAMESPACE_LEGEND = "{{job_name}} ({{redis}})", "{{namespace}} ({{redis}})"


def per_job(metric: str, legend: str = JOB_LEGEND, counter: bool = True) -> Query:
    series = rate(S, metric, CACHE_JOB) if counter else selector(S, metric, CACHE_JOB)
    return Query(by(CACHE_JOB, "sum", series), legend)


def per_namespace(metric: str, legend: str = NAMESPACE_LEGEND, counter: bool = True) -> Query:
    series = rate(S, metric, CACHE_NAMESPACE) if counter else selector(S, metric, CACHE_NAMESPACE)
    return Query(by(CACHE_NAMESPACE, "sum", series), legend)


def job_stall_share() -> Query:
    stall, consumer = (
        by(CACHE_JOB, "sum", rate(S, f"alnair_cache_job_{name}_seconds_total", CACHE_JOB))
        for name in ("stall", "consumer")
    )
    return Query(ratio(stall, consumer), JOB_LEGEND)


SPACE = row(
    "Space by job and namespace",
    timeseries(
        "Space held per job",
        "Bytes each job holds under the space policy (the samples it admitted), beside "
        "the policy's capacity (docs/datacache.md, Space for many jobs). 0 throughout: the policy is off (no "
        "capacity set) and Redis's own maxmemory policy evicts.",
        "bytes",
        per_job("alnair_cache_job_cached_bytes", counter=False),
        Query(selector(S, "alnair_cache_policy_capacity_bytes", REDIS), "{{redis}} capacity", line=True),
        min=0,
    ),
    timeseries(
        "Space held per namespace",
        "Bytes each namespace's jobs hold together, beside the operator's quota for the namespace (where one is set).",
        "bytes",
        per_namespace("alnair_cache_namespace_cached_bytes", counter=False),
        Query(
            f"{selector(S, 'alnair_cache_namespace_quota_bytes', CACHE_NAMESPACE)} < Inf",
            f"{NAMESPACE_LEGEND} quota",
            line=True,
        ),
        min=0,
    ),
    timeseries(
        "Hits per job and namespace",
        "Samples per second each job and each namespace read from the cache.",
        "ops",
        per_job("alnair_cache_job_hits_total"),
        per_namespace("alnair_cache_namespace_hits_total", f"namespace {NAMESPACE_LEGEND}"),
        min=0,
    ),
    timeseries(
        "Evictions per job and namespace",
        "Samples per second the space policy evicted from each job and "
        "namespace: for a job of more value (priority x stall per miss x reads per second per byte), or under a "
        "quota lowered below what a job held.",
        "ops",
        per_job("alnair_cache_job_evictions_total"),
        per_namespace("alnair_cache_namespace_evictions_total", f"namespace {NAMESPACE_LEGEND}"),
        min=0,
    ),
    timeseries(
        "Admissions refused per job",
        "Samples per second the space policy did not admit for each job: over "
        "its quota or its namespace's, or no room its value could take. With a high data stall this is a job "
        "starved of cache (AlnairCacheJobStarved).",
        "ops",
        per_job("alnair_cache_job_rejected_total"),
        min=0,
    ),
    timeseries(
        "Data stall per job",
        "The share of each job's loop spent waiting for the next batch (CacheLoader, or a "
        "loop wrapped in CachedDataset.timed).",
        "percentunit",
        job_stall_share(),
        min=0,
        max=1,
    ),
    timeseries(
        "Stall saved per job",
        "Seconds of data stall per second the cache saves each job: its hits times its "
        "stall per miss (its measured stall over its misses).",
        "s",
        per_job("alnair_cache_job_stall_saved_seconds_total"),
        per_namespace("alnair_cache_namespace_stall_saved_seconds_total", f"namespace {NAMESPACE_LEGEND}"),
        min=0,
    ),
    timeseries(
        "Value per job",
        "Each job's value under the space policy: the stall seconds one cached byte saves it "
        "per second, times its priority. The space of the job of least value goes first, to a job whose value "
        "exceeds it by the margin.",
        "none",
        per_job("alnair_cache_job_value", counter=False),
        min=0,
    ),
)

REDIS_ROW = row(
    "Redis",
    states(
        "Redis reachable",
        "Whether the cache collector reached each Redis in its last sample (AlnairRedisDown "
        "after a while). Jobs fall back to the origin while it is down.",
        Query(selector(S, "alnair_cache_up", REDIS), "{{redis}}"),
        off=("down", "red"),
        on=("up", "green"),
    ),
    timeseries(
        "Memory used and maximum",
        "Memory Redis uses, and its maxmemory (0: no limit). Near the maximum, "
        "Redis evicts samples and the hit ratio falls.",
        "bytes",
        Query(selector(S, "alnair_cache_memory_used_bytes", REDIS), "{{redis}} used"),
        Query(selector(S, "alnair_cache_memory_max_bytes", REDIS), "{{redis}} maximum"),
        min=0,
    ),
)

HITS = row(
    "Hits",
    timeseries(
        "Hit ratio per dataset",
        "Samples served from Redis over all samples fetched (hits, misses and "
        "fallbacks). A first epoch is all misses; AlnairCacheHitRatioLow fires when it stays low.",
        "percentunit",
        Query(cache_hit_ratio(S, "dataset", PER_DATASET), DATASET_LEGEND),
        min=0,
        max=1,
    ),
    timeseries(
        "Hit ratio per job",
        "The same per job (the job name each loader gives).",
        "percentunit",
        Query(cache_hit_ratio(S, "job", ("redis", "job_name")), "{{job_name}} ({{redis}})"),
        min=0,
        max=1,
    ),
    timeseries(
        "Fetches per second",
        "Samples per second served from Redis (hits), read from the origin because Redis "
        "lacked them (misses) or because Redis was unreachable or slow (fallbacks).",
        "ops",
        dataset_rate("hits", f"{DATASET_LEGEND} hits"),
        dataset_rate("misses", f"{DATASET_LEGEND} misses"),
        dataset_rate("fallbacks", f"{DATASET_LEGEND} fallbacks"),
        min=0,
    ),
    timeseries(
        "Bytes from the cache and the origin",
        "Bytes of samples per second read from Redis and from the origin.",
        "binBps",
        dataset_rate("cache_read_bytes", f"{DATASET_LEGEND} cache"),
        dataset_rate("origin_read_bytes", f"{DATASET_LEGEND} origin"),
        min=0,
    ),
)

ERRORS = row(
    "Latency and errors",
    timeseries(
        "Fetch latency",
        "Median and 99th percentile of one batch's fetch, from the request to its verified bytes.",
        "s",
        latency(0.5),
        latency(0.99),
        min=0,
    ),
    timeseries(
        "Fallbacks, Redis errors and corrupt values",
        "Per second: samples read from the origin because Redis "
        "failed, Redis operations that failed, and cached values whose bytes did not match their hash.",
        "ops",
        dataset_rate("fallbacks", f"{DATASET_LEGEND} fallbacks"),
        dataset_rate("redis_errors", f"{DATASET_LEGEND} Redis errors"),
        dataset_rate("corrupt_values", f"{DATASET_LEGEND} corrupt"),
        min=0,
    ),
)

STORAGE = row(
    "Storage",
    timeseries(
        "Evictions and expirations",
        "Keys per second Redis evicted for memory and expired by their TTL.",
        "ops",
        Query(rate(S, "alnair_cache_evicted_keys_total", REDIS), "{{redis}} evicted"),
        Query(rate(S, "alnair_cache_expired_keys_total", REDIS), "{{redis}} expired"),
        min=0,
    ),
    timeseries(
        "Logical and physical bytes",
        "Bytes of the samples the datasets' manifests know, as if each were "
        "stored alone (logical), and of the distinct content stored (physical).",
        "bytes",
        Query(by(["redis"], "sum", selector(S, "alnair_cache_dataset_logical_bytes", DATASET)), "{{redis}} logical"),
        Query(selector(S, "alnair_cache_physical_bytes", REDIS), "{{redis}} physical"),
        min=0,
    ),
    timeseries(
        "Deduplication ratio",
        "Logical over physical bytes: how many times over shared samples would be stored without content addressing.",
        "none",
        Query(dedupe_ratio(S), "{{redis}}"),
        min=0,
    ),
    timeseries(
        "Keys",
        "Keys in each Redis database, and those with a TTL.",
        "none",
        Query(selector(S, "alnair_cache_db_keys", REDIS), "{{redis}} db{{db}}"),
        Query(selector(S, "alnair_cache_db_expiring_keys", REDIS), "{{redis}} db{{db}} expiring"),
        min=0,
    ),
)

NODE_LEGEND = "{{node}} ({{redis}})"


def node_series(metric: str, suffix: str = "") -> Query:
    return Query(selector(S, f"alnair_cache_node_{metric}", REDIS), f"{NODE_LEGEND}{suffix}")


CLUSTER = row(
    "Cluster",
    timeseries(
        "Cluster nodes up",
        "Per Redis Cluster target: the nodes that answered INFO in the collector's last "
        "sample, of the nodes CLUSTER NODES lists (primaries and replicas). AlnairRedisClusterNodeDown fires "
        "when one stays down. Empty for single-server targets.",
        "none",
        Query(by(["redis"], "sum", selector(S, "alnair_cache_node_up", REDIS)), "{{redis}} up"),
        Query(by(["redis"], "count", selector(S, "alnair_cache_node_up", REDIS)), "{{redis}} known"),
        min=0,
    ),
    states(
        "Node reachable",
        "Each cluster node (host:port as the cluster names it): whether it answered the cache "
        "collector. A primary down has its slots served by its replica once the cluster fails over; until then "
        "its samples come from the origin (fallbacks).",
        node_series("up"),
        off=("down", "red"),
        on=("up", "green"),
    ),
    states(
        "Cluster state",
        "CLUSTER INFO's cluster_state: ok, or fail (a primary down with no replica to promote, or no "
        "majority of primaries): AlnairRedisClusterStateNotOk.",
        Query(selector(S, "alnair_cache_cluster_state_ok", REDIS), "{{redis}}"),
        off=("fail", "red"),
        on=("ok", "green"),
    ),
    timeseries(
        "Hash slots covered and per node",
        f"Hash slots (of {CLUSTER_SLOTS}) the cluster serves "
        "(cluster_slots_ok; AlnairRedisClusterSlotsUncovered below all of them), and the slots each primary "
        "serves (0 for replicas): uneven slots put uneven load and memory on the nodes.",
        "none",
        Query(selector(S, "alnair_cache_cluster_slots_covered", REDIS), "{{redis}} covered"),
        node_series("slots"),
        min=0,
    ),
    timeseries(
        "Memory used and maximum per node",
        "Memory each cluster node uses, and its maxmemory (0: no limit). A replica holds what its primary holds.",
        "bytes",
        node_series("memory_used_bytes", " used"),
        node_series("memory_max_bytes", " maximum"),
        min=0,
    ),
    timeseries(
        "Memory used of maximum per node",
        "Each node's memory used over its maxmemory (nodes without one "
        "left out). Near 1 the node evicts samples (AlnairRedisClusterNodeNearMaxMemory).",
        "percentunit",
        Query(cache_node_memory_of_max(S), NODE_LEGEND),
        min=0,
        max=1,
    ),
    timeseries(
        "Evictions and expirations per node",
        "Keys per second each cluster node evicted for memory and "
        "expired by their TTL: one node evicting while the others do not is a hot or oversized shard.",
        "ops",
        Query(rate(S, "alnair_cache_node_evicted_keys_total", REDIS), f"{NODE_LEGEND} evicted"),
        Query(rate(S, "alnair_cache_node_expired_keys_total", REDIS), f"{NODE_LEGEND} expired"),
        min=0,
    ),
    timeseries(
        "Keys per node",
        "Keys each cluster node holds (all databases; a replica's are its primary's): "
        "samples spread by the cluster's own slots, so the primaries' counts should be close.",
        "none",
        node_series("keys"),
        min=0,
    ),
)

DASHBOARD = Dashboard(
    "alnair-dataset-cache",
    "Alnair / Dataset cache",
    "The Redis dataset cache: hit ratios, bytes from cache and origin, space, hits and evictions per job and namespace "
    "under the space policy, latency, fallbacks, memory and deduplication, and a Redis Cluster's nodes.",
    (v.DATASOURCE, v.REDIS, v.DATASET, v.CACHE_JOB, NAMESPACE),
    (REDIS_ROW, HITS, SPACE, ERRORS, STORAGE, CLUSTER),
)
