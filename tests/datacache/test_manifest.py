"""The in-process manifest: entries as Redis stores them, merged without losing what the origin said."""
from __future__ import annotations

import hashlib

from alnair.datacache.manifest import Manifest
from alnair.datacache import keys


def entries(*samples: bytes | None) -> bytes:
    return b"".join(keys.ENTRY.pack(hashlib.sha256(s).digest(), len(s)) if s is not None else bytes(keys.ENTRY_SIZE)
                    for s in samples)


def test_unknown_entries_are_none_and_learned_ones_are_their_digest():
    manifest = Manifest(3)
    manifest.learn(1, hashlib.sha256(b"one").digest(), 3)
    assert [manifest.digest(i) for i in range(3)] == [None, hashlib.sha256(b"one").digest(), None]


def test_a_first_merge_takes_everything_redis_knows():
    manifest = Manifest(4)
    manifest.merge(entries(b"a", None, b"c"))  # shorter than the dataset: the rest stays unknown
    assert [manifest.digest(i) for i in range(4)] == [hashlib.sha256(b"a").digest(), None, hashlib.sha256(b"c").digest(), None]


def test_a_merge_keeps_what_the_origin_said_and_fills_the_gaps():
    manifest = Manifest(3)
    manifest.learn(0, hashlib.sha256(b"new a").digest(), 5)
    manifest.merge(entries(b"old a", b"b", None, b"beyond the dataset"))
    assert [manifest.digest(i) for i in range(3)] == [hashlib.sha256(b"new a").digest(), hashlib.sha256(b"b").digest(), None]


def test_merging_what_it_already_holds_changes_nothing():
    manifest = Manifest(2)
    manifest.merge(entries(b"a", b"b"))
    manifest.merge(entries(b"a", b"b"))
    assert [manifest.digest(i) for i in range(2)] == [hashlib.sha256(b"a").digest(), hashlib.sha256(b"b").digest()]
