"""The cache collector: Redis INFO and keys per database, the dataset cache's per-dataset, per-job and per-namespace
counters, the space policy's caps and each job's and namespace's space, and logical vs physical bytes, for each Redis
given by --collector.cache.redis-url; for a Redis Cluster (redis+cluster://host:port,...), every node's INFO, keys and
slots and the cluster's state."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from alnair.abi import cache_keys as keys, cache_urls
from alnair.exporter.plugin import CollectorUnavailable, RepeatedList, add_flag, duration, flag_type

SLOTS = 16384

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
    (keys.SUBSTITUTED, "substituted", "Hits served in place of a sample that missed, which came later in the epoch."),
    (keys.STALL_SECONDS, "stall_seconds", "Seconds consumers (CacheLoader, CachedDataset.timed) waited for a batch."),
    (
        keys.CONSUMER_SECONDS,
        "consumer_seconds",
        "Seconds consumers spent from one batch to the next (waiting or working).",
    ),
]

# (hash field, metric suffix, help): the space policy's, the same for a job (its space hash) and a namespace.
SPACE_COUNTERS = [
    (keys.ADMITTED, "admitted", "Samples the space policy admitted into the cache."),
    (keys.REJECTED, "rejected", "Samples the space policy did not admit: over a quota, or no room it could take."),
    (keys.EVICTIONS, "evictions", "Samples the space policy evicted (for a job of more value, or a lowered quota)."),
    (keys.EVICTED_BYTES, "evicted_bytes", "Bytes of the samples the space policy evicted."),
    (keys.STALL_SAVED_SECONDS, "stall_saved_seconds", "Hits times the job's stall per miss: the stall it was saved."),
]

# (job space field, metric suffix, help): the policy's view of each job, gauges.
JOB_GAUGES = [
    (keys.PRIORITY, "priority", "The job's priority, as the operator's caps leave it."),
    (keys.QUOTA_BYTES, "quota_bytes", "The most the job may hold: its own quota within the operator's (+Inf: none)."),
    (
        keys.STALL_PER_MISS,
        "stall_per_miss_seconds",
        "The job's estimated stall per miss (its measured stall over its misses; 0 until a first estimate).",
    ),
    (
        keys.VALUE,
        "value",
        (
            "Priority x stall per miss x reads per second / footprint: the stall seconds a cached byte "
            "saves it per second (0 until a first estimate); the job of least value loses space first."
        ),
    ),
]


@flag_type
def redis_url_list(text: str) -> list[str]:
    """Comma-separated Redis URLs; a cluster URL's own commas (between its nodes) stay in it: an item
    without a scheme continues the redis+cluster:// URL before it."""
    urls: list[str] = []
    for item in filter(None, (item.strip() for item in text.split(","))):
        if "://" not in item and urls and cache_urls.is_cluster(urls[-1]):
            urls[-1] += "," + item
        else:
            urls.append(item)
    return [cache_urls.check(url) for url in urls]


def connect(url: str, timeout: float) -> redis.Redis:
    """A client that gives up within `timeout` and never retries on its own: a Redis that is down costs
    one timeout per sample, and is reported down."""
    return redis.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0)
    )


def url_label(url: str) -> str:
    """The URL without its credentials: how a target is named in the `redis` label."""
    parsed = urllib.parse.urlparse(url)
    host = parsed.netloc.rpartition("@")[2]
    return urllib.parse.urlunparse(parsed._replace(netloc=host))


@dataclass
class NodeReading:
    """One cluster node as CLUSTER NODES names it, and its INFO (None when it did not answer)."""

    address: str
    role: str
    slots: int
    info: dict | None = None


@dataclass
class Reading:
    """What one Redis (or cluster) said in one sample; `up` is False when it (its metadata's node) did not
    answer. `info` is one server's INFO; a cluster's are in `nodes`, with its CLUSTER INFO in `cluster`."""

    label: str
    up: bool = False
    info: dict | None = None
    datasets: dict[str, dict[str, float]] = field(default_factory=dict)
    jobs: dict[str, dict[str, float]] = field(default_factory=dict)
    job_spaces: dict[str, dict[str, float]] = field(default_factory=dict)
    job_namespaces: dict[str, str] = field(default_factory=dict)
    namespaces: dict[str, dict[str, float]] = field(default_factory=dict)
    policy: dict[str, float] = field(default_factory=dict)
    space_used: float = 0.0
    physical_bytes: float = 0.0
    nodes: list[NodeReading] = field(default_factory=list)
    cluster: dict | None = None


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
        reading = read_counters(label, client, cluster=False)
    except redis.RedisError:
        return Reading(label)
    reading.info = info
    return reading


