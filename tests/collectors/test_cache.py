"""The cache collector against real redis-servers and a real Redis Cluster: INFO, keys per database, the
dataset cache's counters and dedupe bytes, every cluster node and the cluster's state; an unreachable Redis
(or cluster node) is up 0 and costs at most its timeout."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from alnair.abi import cache_keys as keys
from alnair.collectors.cache import CacheCollector
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from alnair.exporter.config import parse_options
from alnair.exporter.plugin import CollectorUnavailable, render
from alnair.exporter.registry import CollectorSpec
from support import fill_cache, free_port, parse_samples, wait_until

SIZE = 1000


def options(*argv: str, env: dict[str, str] | None = None, monkeypatch=None):
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    return parse_options(["--collector.cache", *argv], [CollectorSpec.of("cache", CacheCollector)])


def scrape(collector: CacheCollector) -> dict[str, float]:
    return parse_samples(render(collector.collect()).decode())


def series(name: str, **labels: str) -> str:
    """A sample's key as the exposition writes it: labels sorted by name."""
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_collector_reports_server_cache_counters_and_dedupe(start_redis, tmp_path):
    server = start_redis("--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
    fill_cache(server.url, tmp_path, [("a", "job-1", range(10)), ("b", "job-2", range(5, 15))], SIZE)
    collector = CacheCollector(options(f"--collector.cache.redis-url={server.url}"))

    samples = scrape(collector)

    assert samples[series("alnair_cache_up", redis=server.url)] == 1
    assert samples[series("alnair_cache_memory_max_bytes", redis=server.url)] == 64 * 1024 * 1024
    assert samples[series("alnair_cache_db_keys", redis=server.url, db="0")] == server.client().dbsize()
    stats = server.client().info("stats")  # read after the collector's INFO, so at least as high
    assert 0 < samples[series("alnair_cache_keyspace_misses_total", redis=server.url)] <= stats["keyspace_misses"]
    assert (
        0
        < samples[series("alnair_cache_commands_processed_total", redis=server.url)]
        <= stats["total_commands_processed"]
    )
    assert any(k.startswith("alnair_cache_redis_info{") and 'maxmemory_policy="allkeys-lru"' in k for k in samples)
    for dataset, job in (("a", "job-1"), ("b", "job-2")):
        assert samples[series("alnair_cache_dataset_misses_total", redis=server.url, dataset=dataset)] == 10
        assert (
            samples[series("alnair_cache_dataset_origin_read_bytes_total", redis=server.url, dataset=dataset)]
            == 10 * SIZE
        )
        assert samples[series("alnair_cache_dataset_logical_bytes", redis=server.url, dataset=dataset)] == 10 * SIZE
        assert samples[series("alnair_cache_dataset_samples", redis=server.url, dataset=dataset)] == 10
        assert samples[series("alnair_cache_job_misses_total", redis=server.url, job_name=job)] == 10
        assert samples[series("alnair_cache_job_fetch_duration_seconds_count", redis=server.url, job_name=job)] == 3
        assert (
            samples[series("alnair_cache_job_fetch_duration_seconds_bucket", redis=server.url, job_name=job, le="+Inf")]
            == 3
        )
    assert samples[series("alnair_cache_physical_bytes", redis=server.url)] == 15 * SIZE  # samples 5-9 are shared

    list(CacheLoader(CachedDataset(server.url, "a", DirectoryOrigin(tmp_path / "a"), job="job-3"), 4))
    samples = scrape(collector)
    assert samples[series("alnair_cache_dataset_hits_total", redis=server.url, dataset="a")] == 10
    assert samples[series("alnair_cache_dataset_cache_read_bytes_total", redis=server.url, dataset="a")] == 10 * SIZE
    assert samples[series("alnair_cache_job_hits_total", redis=server.url, job_name="job-3")] == 10
    assert samples[series("alnair_cache_keyspace_hits_total", redis=server.url)] >= 10


def test_unreachable_and_stalled_redis_are_up_0_within_the_timeout(start_redis):
    live, stalled = start_redis(), start_redis()
    refused = f"redis://127.0.0.1:{free_port()}/0"
    collector = CacheCollector(
        options(
            f"--collector.cache.redis-url={live.url},{refused}",
            f"--collector.cache.redis-url={stalled.url}",
            "--collector.cache.timeout=0.3",
        )
    )
    stalled.pause()
    try:
        started = time.monotonic()
        samples = scrape(collector)
        elapsed = time.monotonic() - started
    finally:
        stalled.resume()
    assert elapsed < 0.3 * 2  # targets are read in parallel, each bounded by the timeout
    assert samples[series("alnair_cache_up", redis=live.url)] == 1
    assert samples[series("alnair_cache_up", redis=refused)] == 0
    assert samples[series("alnair_cache_up", redis=stalled.url)] == 0
    assert series("alnair_cache_memory_used_bytes", redis=stalled.url) not in samples
    assert scrape(collector)[series("alnair_cache_up", redis=stalled.url)] == 1  # and back when it answers


def test_credentials_never_reach_a_label(start_redis):
    server = start_redis("--requirepass", "s3cret")
    url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
    samples = scrape(CacheCollector(options(f"--collector.cache.redis-url={url}")))
    assert samples[series("alnair_cache_up", redis=f"redis://127.0.0.1:{server.port}/0")] == 1
    assert not [k for k in samples if "s3cret" in k]


def test_without_a_redis_url_the_collector_is_unavailable():
    with pytest.raises(CollectorUnavailable, match="set --collector.cache.redis-url"):
        CacheCollector(options())


def test_urls_come_from_the_environment_comma_separated_and_flags_replace_them(monkeypatch):
    env = {"ALNAIR_COLLECTOR_CACHE_REDIS_URL": "redis://a:6379/0, redis://b:6379/1"}
    assert options(env=env, monkeypatch=monkeypatch).collector_cache_redis_url == [
        "redis://a:6379/0",
        "redis://b:6379/1",
    ]
    given = options(
        "--collector.cache.redis-url=redis://c:1/0",
        "--collector.cache.redis-url",
        "unix:///run/r.sock",
        env=env,
        monkeypatch=monkeypatch,
    )
    assert given.collector_cache_redis_url == ["redis://c:1/0", "unix:///run/r.sock"]


@pytest.mark.parametrize(
    "args, env",
    [
        (["--collector.cache.redis-url", "localhost:6379"], {}),
        ([], {"ALNAIR_COLLECTOR_CACHE_REDIS_URL": "redis://ok:1/0,http://nope"}),
    ],
)
def test_a_bad_redis_url_exits_2_with_one_line(args, env):
    result = subprocess.run(
        [sys.executable, "-m", "alnair.exporter", "--collector.cache", *args],
        capture_output=True,
        text=True,
        timeout=30,
        env={**__import__("os").environ, **env},
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "not a Redis URL" in result.stderr


def test_a_job_leaves_the_metrics_when_its_ttl_passes_and_its_dataset_stays(start_redis, tmp_path):
    server = start_redis()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "0").write_bytes(b"sample")
    CachedDataset(server.url, "d", DirectoryOrigin(tmp_path / "d"), job="short", job_ttl_seconds=1)[0]
    collector = CacheCollector(options(f"--collector.cache.redis-url={server.url}"))
    job_misses = series("alnair_cache_job_misses_total", redis=server.url, job_name="short")
    assert scrape(collector)[job_misses] == 1

    wait_until(lambda: job_misses not in scrape(collector), timeout=10)
    assert scrape(collector)[series("alnair_cache_dataset_misses_total", redis=server.url, dataset="d")] == 1


def test_a_cluster_target_reports_every_node_the_cluster_state_and_the_cache_counters(cluster, tmp_path):
    fill_cache(cluster.url, tmp_path, [("a", "job-1", range(10)), ("b", "job-2", range(5, 15))], SIZE)
    collector = CacheCollector(options(f"--collector.cache.redis-url={cluster.url}", "--collector.cache.timeout=0.3"))
    nodes = [f"127.0.0.1:{s.port}" for s in cluster.servers]
    samples = scrape(collector)

    assert samples[series("alnair_cache_up", redis=cluster.url)] == 1
    assert samples[series("alnair_cache_cluster_state_ok", redis=cluster.url)] == 1
    assert samples[series("alnair_cache_cluster_slots_covered", redis=cluster.url)] == 16384
    assert [samples[series("alnair_cache_node_up", redis=cluster.url, node=n)] for n in nodes] == [1] * 6
    assert sum(samples[series("alnair_cache_node_slots", redis=cluster.url, node=n)] for n in nodes) == 16384
    primaries = [f"127.0.0.1:{s.port}" for s in cluster.primaries()]
    assert sum(samples[series("alnair_cache_node_keys", redis=cluster.url, node=n)] for n in primaries) == sum(
        s.client().dbsize() for s in cluster.primaries()
    )
    assert all(samples[series("alnair_cache_node_memory_used_bytes", redis=cluster.url, node=n)] > 0 for n in nodes)
    assert sorted(k.split('role="')[1].split('"')[0] for k in samples if k.startswith("alnair_cache_node_info{")) == (
        ["primary"] * 3 + ["replica"] * 3
    )
    assert samples[series("alnair_cache_dataset_misses_total", redis=cluster.url, dataset="a")] == 10
    assert samples[series("alnair_cache_job_misses_total", redis=cluster.url, job_name="job-2")] == 10
    assert samples[series("alnair_cache_physical_bytes", redis=cluster.url)] == 15 * SIZE
    assert samples[series("alnair_cache_namespace_misses_total", redis=cluster.url, namespace="default")] == 20
    assert samples[series("alnair_cache_policy_capacity_bytes", redis=cluster.url)] == 0  # the policy off
    assert series("alnair_cache_memory_used_bytes", redis=cluster.url) not in samples  # per node instead

    replica = next(s for s in cluster.servers if f"127.0.0.1:{s.port}" not in primaries)
    replica.pause()
    try:
        started = time.monotonic()
        samples = scrape(collector)
        elapsed = time.monotonic() - started
    finally:
        replica.resume()
    assert elapsed < 0.3 * 3  # the stalled node costs one timeout, on its own thread
    up = {n: samples[series("alnair_cache_node_up", redis=cluster.url, node=n)] for n in nodes}
    assert up == {n: 0 if n == f"127.0.0.1:{replica.port}" else 1 for n in nodes}
    assert samples[series("alnair_cache_up", redis=cluster.url)] == 1
    assert samples[series("alnair_cache_dataset_misses_total", redis=cluster.url, dataset="b")] == 10


def test_collector_reports_space_per_job_and_namespace_and_the_policys_caps(start_redis, tmp_path):
    server = start_redis()
    server.client().hset(
        keys.POLICY,
        mapping={
            keys.CAPACITY_BYTES: 12 * SIZE,
            keys.JOB_QUOTA_BYTES: 8 * SIZE,
            keys.per_namespace(keys.NAMESPACE_QUOTA_BYTES, "team-a"): 5 * SIZE,
        },
    )
    for job, namespace in (("a1", "team-a"), ("b1", "team-b")):
        (tmp_path / job).mkdir()
        for i in range(10):
            (tmp_path / job / f"{i:02d}").write_bytes(bytes([i, ord(job[0])]) * (SIZE // 2))
        dataset = CachedDataset(
            server.url, job, DirectoryOrigin(tmp_path / job), job=job, namespace=namespace, priority=2
        )
        for _ in range(2):
            list(CacheLoader(dataset, 5))
        dataset.close()
    samples = scrape(CacheCollector(options(f"--collector.cache.redis-url={server.url}")))

    def value(name: str, **labels: str) -> float:
        return samples[series(f"alnair_cache_{name}", redis=server.url, **labels)]

    def per_job(name: str, *jobs: str) -> list[float]:
        return [value(f"job_{name}", job_name=job) for job in jobs]

    assert (value("policy_capacity_bytes"), value("policy_used_bytes")) == (12 * SIZE, 12 * SIZE)
    assert per_job("cached_bytes", "a1", "b1") == [5 * SIZE, 7 * SIZE]  # a1 its namespace's cap, b1 the room left
    assert value("namespace_cached_bytes", namespace="team-a") == 5 * SIZE
    assert value("namespace_quota_bytes", namespace="team-a") == 5 * SIZE
    assert value("namespace_quota_bytes", namespace="team-b") == float("inf")
    assert per_job("quota_bytes", "a1") == [8 * SIZE] and per_job("priority", "b1") == [2]
    assert per_job("admitted_total", "a1") + per_job("rejected_total", "a1") == [5, 10]
    assert value("namespace_rejected_total", namespace="team-b") == 6  # 3 in each epoch: no room left
    assert per_job("hits_total", "a1") == [value("namespace_hits_total", namespace="team-a")] == [5]
    assert value("job_namespace_info", job_name="b1", namespace="team-b") == 1
    assert per_job("footprint_bytes", "a1") == [10 * SIZE] and per_job("evictions_total", "b1") == [0]
    assert per_job("consumer_seconds_total", "a1") >= per_job("stall_seconds_total", "a1") > [0]


def test_a_cluster_urls_commas_stay_in_it_beside_other_urls(monkeypatch):
    env = {"ALNAIR_COLLECTOR_CACHE_REDIS_URL": "redis://a:1/0,redis+cluster://b:1, c:2,redis://d:3/0"}
    assert options(env=env, monkeypatch=monkeypatch).collector_cache_redis_url == [
        "redis://a:1/0",
        "redis+cluster://b:1,c:2",
        "redis://d:3/0",
    ]
