"""CacheLoader and torch's DataLoader over a CachedDataset: order, transforms, workers, bad input."""

from __future__ import annotations

import threading
import time

import pytest

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from alnair.datacache.dataset import COUNTER_SECONDS
from conftest import sample_bytes
from support import free_port, wait_until, write_tls_files


def require_torch():
    try:
        import torch.utils.data
    except ImportError:
        pytest.fail("torch is not installed: pip install -e '.[test]' installs it")
    return torch.utils.data


def job_counts(client, job: str) -> dict[str, float]:
    return {k.decode(): float(v) for k, v in client.hgetall(keys.job(job)).items()}


def test_shuffled_epochs_repeat_for_the_same_seed_and_cover_every_sample(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(30)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="j")
    first, second = CacheLoader(dataset, 7, shuffle=True, seed=3), CacheLoader(dataset, 7, shuffle=True, seed=3)
    first, second = ([[s for b in loader for s in b] for _ in range(2)] for loader in (first, second))
    assert first == second
    assert first[0] != first[1] and sorted(first[0]) == sorted(samples)


def test_drop_last_and_collate_shape_the_batches(start_redis, make_origin):
    redis_server = start_redis()
    dataset = CachedDataset(redis_server.url, "train", make_origin(sample_bytes(10)), job="j")
    loader = CacheLoader(dataset, 4, drop_last=True, collate=lambda batch: [len(s) for s in batch])
    assert len(loader) == 2
    assert list(loader) == [[4096] * 4, [4096] * 4]


def test_transform_runs_on_every_read_of_the_raw_cached_bytes(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(5)
    calls = []

    def augment(data: bytes) -> bytes:
        calls.append(data)
        return data[::-1]

    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="j", transform=augment)
    for _ in range(2):
        assert [s for b in CacheLoader(dataset, 2) for s in b] == [s[::-1] for s in samples]
    assert sorted(calls) == sorted(samples * 2)  # batches run on several threads, in any order
    assert redis_server.client().get(keys.blob(dataset.manifest.digest(0))) == samples[0]


def test_a_consumer_that_stops_early_leaves_no_thread_behind(start_redis, make_origin):
    redis_server = start_redis()
    dataset = CachedDataset(redis_server.url, "train", make_origin(sample_bytes(40)), job="j")
    iterator = iter(CacheLoader(dataset, 2, workers=3))
    assert len(next(iterator)) == 2
    iterator.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("cache-loader")]


def epoch_of(loader: CacheLoader, samples: list[bytes], epoch: int) -> list[bytes]:
    return [samples[i] for batch in loader.batch_indices(epoch) for i in batch]


def test_from_the_second_epoch_the_next_epochs_first_batches_are_read_during_its_last_ones(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(20)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="ahead")
    loader = CacheLoader(dataset, 2, shuffle=True, seed=1)  # two batches ahead
    assert [s for b in loader for s in b] == epoch_of(loader, samples, 0)  # the first pass: no read ahead
    assert job_counts(redis_server.client(), "ahead").get("hits", 0) == 0
    assert [s for b in loader for s in b] == epoch_of(loader, samples, 1)  # 20 hits
    # Before anyone asks for epoch 2, its first two batches have been read: 4 more hits
    wait_until(lambda: job_counts(redis_server.client(), "ahead").get("hits") == 24)
    assert [s for b in loader for s in b] == epoch_of(loader, samples, 2)
    loader.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("cache-loader")]
    assert 20 + 20 <= job_counts(redis_server.client(), "ahead")["hits"] <= 20 + 20 + 4


def test_a_read_ahead_that_no_longer_fits_the_loader_is_dropped(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(20)
    loader = CacheLoader(CachedDataset(redis_server.url, "train", make_origin(samples), job="j"), 2, shuffle=True)
    for epoch in range(2):
        assert [s for b in loader for s in b] == epoch_of(loader, samples, epoch)
    loader.epoch = 7  # a resumed run sets its epoch: epoch 2's batches read ahead are not epoch 7's
    assert [s for b in loader for s in b] == epoch_of(loader, samples, 7)
    loader.seed = 99
    assert [s for b in loader for s in b] == epoch_of(loader, samples, 8)  # read ahead under seed 0: dropped
    iterator = iter(loader)  # a consumer that leaves during the batches read ahead leaves no thread behind
    assert next(iterator) == epoch_of(loader, samples, 9)[:2]
    iterator.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("cache-loader")]


def test_read_ahead_off_reads_nothing_between_epochs(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(20)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="off")
    loader = CacheLoader(dataset, 2, read_ahead=False)
    for _ in range(3):
        assert [s for b in loader for s in b] == samples
        assert not [t for t in threading.enumerate() if t.name.startswith("cache-loader")]
    assert job_counts(redis_server.client(), "off")["hits"] == 40


