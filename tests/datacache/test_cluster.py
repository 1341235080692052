"""The dataset cache on a real Redis Cluster (3 primaries, 3 replicas on loopback): blobs spread by slot,
metadata in one slot, dedupe, eviction, a primary killed or stalled mid-epoch, slots migrated mid-epoch."""

from __future__ import annotations

import hashlib
import time

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from alnair.datacache.cluster import slot_of
from conftest import sample_bytes
from support import wait_until
from test_loader import require_torch

BATCH = 8
META_SLOT = slot_of(keys.metadata(keys.DATASETS, True))


class TimedOrigin(DirectoryOrigin):
    """Counts reads and remembers when the origin was first read since `arm()`."""

    reads = 0
    first_read = 0.0

    def arm(self) -> None:
        self.armed_at, self.first_read = time.monotonic(), None

    def read(self, index: int) -> bytes:
        self.reads += 1
        if self.first_read is None:
            self.first_read = time.monotonic()
        return super().read(index)


def batches(count: int) -> list[list[int]]:
    return [list(range(i, min(i + BATCH, count))) for i in range(0, count, BATCH)]


def counts(cluster, name: str = "train") -> dict[str, float]:
    client = cluster.owner(META_SLOT).client()
    return {
        k.decode(): float(v)
        for k, v in client.hgetall(keys.metadata(keys.dataset(name), True)).items()
        if k != b"fingerprint"
    }


def blob_slot(sample: bytes) -> int:
    return slot_of(keys.blob(hashlib.sha256(sample).digest()))


def warm(cluster, make_origin, count: int, **options):
    samples = sample_bytes(count)
    origin = TimedOrigin(make_origin(samples).root)
    dataset = CachedDataset(cluster.url, "train", origin, job="j", **options)
    assert dataset.__getitems__(list(range(count))) == samples
    origin.reads = 0
    return samples, origin, dataset


def from_cache(dataset, origin: TimedOrigin, samples: list[bytes]) -> bool:
    """Whether one batch of every sample came from the cache alone, with the right bytes."""
    origin.reads = 0
    return dataset.__getitems__(list(range(len(samples)))) == samples and origin.reads == 0


def test_blobs_spread_over_every_primary_and_metadata_stays_in_one_slot(cluster, make_origin):
    samples, origin, dataset = warm(cluster, make_origin, 120)
    blob_counts = {s.port: len(s.client().keys(keys.PREFIX + "blob:*")) for s in cluster.primaries()}
    assert sum(blob_counts.values()) == 120 and min(blob_counts.values()) > 10  # spread by the cluster's own slots
    meta = cluster.owner(META_SLOT).client()
    assert set(meta.keys(keys.PREFIX + "{meta}:*")) == {
        k.encode()
        for k in (
            keys.metadata(name, True)
            for name in (
                keys.DATASETS,
                keys.JOBS,
                keys.CONTENT,
                keys.dataset("train"),
                keys.manifest("train"),
                keys.checks("train"),
                keys.job("j"),
                keys.job_space("j"),
                keys.NAMESPACES,
                keys.namespace("default"),
            )
        )
    }
    assert len(meta.get(keys.metadata(keys.manifest("train"), True))) == 120 * keys.ENTRY_SIZE

    again = CachedDataset(cluster.url, "train", origin, job="j")  # a new process: the manifest from the cluster
    assert [s for batch in again.batches(batches(120)) for s in batch] == samples
    assert origin.reads == 0
    again.close()
    assert (counts(cluster)["hits"], counts(cluster)["misses"]) == (120, 120)


def test_dedupe_across_two_datasets(cluster, make_origin):
    shared = sample_bytes(60, seed=1)
    first = CachedDataset(cluster.url, "a", make_origin(shared + sample_bytes(20, seed=2), "a"), job="j")
    second = CachedDataset(cluster.url, "b", make_origin(sample_bytes(40, seed=3) + shared, "b"), job="j")
    for dataset in (first, second):
        list(CacheLoader(dataset, BATCH))
        dataset.close()
    blobs = sum(len(s.client().keys(keys.PREFIX + "blob:*")) for s in cluster.primaries())
    assert blobs == 120  # 60 shared, 20 + 40 of their own
    meta = cluster.owner(META_SLOT).client()
    assert int(meta.hget(keys.metadata(keys.CONTENT, True), keys.CONTENT_TOTAL)) == 120 * 4096
    for name, samples in (("a", 80), ("b", 100)):
        assert int(meta.hget(keys.metadata(keys.dataset(name), True), keys.LOGICAL_BYTES)) == samples * 4096