def read_counters(label: str, client: redis.Redis, cluster: bool) -> Reading:
    """The dataset cache's registries, counter and space hashes, the policy's caps and the content total (metadata
    keys: keys.metadata). Jobs are those that fetched within their TTL and those still holding space."""

    def meta(name: str) -> str:
        return keys.metadata(name, cluster)

    pipe = client.pipeline(transaction=False)
    pipe.smembers(meta(keys.DATASETS))
    pipe.zrange(meta(keys.JOBS), 0, -1)
    pipe.zrange(meta(keys.HOLDERS), 0, -1)
    pipe.smembers(meta(keys.NAMESPACES))
    pipe.hget(meta(keys.CONTENT), keys.CONTENT_TOTAL)
    pipe.hgetall(meta(keys.POLICY))
    pipe.hget(meta(keys.SPACE), keys.SPACE_USED)
    dataset_names, job_names, holders, namespace_names, physical, policy, used = pipe.execute()
    dataset_names, namespace_names = (
        sorted(n.decode(errors="replace") for n in names) for names in (dataset_names, namespace_names)
    )
    job_names = list(dict.fromkeys(n.decode(errors="replace") for n in (*job_names, *holders)))
    named = (
        [keys.dataset(n) for n in dataset_names]
        + [keys.job(n) for n in job_names]
        + [keys.job_space(n) for n in job_names]
        + [keys.namespace(n) for n in namespace_names]
    )
    for name in named:
        pipe.hgetall(meta(name))
    raw = pipe.execute()
    hashes = iter(numbers(h) for h in raw)
    datasets, jobs, spaces, namespaces = (
        {name: next(hashes) for name in names} for names in (dataset_names, job_names, job_names, namespace_names)
    )
    job_namespaces = {
        name: h.get(keys.NAMESPACE.encode(), b"").decode(errors="replace")
        for name, h in zip(job_names, raw[len(dataset_names) + len(job_names) :])
    }
    present = [
        {name: h for name, h in found.items() if h}  # {}: expired
        for found in (datasets, jobs, spaces, namespaces)
    ]
    return Reading(
        label,
        True,
        None,
        present[0],
        present[1],
        present[2],
        job_namespaces,
        present[3],
        numbers(policy),
        float(used or 0),
        float(physical or 0),
    )


def cluster_nodes(text: str) -> list[tuple[str, str, list[tuple[int, int]]]]:
    """(host:port, "primary" or "replica", slot ranges served) of each node in CLUSTER NODES."""
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8 or "noaddr" in fields[2] or "handshake" in fields[2]:
            continue
        ranges = []
        for item in fields[8:]:
            if item.startswith("["):
                continue  # a slot being imported or migrated: still served where it was
            start, _, end = item.partition("-")
            ranges.append((int(start), int(end or start)))
        nodes.append((fields[1].split("@")[0], "primary" if "master" in fields[2] else "replica", ranges))
    return nodes


