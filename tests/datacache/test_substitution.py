"""Substitutable reads: a sample that misses is served later in the same epoch and a cached one in its
place meanwhile, so every epoch holds every sample exactly once; on one server and on a Redis Cluster."""

from __future__ import annotations

import threading
import time
from collections import Counter

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from alnair.datacache.cluster import slot_of
from conftest import sample_bytes

BATCH = 8


class SlowOrigin(DirectoryOrigin):
    """An origin with a remote store's latency: each read takes `delay` seconds (the read waits on a
    timer, not on this machine's speed) and is counted."""

    parallel_reads = 8

    def __init__(self, root, delay: float):
        super().__init__(root)
        self.delay, self.reads = delay, 0

    def read(self, index: int) -> bytes:
        self.reads += 1
        time.sleep(self.delay)
        return super().read(index)


class GatedOrigin(DirectoryOrigin):
    """An origin whose reads wait until the test opens it: a pass that ends while it is shut waited for no read."""

    parallel_reads = 8

    def __init__(self, root):
        super().__init__(root)
        self.opened = threading.Event()

    def read(self, index: int) -> bytes:
        if not self.opened.wait(30):
            raise TimeoutError("the test never opened the origin")
        return super().read(index)


def half_warm(url: str, make_origin, count: int, delay: float, origin_class=None):
    """`count` samples, the even ones cached by a first job; a substitutable dataset over a slow origin (or one
    of `origin_class`, made with the samples' directory)."""
    samples = sample_bytes(count)
    root = make_origin(samples).root
    CachedDataset(url, "train", DirectoryOrigin(root), job="warm").__getitems__(list(range(0, count, 2)))
    origin = origin_class(root) if origin_class else SlowOrigin(root, delay)
    return samples, origin, CachedDataset(url, "train", origin, job="j", substitutable=True)


def epochs_exactly_once(url: str, make_origin, counts) -> None:
    samples, origin, dataset = half_warm(url, make_origin, 96, delay=0.02)
    loader = CacheLoader(dataset, BATCH, shuffle=True, seed=5)
    served = [[s for batch in loader for s in batch] for _ in range(3)]
    for epoch in served:
        assert Counter(epoch) == Counter(samples)  # every sample exactly once (the random samples are distinct)
    plans = [[samples[i] for batch in loader.batch_indices(e) for i in batch] for e in range(3)]
    assert served[0] != plans[0]  # misses were served later, cached samples earlier
    assert served[1:] == plans[1:]  # all cached after the first epoch: nothing to substitute, the plan's order
    assert origin.reads == 48
    loader.close()
    dataset.close()
    stored = counts()
    assert stored["substituted"] > 0 and stored["misses"] == 48
    assert 3 * 96 - 48 <= stored["hits"] <= 3 * 96 - 48 + 2 * BATCH  # and the 4th epoch's read ahead: 2 batches
    assert all(len(batch) == BATCH for batch in CacheLoader(dataset, BATCH))


def test_every_sample_exactly_once_per_epoch_with_a_slow_origin_and_a_half_warm_cache(start_redis, make_origin):
    server = start_redis()
    client = server.client()
    epochs_exactly_once(
        server.url, make_origin, lambda: {k.decode(): float(v) for k, v in client.hgetall(keys.job("j")).items()}
    )


def test_on_a_cluster_too(cluster, make_origin):
    meta = cluster.owner(slot_of(keys.metadata(keys.JOBS, True))).client()
    epochs_exactly_once(
        cluster.url,
        make_origin,
        lambda: {k.decode(): float(v) for k, v in meta.hgetall(keys.metadata(keys.job("j"), True)).items()},
    )


def test_substitution_keeps_a_half_warm_epoch_going_without_waiting_for_the_origin(start_redis, make_origin):
    server = start_redis()
    samples, gate, substituting = half_warm(server.url, make_origin, 96, delay=0, origin_class=GatedOrigin)
    waiting = CachedDataset(server.url, "train", SlowOrigin(gate.root, 0.05), job="w")
    cached = set(samples[0::2])

    def first_batches(dataset) -> tuple[list[bytes], float]:
        """The first third of an epoch in order (each batch half cached, half not), and how long it took."""
        started = time.monotonic()
        fetched = dataset.batches([list(range(i, i + BATCH)) for i in range(0, 96, BATCH)])
        served = [s for _, batch in zip(range(4), fetched) for s in batch]
        seconds = time.monotonic() - started
        fetched.close()
        return served, seconds

    served, _ = first_batches(substituting)  # with the origin shut: had a batch waited for a read, it would hang
    assert set(served) <= cached and len(served) == 4 * BATCH and not gate.opened.is_set()
    gate.opened.set()  # the misses' reads, started in the background, end now
    served, waiting_seconds = first_batches(waiting)
    assert served == samples[: 4 * BATCH]
    # every two batches (pipelined: asked together, their 8 misses read at once) waited for one origin read
    assert waiting_seconds >= 2 * 0.05
