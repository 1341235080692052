"""A real Prometheus scrapes the cache collector reading a live and a dead Redis, and a Redis Cluster with
one node down; promtool lints it."""

from __future__ import annotations

import subprocess

import requests

from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from support import fill_cache, free_port, wait_until
from test_prometheus_scrape import query, require

SIZE = 2048


def value(prom: str, promql: str) -> float | None:
    result = query(prom, promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_cache_counters_dedupe_and_up(start_redis, start_exporter, prometheus, tmp_path):
    server = start_redis()
    fill_cache(server.url, tmp_path, [("a", "job-a", range(10)), ("b", "job-b", range(5, 15))], SIZE)
    list(CacheLoader(CachedDataset(server.url, "a", DirectoryOrigin(tmp_path / "a"), job="job-a"), 4))  # all hits
    dead = f"redis://127.0.0.1:{free_port()}/0"
    exporter = start_exporter(
        "--collector.disable-defaults",
        "--collector.cache",
        "--collector.cache.interval=0.5",
        env={"ALNAIR_COLLECTOR_CACHE_REDIS_URL": f"{server.url},{dead}"},
    )
    prom = prometheus(f"127.0.0.1:{exporter.port}")

    assert wait_until(lambda: value(prom, f'alnair_cache_up{{redis="{server.url}"}}'), timeout=60) == 1
    assert value(prom, f'alnair_cache_up{{redis="{dead}"}}') == 0
    assert value(prom, 'alnair_cache_dataset_hits_total{dataset="a"}') == 10
    assert value(prom, 'alnair_cache_dataset_misses_total{dataset="b"}') == 10
    assert value(prom, 'alnair_cache_job_cache_read_bytes_total{job_name="job-a"}') == 10 * SIZE
    assert value(prom, "sum(alnair_cache_dataset_logical_bytes) / sum(alnair_cache_physical_bytes)") == 20 / 15
    assert value(prom, 'alnair_cache_job_fetch_duration_seconds_count{job_name="job-a"}') == 6
    assert value(prom, 'histogram_quantile(0.5, alnair_cache_job_fetch_duration_seconds_bucket{job_name="job-a"})') > 0
    assert value(prom, f'alnair_cache_db_keys{{redis="{server.url}",db="0"}}') == server.client().dbsize()
    assert value(prom, 'alnair_exporter_collector_success{collector="cache"}') == 1

    body = requests.get(exporter.url + "/metrics").text
    result = subprocess.run([require("promtool"), "check", "metrics"], input=body, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def test_prometheus_scrapes_a_cluster_with_one_node_down(cluster, start_exporter, prometheus, tmp_path):
    fill_cache(cluster.url, tmp_path, [("a", "job-a", range(10))], SIZE)
    primaries = {s.port for s in cluster.primaries()}
    down = next(s for s in cluster.servers if s.port not in primaries)  # a replica: no failover to wait for
    down.kill()
    exporter = start_exporter(
        "--collector.disable-defaults",
        "--collector.cache",
        "--collector.cache.interval=0.5",
        "--collector.cache.timeout=0.5",
        env={"ALNAIR_COLLECTOR_CACHE_REDIS_URL": cluster.url},
    )
    prom = prometheus(f"127.0.0.1:{exporter.port}")
    node = f'redis="{cluster.url}",node="127.0.0.1:{down.port}"'

    assert wait_until(lambda: value(prom, "count(alnair_cache_node_up == 1)"), timeout=60) == 5
    assert value(prom, f"alnair_cache_node_up{{{node}}}") == 0
    assert value(prom, f'alnair_cache_up{{redis="{cluster.url}"}}') == 1
    assert value(prom, "sum(alnair_cache_node_slots)") == 16384
    assert value(prom, "alnair_cache_cluster_slots_covered") == 16384
    assert value(prom, 'alnair_cache_dataset_misses_total{dataset="a"}') == 10
    assert value(prom, "count(alnair_cache_node_memory_used_bytes)") == 5
    assert value(prom, 'alnair_exporter_collector_success{collector="cache"}') == 1

    body = requests.get(exporter.url + "/metrics").text
    result = subprocess.run([require("promtool"), "check", "metrics"], input=body, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