def test_epochs_byte_identical_with_and_without_eviction(cluster, make_origin):
    samples = sample_bytes(300, size=16 * 1024)  # 4.8 MB over three shards; about 0.6 MB of room each
    origin = TimedOrigin(make_origin(samples).root)

    def epochs(name: str) -> list[list[bytes]]:
        loader = CacheLoader(CachedDataset(cluster.url, name, origin, job=name), BATCH, shuffle=True, seed=3)
        return [[s for batch in loader for s in batch] for _ in range(3)]

    roomy = epochs("roomy")
    assert origin.reads == 300
    for server in cluster.primaries():
        client = server.client()
        client.flushall()
        client.config_set("maxmemory-policy", "allkeys-lru")
        client.config_set("maxmemory", client.info("memory")["used_memory"] + 600_000)
    tight = epochs("tight")
    order = CacheLoader(CachedDataset(cluster.url, "order", origin), BATCH, shuffle=True, seed=3)
    assert tight == roomy == [[samples[i] for b in order.batch_indices(e) for i in b] for e in range(3)]
    assert sum(s.client().info("stats")["evicted_keys"] for s in cluster.primaries()) > 0
    assert origin.reads > 600  # evicted samples came back from the origin


def test_primary_killed_mid_epoch_falls_back_for_its_keys_and_follows_the_promoted_replica(cluster, make_origin):
    samples, origin, dataset = warm(cluster, make_origin, 240, retry_seconds=0.2)
    victim = next(s for s in cluster.primaries() if s is not cluster.owner(META_SLOT))
    victim_slots = {blob_slot(s) for s in samples if cluster.owner(blob_slot(s)) is victim}
    plan = batches(240)
    served, fetched = [], dataset.batches(plan)
    for number, batch in enumerate(fetched):
        served += batch
        if number == 2:
            victim.kill()
            origin.arm()
        if number == 5:  # the origin took over at once; now wait until a replica is promoted
            assert origin.first_read - origin.armed_at < 0.25
            wait_until(lambda: cluster.owner(min(victim_slots)) is not victim, timeout=30, interval=0.1)
    assert served == samples
    assert origin.reads > 0
    stored = counts(cluster)
    assert stored["fallbacks"] == origin.reads and stored["misses"] == 240  # the warm-up's
    assert stored["redis_errors"] >= 1
    assert stored["hits"] + stored["fallbacks"] == 240
    wait_until(lambda: from_cache(dataset, origin, samples), timeout=30)


def test_primary_stalled_mid_epoch_falls_back_within_250ms_and_is_asked_again(cluster, make_origin):
    samples, origin, dataset = warm(cluster, make_origin, 64, timeout=0.2, retry_seconds=0.2)
    victim = cluster.owner(blob_slot(samples[0]))
    victim.pause()  # resumed well before the cluster would fail it over (1 s)
    try:
        origin.arm()
        assert dataset.__getitems__(list(range(32))) == samples[:32]
        assert origin.first_read - origin.armed_at < 0.25
    finally:
        victim.resume()
    assert 0 < origin.reads < 32  # only the stalled node's keys
    wait_until(lambda: from_cache(dataset, origin, samples), timeout=10)


def migrate(cluster, slot: int, finish: bool) -> None:
    """Moves every key of `slot` to another primary (SETSLOT IMPORTING / MIGRATING, then MIGRATE): while the
    slot is migrating the source answers ASK for them; with `finish`, SETSLOT NODE on every primary ends it
    (the source then answers MOVED)."""
    source = cluster.owner(slot)
    target = next(s for s in cluster.primaries() if s is not source)
    ids = {n["port"]: n["id"] for n in cluster.nodes()}
    source_client, target_client = source.client(), target.client()
    target_client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
    source_client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
    for name in source_client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000):
        source_client.execute_command("MIGRATE", "127.0.0.1", target.port, name, 0, 5000)
    if finish:
        for client in (
            target_client,
            source_client,
            *(s.client() for s in cluster.primaries() if s not in (source, target)),
        ):
            client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])


