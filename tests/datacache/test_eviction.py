"""Under maxmemory with an LRU policy the cache evicts, and every epoch is still the origin's bytes."""

from __future__ import annotations

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from conftest import sample_bytes


class CountingOrigin(DirectoryOrigin):
    reads = 0

    def read(self, index: int) -> bytes:
        self.reads += 1
        return super().read(index)


EPOCHS = 3


def run_epochs(url: str, root) -> tuple[list[list[bytes]], int]:
    """The samples of each epoch, and how many reads went to the origin."""
    origin = CountingOrigin(root)
    loader = CacheLoader(CachedDataset(url, "train", origin, job="j"), 8, workers=2, shuffle=True, seed=7)
    epochs = [[s for batch in loader for s in batch] for _ in range(EPOCHS)]
    loader.close()  # the next epoch's read ahead: its hits and misses count
    return epochs, origin.reads


def test_epochs_are_byte_identical_with_and_without_lru_eviction(start_redis, make_origin):
    samples = sample_bytes(100, size=32 * 1024)  # 3.2 MB of samples, about 1 MB of room
    origin = make_origin(samples)
    roomy = start_redis()
    tight = start_redis("--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")

    roomy_epochs, roomy_origin_reads = run_epochs(roomy.url, origin.root)
    tight_epochs, tight_origin_reads = run_epochs(tight.url, origin.root)

    assert tight_epochs == roomy_epochs
    order = CacheLoader(CachedDataset(roomy.url, "train", origin), 8, shuffle=True, seed=7)
    for epoch, samples_seen in enumerate(roomy_epochs):
        assert samples_seen == [samples[i] for batch in order.batch_indices(epoch) for i in batch]
    assert roomy_epochs[0] != roomy_epochs[1]  # shuffled per epoch

    assert tight.client().info("stats")["evicted_keys"] > 0
    assert roomy.client().info("stats")["evicted_keys"] == 0
    assert roomy_origin_reads == 100
    assert tight_origin_reads > 100  # evicted samples came back from the origin
    roomy_counts = {k.decode(): float(v) for k, v in roomy.client().hgetall(keys.job("j")).items()}
    assert roomy_counts["misses"] == 100
    assert 200 <= roomy_counts["hits"] <= 200 + 4 * 8  # and what the 4th epoch's read ahead got: 4 batches at most
