"""Samples are stored once under the SHA-256 of their bytes, with a manifest per dataset."""

from __future__ import annotations

import hashlib
import os

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from conftest import sample_bytes


def counters(client, key: str) -> dict[str, float]:
    return {k.decode(): float(v) for k, v in client.hgetall(key).items() if k != b"fingerprint"}


def blob_count(client) -> int:
    return sum(1 for _ in client.scan_iter(f"{keys.PREFIX}blob:*"))


def epoch(dataset, batch_size: int = 8) -> list[bytes]:
    return [sample for batch in CacheLoader(dataset, batch_size, workers=2) for sample in batch]


def test_first_epoch_fills_the_cache_and_the_second_is_served_from_it(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(20)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="job-a")

    assert epoch(dataset) == samples
    assert epoch(dataset) == samples

    client = redis_server.client()
    size = len(samples[0])
    expected = {"misses": 20, "hits": 20, "origin_bytes": 20 * size, "cache_bytes": 20 * size, "fetches": 6}
    for key in (keys.dataset("train"), keys.job("job-a")):
        assert {k: v for k, v in counters(client, key).items() if k in expected} == expected
    assert client.get(keys.blob(hashlib.sha256(samples[3]).digest())) == samples[3]
    assert float(client.hget(keys.dataset("train"), "samples")) == 20
    assert client.zscore(keys.JOBS, "job-a") is not None


def test_a_later_job_reads_the_manifest_and_never_touches_the_origin(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(12)
    origin = make_origin(samples)
    epoch(CachedDataset(redis_server.url, "train", origin, job="first"))

    class NoOrigin(DirectoryOrigin):
        def read(self, index: int) -> bytes:
            raise AssertionError(f"origin read for sample {index}")

    later = CachedDataset(redis_server.url, "train", NoOrigin(origin.root), job="second")
    assert epoch(later) == samples
    assert counters(redis_server.client(), keys.job("second"))["hits"] == 12


def test_identical_content_in_two_datasets_is_stored_once(start_redis, make_origin):
    redis_server = start_redis()
    shared = sample_bytes(10, seed=1)
    only_a, only_b = sample_bytes(4, seed=2), sample_bytes(6, seed=3)
    a = CachedDataset(redis_server.url, "users/alice/set", make_origin(only_a + shared, "a"), job="alice")
    b = CachedDataset(redis_server.url, "users/bob/set", make_origin(shared[::-1] + only_b, "b"), job="bob")

    assert epoch(a) == only_a + shared
    assert epoch(b) == shared[::-1] + only_b

    client = redis_server.client()
    size = len(shared[0])
    assert blob_count(client) == 20
    assert float(client.hget(keys.CONTENT, keys.CONTENT_TOTAL)) == 20 * size
    assert float(client.hget(keys.dataset("users/alice/set"), "logical_bytes")) == 14 * size
    assert float(client.hget(keys.dataset("users/bob/set"), "logical_bytes")) == 16 * size
    assert client.smembers(keys.DATASETS) == {b"users/alice/set", b"users/bob/set"}


def test_duplicate_samples_within_a_dataset_share_one_blob(start_redis, make_origin):
    redis_server = start_redis()
    same = sample_bytes(1)[0]
    dataset = CachedDataset(redis_server.url, "dups", make_origin([same] * 5), job="j")
    assert epoch(dataset) == [same] * 5
    assert blob_count(redis_server.client()) == 1
    assert float(redis_server.client().hget(keys.dataset("dups"), "logical_bytes")) == 5 * len(same)


def test_a_rewritten_origin_gets_a_new_manifest_and_its_new_bytes(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(6)
    origin = make_origin(samples)
    assert epoch(CachedDataset(redis_server.url, "train", origin, job="j")) == samples

    rewritten = sample_bytes(1, seed=9)[0]
    path = origin.paths[2]
    path.write_bytes(rewritten)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again = CachedDataset(redis_server.url, "train", DirectoryOrigin(origin.root), job="j")

    assert epoch(again) == samples[:2] + [rewritten] + samples[3:]
    assert float(redis_server.client().hget(keys.dataset("train"), "logical_bytes")) == 6 * len(rewritten)