class ClusterTarget:
    """A Redis Cluster read through its seeds: CLUSTER NODES and CLUSTER INFO from the first node that
    answers, then every node's INFO at once (a node down costs one timeout on its own thread) and the
    counters from the primary that serves the metadata's slot."""

    def __init__(self, url: str, timeout: float):
        parsed = cache_urls.parse_cluster(url)
        self.seeds = [cache_urls.address(node) for node in parsed.seeds]
        self.timeout = timeout
        self._username, self._password = parsed.username, parsed.password
        self._clients: dict[str, redis.Redis] = {}
        self._answered: list[str] = []  # the node whose topology the last sample used
        self._pool = ThreadPoolExecutor(16, thread_name_prefix="cache-collector-node")

    def client(self, address: str) -> redis.Redis:
        if address not in self._clients:
            host, _, port = address.rpartition(":")
            self._clients[address] = redis.Redis(
                host=host.strip("[]"),
                port=int(port),
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                username=self._username,
                password=self._password,
            )
        return self._clients[address]

    def read(self, label: str) -> Reading:
        topology = self._topology()
        if topology is None:
            return Reading(label)
        nodes, cluster_info = topology
        readings = [
            NodeReading(address, role, sum(end - start + 1 for start, end in ranges)) for address, role, ranges in nodes
        ]
        meta_slot = key_slot(keys.metadata(keys.DATASETS, True).encode())
        meta_node = next(
            (
                address
                for address, role, ranges in nodes
                if role == "primary" and any(start <= meta_slot <= end for start, end in ranges)
            ),
            None,
        )
        counters = self._pool.submit(self._counters, label, meta_node)
        for node, info in zip(readings, self._pool.map(self._info, [n.address for n in readings])):
            node.info = info
        reading = counters.result()
        reading.nodes, reading.cluster = readings, cluster_info
        return reading

    def _topology(self) -> tuple[list, dict] | None:
        """CLUSTER NODES and CLUSTER INFO of the node that answered last time, else of the first seed (then
        node seen before) that answers: a seed that is down costs a timeout once, not every sample."""
        for address in dict.fromkeys([*self._answered[-1:], *self.seeds, *self._clients]):
            try:
                client = self.client(address)
                nodes, info = client.execute_command("CLUSTER", "NODES"), client.execute_command("CLUSTER", "INFO")
            except redis.RedisError:
                continue
            self._answered = [address]
            info = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
            return cluster_nodes(nodes.decode()), info
        return None

    def _info(self, address: str) -> dict | None:
        try:
            return self.client(address).info()
        except redis.RedisError:
            return None

    def _counters(self, label: str, meta_node: str | None) -> Reading:
        if meta_node is None:
            return Reading(label)
        try:
            return read_counters(label, self.client(meta_node), cluster=True)
        except redis.RedisError:
            return Reading(label)

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        for client in self._clients.values():
            client.close()


class CacheCollector:
    help = "Redis dataset cache: server INFO, keys per database, per-dataset and per-job cache counters, dedupe."
    default_enabled = (
        False  # needs a Redis URL; Redis is cluster-wide, so one exporter should read it, not every node's
    )
    default_interval_seconds = 5.0

    @classmethod
    def add_arguments(cls, parser) -> None:
        add_flag(
            parser,
            "--collector.cache.redis-url",
            type=redis_url_list,
            default=[],
            action=RepeatedList,
            help="Redis to read, redis://[:password@]host:port/db, or a Redis Cluster, "
            "redis+cluster://[:password@]host:port[,host:port...] (repeatable; comma-separated in the environment).",
        )
        add_flag(
            parser,
            "--collector.cache.timeout",
            type=duration,
            default=1.0,
            help="How long to wait for each Redis before reporting it down.",
        )

    def __init__(self, options):
        urls = options.collector_cache_redis_url
        if not urls:
            raise CollectorUnavailable("no Redis to read: set --collector.cache.redis-url")
        timeout = options.collector_cache_timeout
        self.targets = [
            (url_label(url), ClusterTarget(url, timeout) if cache_urls.is_cluster(url) else connect(url, timeout))
            for url in urls
        ]
        self.pool = ThreadPoolExecutor(len(self.targets), thread_name_prefix="cache-collector")

    def collect(self) -> Iterator[Metric]:
        readings = list(self.pool.map(self._read, self.targets))
        yield from server_metrics(readings)
        yield from cache_metrics(readings, "dataset", "dataset", lambda r: r.datasets)
        yield from cache_metrics(readings, "job", "job_name", lambda r: r.jobs)
        yield from cache_metrics(readings, "namespace", "namespace", lambda r: r.namespaces)
        yield from space_metrics(readings, "job", "job_name", lambda r: r.job_spaces)
        yield from space_metrics(readings, "namespace", "namespace", lambda r: r.namespaces)
        yield from policy_metrics(readings)
        yield from dedupe_metrics(readings)
        yield from node_metrics(readings)

    @staticmethod
    def _read(target: tuple[str, redis.Redis | ClusterTarget]) -> Reading:
        label, source = target
        return source.read(label) if isinstance(source, ClusterTarget) else read_target(label, source)

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        for _, source in self.targets:
            source.close()


