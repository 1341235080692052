"""Dataset cache: hit ratios per dataset and job, bytes from the cache and from the origin, fetch latency,
fallbacks and Redis errors, and the Redis behind it: reachability, memory, evictions, deduplication; for a Redis
Cluster target (redis+cluster://), its nodes: which answer, memory against maxmemory, evictions, keys, the
cluster's state and the hash slots it serves."""
from __future__ import annotations

from . import variables as v
from .model import Dashboard, Query, row, states, timeseries
from .promql import DASHBOARD as S
from .promql import CLUSTER_SLOTS, DATASET, REDIS, by, cache_hit_ratio, cache_node_memory_of_max, dedupe_ratio
from .promql import rate, selector

PER_DATASET = ("redis", "dataset")
DATASET_LEGEND = "{{dataset}} ({{redis}})"


def dataset_rate(counter: str, legend: str) -> Query:
    return Query(by(PER_DATASET, "sum", rate(S, f"alnair_cache_dataset_{counter}_total", DATASET)), legend)


def latency(quantile: float) -> Query:
    buckets = by([*PER_DATASET, "le"], "sum", rate(S, "alnair_cache_dataset_fetch_duration_seconds_bucket", DATASET))
    return Query(f"histogram_quantile({quantile}, {buckets})", f"{DATASET_LEGEND} p{quantile * 100:g}")


REDIS_ROW = row(
    "Redis",
    states("Redis reachable", "Whether the cache collector reached each Redis in its last sample (AlnairRedisDown "
           "after a while). Jobs fall back to the origin while it is down.",
           Query(selector(S, "alnair_cache_up", REDIS), "{{redis}}"), off=("down", "red"), on=("up", "green")),
    timeseries("Memory used and maximum", "Memory Redis uses, and its maxmemory (0: no limit). Near the maximum, "
               "Redis evicts samples and the hit ratio falls.", "bytes",
               Query(selector(S, "alnair_cache_memory_used_bytes", REDIS), "{{redis}} used"),
               Query(selector(S, "alnair_cache_memory_max_bytes", REDIS), "{{redis}} maximum"), min=0),
)

HITS = row(
    "Hits",
    timeseries("Hit ratio per dataset", "Samples served from Redis over all samples fetched (hits, misses and "
               "fallbacks). A first epoch is all misses; AlnairCacheHitRatioLow fires when it stays low.", "percentunit",
               Query(cache_hit_ratio(S, "dataset", PER_DATASET), DATASET_LEGEND), min=0, max=1),
    timeseries("Hit ratio per job", "The same per job (the job name each loader gives).", "percentunit",
               Query(cache_hit_ratio(S, "job", ("redis", "job_name")), "{{job_name}} ({{redis}})"), min=0, max=1),
    timeseries("Fetches per second", "Samples per second served from Redis (hits), read from the origin because Redis "
               "lacked them (misses) or because Redis was unreachable or slow (fallbacks).", "ops",
               dataset_rate("hits", f"{DATASET_LEGEND} hits"), dataset_rate("misses", f"{DATASET_LEGEND} misses"),
               dataset_rate("fallbacks", f"{DATASET_LEGEND} fallbacks"), min=0),
    timeseries("Bytes from the cache and the origin", "Bytes of samples per second read from Redis and from the origin.",
               "binBps", dataset_rate("cache_read_bytes", f"{DATASET_LEGEND} cache"),
               dataset_rate("origin_read_bytes", f"{DATASET_LEGEND} origin"), min=0),
)

ERRORS = row(
    "Latency and errors",
    timeseries("Fetch latency", "Median and 99th percentile of one batch's fetch, from the request to its verified "
               "bytes.", "s", latency(0.5), latency(0.99), min=0),
    timeseries("Fallbacks, Redis errors and corrupt values", "Per second: samples read from the origin because Redis "
               "failed, Redis operations that failed, and cached values whose bytes did not match their hash.", "ops",
               dataset_rate("fallbacks", f"{DATASET_LEGEND} fallbacks"),
               dataset_rate("redis_errors", f"{DATASET_LEGEND} Redis errors"),
               dataset_rate("corrupt_values", f"{DATASET_LEGEND} corrupt"), min=0),
)

