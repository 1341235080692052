"""The in-process manifest: entries and check digests as Redis stores them, merged without losing what the
origin said."""

from __future__ import annotations

import hashlib

from alnair.abi import cache_keys as keys
from alnair.datacache import content
from alnair.datacache.manifest import Manifest


def sha(sample: bytes) -> bytes:
    return hashlib.sha256(sample).digest()


def check(sample: bytes) -> bytes:
    return content.check_digest(sample, sha(sample))


def entries(*samples: bytes | None) -> bytes:
    return b"".join(keys.ENTRY.pack(sha(s), len(s)) if s is not None else bytes(keys.ENTRY_SIZE) for s in samples)


def checks(*samples: bytes | None) -> bytes:
    return b"".join(check(s) if s is not None else bytes(keys.CHECK_SIZE) for s in samples)


def known(manifest: Manifest) -> list[tuple[bytes | None, bytes | None]]:
    return [(manifest.digest(i), manifest.check(i)) for i in range(manifest.samples)]


def test_check_digest_is_xxh3_128_seeded_by_the_sha256_address():
    assert content.address(b"one") == sha(b"one")
    assert len(check(b"one")) == keys.CHECK_SIZE == 16 and check(b"one") != check(b"two")
    assert content.check_digest(b"one", sha(b"two")) != check(b"one")  # the same bytes under another address


def test_unknown_entries_are_none_and_learned_ones_are_their_digests():
    manifest = Manifest(3)
    manifest.learn(1, sha(b"one"), 3, check(b"one"))
    assert known(manifest) == [(None, None), (sha(b"one"), check(b"one")), (None, None)]


def test_a_first_merge_takes_everything_redis_knows():
    manifest = Manifest(4)
    manifest.merge(entries(b"a", None, b"c"), checks(b"a"))  # shorter than the dataset: the rest stays unknown
    assert known(manifest) == [(sha(b"a"), check(b"a")), (None, None), (sha(b"c"), None), (None, None)]


def test_a_manifest_written_before_check_digests_merges_with_none():
    manifest = Manifest(2)
    manifest.merge(entries(b"a", b"b"), b"")
    assert known(manifest) == [(sha(b"a"), None), (sha(b"b"), None)]


def test_a_merge_keeps_what_the_origin_said_and_fills_the_gaps():
    manifest = Manifest(4)
    manifest.learn(0, sha(b"new a"), 5, check(b"new a"))
    manifest.merge(
        entries(b"old a", b"b", None, b"d", b"beyond the dataset"), checks(b"old a", b"b", None, None, b"beyond")
    )
    assert known(manifest) == [
        (sha(b"new a"), check(b"new a")),
        (sha(b"b"), check(b"b")),
        (None, None),
        (sha(b"d"), None),
    ]


def test_a_merge_takes_a_check_digest_only_beside_the_entry_it_was_made_for():
    manifest = Manifest(2)
    manifest.learn(0, sha(b"a"), 1, check(b"a"))
    manifest.learn_check(0, bytes(keys.CHECK_SIZE))  # verified by SHA-256 alone so far
    manifest.merge(entries(b"a", b"b"), checks(b"a", b"b"))
    assert known(manifest) == [(sha(b"a"), check(b"a")), (sha(b"b"), check(b"b"))]
    stale = Manifest(1)
    stale.learn(0, sha(b"new"), 3, bytes(keys.CHECK_SIZE))
    stale.merge(entries(b"old"), checks(b"old"))
    assert known(stale) == [(sha(b"new"), None)]


def test_merging_what_it_already_holds_changes_nothing():
    manifest = Manifest(2)
    manifest.merge(entries(b"a", b"b"), checks(b"a", b"b"))
    manifest.merge(entries(b"a", b"b"), checks(b"a", b"b"))
    assert known(manifest) == [(sha(b"a"), check(b"a")), (sha(b"b"), check(b"b"))]