def server_metrics(readings: list[Reading]) -> Iterator[Metric]:
    up = GaugeMetricFamily("alnair_cache_up", "1 if Redis answered the last sample.", labels=["redis"])
    info = GaugeMetricFamily(
        "alnair_cache_redis_info",
        "Redis identity and eviction policy.",
        labels=["redis", "version", "role", "maxmemory_policy"],
    )
    fields = [
        (CounterMetricFamily if counter else GaugeMetricFamily)(f"alnair_cache_{suffix}", text, labels=["redis"])
        for _, suffix, text, counter in INFO_FIELDS
    ]
    db_keys = GaugeMetricFamily("alnair_cache_db_keys", "Keys in each database.", labels=["redis", "db"])
    db_expiring = GaugeMetricFamily(
        "alnair_cache_db_expiring_keys", "Keys with an expiry in each database.", labels=["redis", "db"]
    )
    for r in readings:
        up.add_metric([r.label], r.up)
        if r.info is None:
            continue
        info.add_metric(
            [
                r.label,
                str(r.info.get("redis_version", "")),
                str(r.info.get("role", "")),
                str(r.info.get("maxmemory_policy", "")),
            ],
            1,
        )
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
    counters = [
        CounterMetricFamily(f"alnair_cache_{scope}_{suffix}", text, labels=labels) for _, suffix, text in CACHE_COUNTERS
    ]
    latency = HistogramMetricFamily(
        f"alnair_cache_{scope}_fetch_duration_seconds",
        "Time from asking for a batch of samples to holding their verified bytes.",
        labels=labels,
    )
    for r in readings:
        for name, values in hashes(r).items():
            for family, (hash_field, _, _) in zip(counters, CACHE_COUNTERS):
                family.add_metric([r.label, name], values.get(hash_field, 0))
            latency.add_metric([r.label, name], cumulative_buckets(values), values.get(keys.FETCH_SECONDS, 0))
    yield from (*counters, latency)


def space_metrics(readings: list[Reading], scope: str, label: str, hashes) -> Iterator[Metric]:
    """The space policy's counters and the bytes held, per job (its space hash) or per namespace (`scope`)."""
    labels = ["redis", label]
    counters = [
        CounterMetricFamily(f"alnair_cache_{scope}_{suffix}", text, labels=labels) for _, suffix, text in SPACE_COUNTERS
    ]
    cached = GaugeMetricFamily(
        f"alnair_cache_{scope}_cached_bytes", "Bytes of samples held under the space policy.", labels=labels
    )
    for r in readings:
        for name, values in hashes(r).items():
            for family, (hash_field, _, _) in zip(counters, SPACE_COUNTERS):
                family.add_metric([r.label, name], values.get(hash_field, 0))
            cached.add_metric([r.label, name], values.get(keys.CACHED_BYTES, 0))
    yield from (*counters, cached)


def policy_metrics(readings: list[Reading]) -> Iterator[Metric]:
    """The operator's caps, the space in use, each job's namespace and its place under the policy."""
    capacity = GaugeMetricFamily(
        "alnair_cache_policy_capacity_bytes",
        "Bytes the space policy may fill with samples (alnair:policy's capacity_bytes; 0: off, "
        "Redis's own maxmemory policy evicts).",
        labels=["redis"],
    )
    used = GaugeMetricFamily(
        "alnair_cache_policy_used_bytes", "Bytes of samples held under the space policy.", labels=["redis"]
    )
    quota = GaugeMetricFamily(
        "alnair_cache_namespace_quota_bytes",
        "The most a namespace's jobs may hold together (the operator's cap; +Inf: none).",
        labels=["redis", "namespace"],
    )
    info = GaugeMetricFamily(
        "alnair_cache_job_namespace_info",
        "The namespace a job is charged to.",
        labels=["redis", "job_name", "namespace"],
    )
    gauges = [
        GaugeMetricFamily(f"alnair_cache_job_{suffix}", text, labels=["redis", "job_name"])
        for _, suffix, text in JOB_GAUGES
    ]
    footprint = GaugeMetricFamily(
        "alnair_cache_job_footprint_bytes", "Bytes of one pass over the job's datasets.", labels=["redis", "job_name"]
    )
    for r in readings:
        if not r.up:
            continue
        capacity.add_metric([r.label], r.policy.get(keys.CAPACITY_BYTES, 0))
        used.add_metric([r.label], r.space_used)
        for namespace in r.namespaces:
            cap = r.policy.get(
                keys.per_namespace(keys.NAMESPACE_QUOTA_BYTES, namespace), r.policy.get(keys.NAMESPACE_QUOTA_BYTES, 0)
            )
            quota.add_metric([r.label, namespace], cap if cap > 0 else float("inf"))
        for job, values in r.job_spaces.items():
            info.add_metric([r.label, job, r.job_namespaces.get(job, "")], 1)
            for family, (space_field, _, _) in zip(gauges, JOB_GAUGES):
                family.add_metric([r.label, job], values.get(space_field, 0))
            footprint.add_metric(
                [r.label, job], sum(v for k, v in values.items() if k.startswith(keys.FOOTPRINT_PREFIX))
            )
    yield from (capacity, used, quota, info, *gauges, footprint)


