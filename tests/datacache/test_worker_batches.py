"""DataLoader workers hand their batches of bytes to the loader's process through shared-memory slots:
the same bytes, plain lists, slots reused and never read twice, plain pickles whenever shared memory is not there."""

from __future__ import annotations

import os
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest

from alnair.datacache import CachedDataset, worker_batches
from conftest import sample_bytes
from test_loader import job_counts, require_torch


def ring_files() -> list[str]:
    return [name for name in os.listdir(worker_batches.RING_DIRECTORY) if name.startswith("alnair-batches-")]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_send_their_batches_through_shared_memory_byte_for_byte(start_redis, make_origin, context):
    data = require_torch()
    redis_server = start_redis()
    samples = sample_bytes(40, size=20_000)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job=f"shm-{context}")
    workers = 2 if context == "fork" else 1  # a spawned worker imports torch anew: keep it to one
    mapped_before = set(worker_batches._attached)
    loader = data.DataLoader(dataset, batch_size=8, num_workers=workers, multiprocessing_context=context)
    for _ in range(2):  # cold, then from the cache
        batches = list(loader)
        assert all(type(batch) is list and all(type(s) is bytes for s in batch) for batch in batches)
        assert [s for batch in batches for s in batch] == samples
    assert len(set(worker_batches._attached) - mapped_before) >= 1  # the rings were mapped here, batches went by them
    assert not ring_files()  # unlinked as soon as made: nothing left in /dev/shm
    counts = job_counts(redis_server.client(), f"shm-{context}")  # written when the workers exited
    assert (counts["misses"], counts["hits"], counts["fetches"]) == (40, 40, 10)


def test_without_shared_memory_the_workers_pickle_their_batches(start_redis, make_origin, monkeypatch, tmp_path):
    data = require_torch()
    monkeypatch.setattr(worker_batches, "RING_DIRECTORY", str(tmp_path / "absent"))  # the forked workers inherit it
    samples = sample_bytes(12)
    dataset = CachedDataset(start_redis().url, "train", make_origin(samples), job="j")
    mapped_before = set(worker_batches._attached)
    loader = data.DataLoader(dataset, batch_size=4, num_workers=2, multiprocessing_context="fork")
    assert [s for batch in loader for s in batch] == samples
    assert set(worker_batches._attached) == mapped_before


def test_a_transform_that_returns_no_bytes_leaves_the_batch_to_torch(start_redis, make_origin):
    data = require_torch()
    import torch

    samples = sample_bytes(6, size=64)
    dataset = CachedDataset(
        start_redis().url,
        "train",
        make_origin(samples),
        job="j",
        transform=lambda raw: torch.frombuffer(bytearray(raw), dtype=torch.uint8),
    )
    loader = data.DataLoader(dataset, batch_size=3, num_workers=1, multiprocessing_context="fork")
    batches = list(loader)
    assert [tuple(batch.shape) for batch in batches] == [(3, 64), (3, 64)]  # default_collate stacked them
    assert [bytes(row.numpy()) for batch in batches for row in batch] == samples


def test_a_slot_is_taken_until_its_batch_is_read_and_then_reused(monkeypatch):
    monkeypatch.setattr(worker_batches, "in_dataloader_worker", lambda: True)
    batches = [[os.urandom(1000), os.urandom(10), b""] for _ in range(worker_batches.SLOTS + 1)]
    pickled = [ForkingPickler.dumps(worker_batches.WorkerBatch(batch)) for batch in batches]
    full = pickle.loads(pickled[-1])  # every slot was taken: that one was pickled whole
    assert full == batches[-1] and len(pickled[-1]) > 1000
    assert all(len(p) < 1000 for p in pickled[:-1])  # the others say where their bytes are
    for batch, message in zip(batches, pickled[:-1]):
        assert pickle.loads(message) == batch
    again = ForkingPickler.dumps(worker_batches.WorkerBatch(batches[0]))  # slots free again
    assert len(again) < 1000 and pickle.loads(again) == batches[0]


def test_a_batch_read_from_an_overwritten_slot_raises_rather_than_returning_other_bytes(monkeypatch):
    monkeypatch.setattr(worker_batches, "in_dataloader_worker", lambda: True)
    message = ForkingPickler.dumps(worker_batches.WorkerBatch([b"first"]))
    assert pickle.loads(message) == [b"first"]
    ring = worker_batches._worker_ring(0)
    stale = ForkingPickler.dumps(worker_batches.WorkerBatch([b"second"]))
    assert pickle.loads(stale) == [b"second"]
    with pytest.raises(RuntimeError, match="overwritten before it was read"):
        pickle.loads(stale)  # its slot was freed by the first read (and may hold another batch by now)
    assert ring is worker_batches._worker_ring(0)


def test_outside_a_dataloader_worker_a_worker_batch_pickles_as_a_list():
    batch = worker_batches.WorkerBatch([b"a", b"b"])
    assert pickle.loads(ForkingPickler.dumps(batch)) == [b"a", b"b"]
    assert type(pickle.loads(ForkingPickler.dumps(batch))) is list
    assert pickle.loads(pickle.dumps(batch)) == [b"a", b"b"]


def test_batches_beyond_the_free_slots_or_larger_than_a_slot_are_pickled_whole(start_redis, make_origin):
    data = require_torch()
    samples = sample_bytes(6, size=1000) + sample_bytes(6, size=700_000, seed=1)  # later batches outgrow the slots
    dataset = CachedDataset(start_redis().url, "train", make_origin(samples), job="j")
    loader = data.DataLoader(dataset, batch_size=2, num_workers=1, prefetch_factor=8, multiprocessing_context="fork")
    for _ in range(2):
        assert [s for batch in loader for s in batch] == samples
