"""Every value read from Redis is verified: by the XXH3-128 check digest beside its manifest entry, or by its
SHA-256 where the manifest has no check digest yet (written before them), which then records one."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
import xxhash

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, DirectoryOrigin, content
from conftest import sample_bytes


@pytest.fixture
def hashed(monkeypatch) -> Counter:
    """How many SHA-256 addresses and check digests the cache computes."""
    calls: Counter = Counter()
    for name in ("address", "check_digest"):
        real = getattr(content, name)
        monkeypatch.setattr(content, name, lambda *args, _real=real, _name=name: calls.update([_name]) or _real(*args))
    return calls


class NoOrigin(DirectoryOrigin):
    def read(self, index: int) -> bytes:
        raise AssertionError(f"origin read for sample {index}: Redis had it")


def counts(client) -> dict[str, float]:
    return {k.decode(): float(v) for k, v in client.hgetall(keys.dataset("train")).items() if k != b"fingerprint"}


def stored_checks(client, samples: list[bytes]) -> list[bytes]:
    """The check digests in Redis, and what they must be, per sample."""
    stored = client.get(keys.checks("train")) or b""
    size = keys.CHECK_SIZE
    return [stored[i * size : (i + 1) * size] for i in range(len(samples))]


def expected_checks(samples: list[bytes]) -> list[bytes]:
    """XXH3-128 seeded by the SHA-256's first 8 bytes (little-endian), computed here without the code under test."""
    seeds = [int.from_bytes(hashlib.sha256(s).digest()[:8], "little") for s in samples]
    return [xxhash.xxh3_128(s, seed=seed).digest() for s, seed in zip(samples, seeds)]


def test_bytes_altered_in_redis_fail_their_check_digest_and_are_repaired(start_redis, make_origin, hashed):
    redis_server = start_redis()
    samples = sample_bytes(8)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="j")
    assert dataset.__getitems__(list(range(8))) == samples  # from the origin: SHA-256 and check digest of each
    client = redis_server.client()
    assert stored_checks(client, samples) == expected_checks(samples)

    hashed.clear()
    assert dataset.__getitems__(list(range(8))) == samples
    assert hashed == {"check_digest": 8}  # intact values: one check digest each, no SHA-256

    damaged = keys.blob(hashlib.sha256(samples[3]).digest())
    middle = len(samples[3]) // 2
    client.setrange(damaged, middle, bytes([samples[3][middle] ^ 0x40]))  # same length, one bit
    assert len(client.get(damaged)) == len(samples[3]) and client.get(damaged) != samples[3]
    hashed.clear()
    assert dataset.__getitems__(list(range(8))) == samples
    # 8 checks; the failed one's SHA-256 confirms the damage; the origin's bytes are hashed both ways
    assert hashed == {"check_digest": 9, "address": 2}
    assert client.get(damaged) == samples[3]
    assert stored_checks(client, samples) == expected_checks(samples)
    assert (counts(client)["corrupt"], counts(client)["misses"], counts(client)["hits"]) == (1, 9, 15)

    hashed.clear()
    assert dataset.__getitems__(list(range(8))) == samples
    assert hashed == {"check_digest": 8}


def test_a_manifest_without_check_digests_verifies_by_sha256_and_is_upgraded(start_redis, make_origin, hashed):
    redis_server = start_redis()
    samples = sample_bytes(6)
    origin = make_origin(samples)
    CachedDataset(redis_server.url, "train", origin, job="first").__getitems__(list(range(6)))
    client = redis_server.client()
    client.delete(keys.checks("train"))  # what a version before check digests left: the manifest and blobs alone
    corrupted = keys.blob(hashlib.sha256(samples[4]).digest())
    client.setrange(corrupted, 0, bytes([samples[4][0] ^ 1]))

    hashed.clear()
    older = CachedDataset(redis_server.url, "train", origin, job="second")
    assert older.__getitems__(list(range(6))) == samples
    assert client.get(corrupted) == samples[4]  # SHA-256 caught it: read from the origin, repaired
    assert (counts(client)["corrupt"], counts(client)["hits"]) == (1, 5)
    assert stored_checks(client, samples) == expected_checks(samples)  # upgraded, the repaired one too
    # SHA-256 of the 6 cached values (then the check digests of the 5 intact ones), and both of the origin's bytes
    assert hashed == {"address": 7, "check_digest": 6}

    hashed.clear()
    upgraded = CachedDataset(redis_server.url, "train", NoOrigin(origin.root), job="third")
    assert upgraded.__getitems__(list(range(6))) == samples
    assert hashed == {"check_digest": 6}


def test_a_check_digest_out_of_step_with_its_entry_falls_back_to_sha256_not_to_the_origin(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(4)
    origin = make_origin(samples)
    CachedDataset(redis_server.url, "train", origin, job="first").__getitems__(list(range(4)))
    client = redis_server.client()
    client.setrange(
        keys.checks("train"), keys.CHECK_SIZE, bytes(range(keys.CHECK_SIZE))
    )  # sample 1's, say from another writer

    dataset = CachedDataset(redis_server.url, "train", NoOrigin(origin.root), job="second")
    assert dataset.__getitems__(list(range(4))) == samples
    assert counts(client).get("corrupt", 0) == 0 and counts(client)["hits"] == 4
    assert stored_checks(client, samples) == expected_checks(samples)


def test_shared_content_has_one_blob_and_the_same_check_digest_in_every_dataset(start_redis, make_origin):
    redis_server = start_redis()
    shared = sample_bytes(3, seed=1)
    a = CachedDataset(redis_server.url, "a", make_origin(shared, "a"), job="j")
    b = CachedDataset(redis_server.url, "b", make_origin(shared[::-1], "b"), job="j")
    assert a.__getitems__([0, 1, 2]) == shared and b.__getitems__([0, 1, 2]) == shared[::-1]

    client = redis_server.client()
    assert sum(1 for _ in client.scan_iter(f"{keys.PREFIX}blob:*")) == 3
    assert client.get(keys.checks("a")) == b"".join(expected_checks(shared))
    assert client.get(keys.checks("b")) == b"".join(expected_checks(shared[::-1]))