def cumulative_buckets(values: dict[str, float]) -> list[tuple[str, float]]:
    buckets, total = [], 0.0
    for bound in keys.FETCH_BUCKETS:
        total += values.get(keys.bucket_field(bound), 0)
        buckets.append((f"{bound:g}", total))
    buckets.append(("+Inf", total + values.get(keys.FETCH_OVERFLOW, 0)))
    return buckets


def dedupe_metrics(readings: list[Reading]) -> Iterator[Metric]:
    samples = GaugeMetricFamily(
        "alnair_cache_dataset_samples", "Samples in the dataset's origin.", labels=["redis", "dataset"]
    )
    logical = GaugeMetricFamily(
        "alnair_cache_dataset_logical_bytes",
        "Bytes of the dataset's samples the manifest knows, as if stored alone.",
        labels=["redis", "dataset"],
    )
    physical = GaugeMetricFamily(
        "alnair_cache_physical_bytes",
        "Bytes of distinct content the manifests reference: each shared sample counted once.",
        labels=["redis"],
    )
    for r in readings:
        if not r.up:
            continue
        physical.add_metric([r.label], r.physical_bytes)
        for name, values in r.datasets.items():
            samples.add_metric([r.label, name], values.get(keys.SAMPLES, 0))
            logical.add_metric([r.label, name], values.get(keys.LOGICAL_BYTES, 0))
    yield from (samples, logical, physical)


def node_metrics(readings: list[Reading]) -> Iterator[Metric]:
    """A cluster target's nodes (each with the INFO families of one server, `alnair_cache_node_*`) and state."""
    labels = ["redis", "node"]
    up = GaugeMetricFamily("alnair_cache_node_up", "1 if the cluster node answered INFO this sample.", labels=labels)
    info = GaugeMetricFamily(
        "alnair_cache_node_info",
        "A cluster node's role (primary, replica), version and eviction policy.",
        labels=[*labels, "role", "version", "maxmemory_policy"],
    )
    slots = GaugeMetricFamily(
        "alnair_cache_node_slots", "Hash slots the cluster node serves as a primary.", labels=labels
    )
    fields = [
        (CounterMetricFamily if counter else GaugeMetricFamily)(f"alnair_cache_node_{suffix}", text, labels=labels)
        for _, suffix, text, counter in INFO_FIELDS
    ]
    node_keys = GaugeMetricFamily("alnair_cache_node_keys", "Keys the cluster node holds.", labels=labels)
    state = GaugeMetricFamily(
        "alnair_cache_cluster_state_ok", "1 if the cluster says cluster_state:ok.", labels=["redis"]
    )
    covered = GaugeMetricFamily(
        "alnair_cache_cluster_slots_covered",
        f"Hash slots (of {SLOTS}) the cluster serves (cluster_slots_ok).",
        labels=["redis"],
    )
    for r in readings:
        if r.cluster is not None:
            state.add_metric([r.label], r.cluster.get("cluster_state") == "ok")
            covered.add_metric([r.label], float(r.cluster.get("cluster_slots_ok", 0)))
        for node in r.nodes:
            up.add_metric([r.label, node.address], node.info is not None)
            slots.add_metric([r.label, node.address], node.slots)
            if node.info is None:
                continue
            info.add_metric(
                [
                    r.label,
                    node.address,
                    node.role,
                    str(node.info.get("redis_version", "")),
                    str(node.info.get("maxmemory_policy", "")),
                ],
                1,
            )
            for family, (info_field, _, _, _) in zip(fields, INFO_FIELDS):
                if info_field in node.info:
                    family.add_metric([r.label, node.address], float(node.info[info_field]))
            node_keys.add_metric(
                [r.label, node.address],
                sum(
                    space.get("keys", 0)
                    for db, space in node.info.items()
                    if db.startswith("db") and isinstance(space, dict)
                ),
            )
    yield from (up, info, slots, *fields, node_keys, state, covered)