STORAGE = row(
    "Storage",
    timeseries("Evictions and expirations", "Keys per second Redis evicted for memory and expired by their TTL.", "ops",
               Query(rate(S, "alnair_cache_evicted_keys_total", REDIS), "{{redis}} evicted"),
               Query(rate(S, "alnair_cache_expired_keys_total", REDIS), "{{redis}} expired"), min=0),
    timeseries("Logical and physical bytes", "Bytes of the samples the datasets' manifests know, as if each were "
               "stored alone (logical), and of the distinct content stored (physical).", "bytes",
               Query(by(["redis"], "sum", selector(S, "alnair_cache_dataset_logical_bytes", DATASET)), "{{redis}} logical"),
               Query(selector(S, "alnair_cache_physical_bytes", REDIS), "{{redis}} physical"), min=0),
    timeseries("Deduplication ratio", "Logical over physical bytes: how many times over shared samples would be "
               "stored without content addressing.", "none", Query(dedupe_ratio(S), "{{redis}}"), min=0),
    timeseries("Keys", "Keys in each Redis database, and those with a TTL.", "none",
               Query(selector(S, "alnair_cache_db_keys", REDIS), "{{redis}} db{{db}}"),
               Query(selector(S, "alnair_cache_db_expiring_keys", REDIS), "{{redis}} db{{db}} expiring"), min=0),
)

NODE_LEGEND = "{{node}} ({{redis}})"


def node_series(metric: str, suffix: str = "") -> Query:
    return Query(selector(S, f"alnair_cache_node_{metric}", REDIS), f"{NODE_LEGEND}{suffix}")


CLUSTER = row(
    "Cluster",
    timeseries("Cluster nodes up", "Per Redis Cluster target: the nodes that answered INFO in the collector's last "
               "sample, of the nodes CLUSTER NODES lists (primaries and replicas). AlnairRedisClusterNodeDown fires "
               "when one stays down. Empty for single-server targets.", "none",
               Query(by(["redis"], "sum", selector(S, "alnair_cache_node_up", REDIS)), "{{redis}} up"),
               Query(by(["redis"], "count", selector(S, "alnair_cache_node_up", REDIS)), "{{redis}} known"), min=0),
    states("Node reachable", "Each cluster node (host:port as the cluster names it): whether it answered the cache "
           "collector. A primary down has its slots served by its replica once the cluster fails over; until then "
           "its samples come from the origin (fallbacks).",
           node_series("up"), off=("down", "red"), on=("up", "green")),
    states("Cluster state", "CLUSTER INFO's cluster_state: ok, or fail (a primary down with no replica to promote, or no "
           "majority of primaries): AlnairRedisClusterStateNotOk.",
           Query(selector(S, "alnair_cache_cluster_state_ok", REDIS), "{{redis}}"), off=("fail", "red"),
           on=("ok", "green")),
    timeseries("Hash slots covered and per node", f"Hash slots (of {CLUSTER_SLOTS}) the cluster serves "
               "(cluster_slots_ok; AlnairRedisClusterSlotsUncovered below all of them), and the slots each primary "
               "serves (0 for replicas): uneven slots put uneven load and memory on the nodes.", "none",
               Query(selector(S, "alnair_cache_cluster_slots_covered", REDIS), "{{redis}} covered"),
               node_series("slots"), min=0),
    timeseries("Memory used and maximum per node", "Memory each cluster node uses, and its maxmemory (0: no limit). "
               "A replica holds what its primary holds.", "bytes",
               node_series("memory_used_bytes", " used"), node_series("memory_max_bytes", " maximum"), min=0),
    timeseries("Memory used of maximum per node", "Each node's memory used over its maxmemory (nodes without one "
               "left out). Near 1 the node evicts samples (AlnairRedisClusterNodeNearMaxMemory).", "percentunit",
               Query(cache_node_memory_of_max(S), NODE_LEGEND), min=0, max=1),
    timeseries("Evictions and expirations per node", "Keys per second each cluster node evicted for memory and "
               "expired by their TTL: one node evicting while the others do not is a hot or oversized shard.", "ops",
               Query(rate(S, "alnair_cache_node_evicted_keys_total", REDIS), f"{NODE_LEGEND} evicted"),
               Query(rate(S, "alnair_cache_node_expired_keys_total", REDIS), f"{NODE_LEGEND} expired"), min=0),
    timeseries("Keys per node", "Keys each cluster node holds (all databases; a replica's are its primary's): "
               "samples spread by the cluster's own slots, so the primaries' counts should be close.", "none",
               node_series("keys"), min=0),
)

DASHBOARD = Dashboard(
    "alnair-dataset-cache", "Alnair / Dataset cache",
    "The Redis dataset cache: hit ratios, bytes from cache and origin, latency, fallbacks, memory and deduplication, "
    "and a Redis Cluster's nodes.",
    (v.DATASOURCE, v.REDIS, v.DATASET, v.CACHE_JOB),
    (REDIS_ROW, HITS, ERRORS, STORAGE, CLUSTER),
)