def test_slots_migrated_mid_epoch_no_error_no_wrong_bytes(cluster, make_origin):
    samples, origin, dataset = warm(cluster, make_origin, 240)
    plan = batches(240)
    asked = sorted({blob_slot(samples[i]) for i in plan[10]} - {META_SLOT})  # read while migrating: ASK
    moved = sorted({blob_slot(samples[i]) for i in plan[20]} - {META_SLOT} - set(asked))  # read after: MOVED
    owners = {slot: cluster.owner(slot) for slot in asked + moved}
    served = []
    for number, batch in enumerate(dataset.batches(plan)):
        served += batch
        if number == 5:
            for slot in asked:
                migrate(cluster, slot, finish=False)
            for slot in moved:
                migrate(cluster, slot, finish=True)
        if number == 15:
            for slot in asked:
                migrate(cluster, slot, finish=True)
    # owner() asks the first live node, maybe a replica, which learns of SETSLOT NODE by gossip
    wait_until(lambda: all(cluster.owner(slot) is not owners[slot] for slot in owners), timeout=10)
    assert [s for batch in dataset.batches(plan) for s in batch] == samples  # the map now knows the new owners
    dataset.close()
    assert served == samples and origin.reads == 0
    stored = counts(cluster)
    assert (stored["hits"], stored.get("fallbacks", 0), stored.get("redis_errors", 0)) == (480, 0, 0)


def test_the_metadata_primary_killed_mid_epoch_costs_only_its_keys_and_its_counters_arrive_later(cluster, make_origin):
    samples, origin, dataset = warm(cluster, make_origin, 160, retry_seconds=0.2)
    victim = cluster.owner(META_SLOT)
    served = []
    for number, batch in enumerate(dataset.batches(batches(160))):
        served += batch
        if number == 2:
            victim.kill()
    assert served == samples
    assert 0 < origin.reads < 160 - 3 * BATCH  # the victim's keys after the kill, no others
    wait_until(lambda: cluster.owner(META_SLOT) is not victim, timeout=30, interval=0.1)
    wait_until(lambda: from_cache(dataset, origin, samples), timeout=30)
    dataset.close()
    stored = counts(cluster)  # kept in the process while the metadata's node was away
    assert stored["fallbacks"] >= 1 and stored["hits"] + stored["fallbacks"] + stored["misses"] >= 3 * 160


def test_a_cold_epoch_writes_into_migrating_slots_through_ask(cluster, make_origin):
    samples = sample_bytes(64, seed=9)
    origin = TimedOrigin(make_origin(samples).root)
    moving = sorted({blob_slot(s) for s in samples[:16]} - {META_SLOT})
    sources = {slot: cluster.owner(slot) for slot in moving}
    for slot in moving:
        migrate(cluster, slot, finish=False)  # empty yet: each SET there is answered ASK
    dataset = CachedDataset(cluster.url, "cold", origin, job="j")
    assert [s for batch in dataset.batches(batches(64)) for s in batch] == samples

    def keys_in(server, slot: int) -> int:
        return server.client().execute_command("CLUSTER", "COUNTKEYSINSLOT", slot)

    in_targets = sum(keys_in(s, slot) for slot in moving for s in cluster.primaries() if s is not sources[slot])
    expected = sum(blob_slot(s) in moving for s in samples)
    assert (sum(keys_in(sources[slot], slot) for slot in moving), in_targets) == (0, expected)  # where ASK said
    for slot in moving:
        migrate(cluster, slot, finish=True)
    origin.reads = 0
    assert [s for batch in dataset.batches(batches(64)) for s in batch] == samples
    dataset.close()
    assert origin.reads == 0
    assert counts(cluster, "cold").get("redis_errors", 0) == 0


def test_torch_dataloader_workers_read_the_cluster_on_their_own_connections(cluster, make_origin):
    data = require_torch()
    samples = sample_bytes(40)
    dataset = CachedDataset(cluster.url, "train", make_origin(samples), job="torch")
    loader = data.DataLoader(dataset, batch_size=BATCH, num_workers=2, collate_fn=list, multiprocessing_context="fork")
    for _ in range(2):
        assert [s for batch in loader for s in batch] == samples
    stored = counts(cluster)
    assert (stored["misses"], stored["hits"], stored["fetches"]) == (40, 40, 10)