def test_a_loader_epoch_writes_its_counters_at_most_twice_a_second_and_all_of_them_when_it_ends(
    start_redis, make_origin
):
    redis_server = start_redis()
    samples = sample_bytes(40)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="loader")
    assert [s for b in CacheLoader(dataset, 2) for s in b] == samples  # the cold epoch writes blobs
    client = redis_server.client()
    client.config_resetstat()
    started = time.monotonic()
    assert [s for b in CacheLoader(dataset, 2, workers=1) for s in b] == samples
    elapsed = time.monotonic() - started
    calls = client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert 1 <= calls <= 2 + elapsed / COUNTER_SECONDS  # one at the start, one at the end, and per half second
    counts = job_counts(client, "loader")
    assert (counts["hits"], counts["misses"], counts["fetches"]) == (40, 40, 40)


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_torch_dataloader_workers_get_origin_bytes_and_report_their_counters(start_redis, make_origin, context):
    data = require_torch()
    redis_server = start_redis()
    samples = sample_bytes(24)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job=f"torch-{context}")
    workers = 2 if context == "fork" else 1  # a spawned worker imports torch anew: keep it to one
    loader = data.DataLoader(
        dataset, batch_size=5, num_workers=workers, collate_fn=list, multiprocessing_context=context
    )
    for _ in range(2):
        assert [s for batch in loader for s in batch] == samples
    counts = job_counts(redis_server.client(), f"torch-{context}")
    assert (counts["misses"], counts["hits"], counts["fetches"]) == (24, 24, 10)


def test_bad_input_is_one_clear_error(start_redis, make_origin):
    redis_server = start_redis()
    origin = make_origin(sample_bytes(3))
    dataset = CachedDataset(redis_server.url, "train", origin, job="j")
    with pytest.raises(IndexError, match="sample 3 out of range for 'train' \\(3 samples\\)"):
        dataset[3]
    with pytest.raises(IndexError, match="sample -1 out of range"):
        dataset.__getitems__([0, -1])
    with pytest.raises(ValueError, match="dataset name must match"):
        CachedDataset(redis_server.url, "bad name", origin)
    with pytest.raises(ValueError, match="job name must match"):
        CachedDataset(redis_server.url, "train", origin, job="two words")
    with pytest.raises(ValueError, match="batch_size, workers and prefetch must be >= 1"):
        CacheLoader(dataset, 0)
    with pytest.raises(ValueError, match="origin directory does not exist"):
        type(origin)(origin.root / "missing")


def test_one_worker_and_two_batches_ahead_by_default(start_redis, make_origin):
    loader = CacheLoader(CachedDataset(start_redis().url, "train", make_origin(sample_bytes(4)), job="j"), 2)
    assert (loader.workers, loader.prefetch) == (1, 2)


def test_a_tls_redis_is_read_through_redis_py_one_mget_at_a_time(start_redis, make_origin, tmp_path):
    write_tls_files(tmp_path)
    tls_port = free_port()
    redis_server = start_redis(
        "--tls-port",
        str(tls_port),
        "--tls-cert-file",
        str(tmp_path / "server.crt"),
        "--tls-key-file",
        str(tmp_path / "server.key"),
        "--tls-ca-cert-file",
        str(tmp_path / "ca.crt"),
        "--tls-auth-clients",
        "no",
    )
    samples = sample_bytes(20)
    url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={tmp_path / 'ca.crt'}"
    dataset = CachedDataset(url, "train", make_origin(samples), job="tls")
    for _ in range(2):
        assert [s for b in CacheLoader(dataset, 3) for s in b] == samples
    counts = job_counts(redis_server.client(), "tls")  # the plain port, beside the TLS one
    assert (counts["misses"], counts["hits"], counts.get("redis_errors", 0)) == (20, 20, 0)


class SlowOrigin(DirectoryOrigin):
    """50 ms per read, like a remote store; remembers the most reads it had at once."""

    parallel_reads = 4

    def __init__(self, root):
        super().__init__(root)
        self._lock = threading.Lock()
        self.reading = self.most = 0

    def read(self, index: int) -> bytes:
        with self._lock:
            self.reading += 1
            self.most = max(self.most, self.reading)
        time.sleep(0.05)
        with self._lock:
            self.reading -= 1
        return super().read(index)


def test_a_batch_reads_a_slow_origin_as_many_at_once_as_it_allows(start_redis, make_origin):
    samples = sample_bytes(8)
    origin = SlowOrigin(make_origin(samples).root)
    dataset = CachedDataset(start_redis().url, "train", origin, job="j")
    assert dataset.__getitems__(list(range(8))) == samples
    assert origin.most == 4  # four reads at once, as many as it allows: not eight in a row
