"""The chart's redis.cachePolicy: the Redis container's postStart command, run against a real redis-server, writes the
caps the dataset cache's scripts read, and a job there gets them."""

from __future__ import annotations

import subprocess

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, DirectoryOrigin
from chart_support import CHART, ci_values, objects, one

EVERYTHING = ci_values(CHART / "ci" / "everything-values.yaml")


def post_start(values: dict) -> str:
    statefulset = one(objects(values), "StatefulSet", "alnair-redis")
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    return container["lifecycle"]["postStart"]["exec"]["command"][2]


def test_post_start_writes_the_caps_that_jobs_then_get(start_redis, tmp_path):
    server = start_redis()
    client = server.client()
    client.hset(keys.POLICY, "stale_field", 1)  # left by an earlier release's values: replaced, not merged
    command = post_start(EVERYTHING).replace("-p 6379", f"-p {server.port}")
    subprocess.run(["sh", "-c", command], check=True, timeout=30)
    assert {k.decode(): v.decode() for k, v in client.hgetall(keys.POLICY).items()} == {
        keys.CAPACITY_BYTES: str(3 << 30),
        keys.JOB_QUOTA_BYTES: str(1 << 30),
        keys.NAMESPACE_QUOTA_BYTES: str(2 << 30),
        keys.MAX_PRIORITY: "10",
        keys.MARGIN: "0.5",
        keys.IDLE_SECONDS: "120",
        keys.WINDOW_SECONDS: "2",
        keys.per_namespace(keys.NAMESPACE_QUOTA_BYTES, "research"): str(512 << 20),
        keys.per_namespace(keys.MAX_PRIORITY, "research"): "2",
        keys.per_namespace(keys.MAX_PRIORITY, "production"): "100",
    }

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "0").write_bytes(b"sample")
    dataset = CachedDataset(
        server.url, "d", DirectoryOrigin(tmp_path / "d"), job="j", namespace="research", priority=50
    )
    assert dataset[0] == b"sample"
    dataset.close()
    space = client.hgetall(keys.job_space("j"))
    assert (float(space[keys.PRIORITY.encode()]), int(space[keys.QUOTA_BYTES.encode()])) == (2, 1 << 30)


def test_without_a_capacity_the_policy_is_off_and_the_hash_emptied(start_redis):
    server = start_redis()
    server.client().hset(keys.POLICY, keys.CAPACITY_BYTES, 1000)
    command = post_start({"redis": {"enabled": True}}).replace("-p 6379", f"-p {server.port}")
    subprocess.run(["sh", "-c", command], check=True, timeout=30)
    assert server.client().exists(keys.POLICY) == 0
