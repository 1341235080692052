"""Wrong bytes in Redis, Redis killed, stalled or absent: the origin's bytes, quickly, and recovery."""

from __future__ import annotations

import hashlib
import threading
import time

import pytest
import redis

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, DirectoryOrigin
from alnair.datacache.singleflight import SingleFlight
from conftest import sample_bytes
from support import free_port, wait_until

BATCH = 4


def batches(count: int) -> list[list[int]]:
    return [list(range(i, min(i + BATCH, count))) for i in range(0, count, BATCH)]


def stored_counts(client, name: str = "train") -> dict[str, float]:
    return {k.decode(): float(v) for k, v in client.hgetall(keys.dataset(name)).items() if k != b"fingerprint"}


class TimedOrigin(DirectoryOrigin):
    """Remembers when the origin was first read since `arm()`."""

    def arm(self) -> None:
        self.armed_at, self.first_read = time.monotonic(), None

    def read(self, index: int) -> bytes:
        if getattr(self, "first_read", 0) is None:
            self.first_read = time.monotonic()
        return super().read(index)

    @property
    def first_read_after(self) -> float:
        """Seconds from `arm()` to the first read since."""
        return self.first_read - self.armed_at


def cached(start_redis, make_origin, count: int, **options):
    """A redis-server, `count` samples, a TimedOrigin over them and a dataset that has cached them all."""
    redis_server = start_redis()
    samples = sample_bytes(count)
    origin = TimedOrigin(make_origin(samples).root)
    dataset = CachedDataset(redis_server.url, "train", origin, job="j", **options)
    assert dataset.__getitems__(list(range(count))) == samples
    return redis_server, samples, origin, dataset


def test_corrupted_cached_value_is_never_returned_and_is_repaired(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(8)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="j")
    assert dataset.__getitems__(list(range(8))) == samples
    client = redis_server.client()
    damaged, truncated = keys.blob(hashlib.sha256(samples[2]).digest()), keys.blob(hashlib.sha256(samples[5]).digest())
    client.set(damaged, samples[2][:-1] + bytes([samples[2][-1] ^ 1]))
    client.set(truncated, samples[5][:100])

    assert dataset.__getitems__(list(range(8))) == samples
    assert client.get(damaged) == samples[2] and client.get(truncated) == samples[5]
    counts = stored_counts(client)
    assert (counts["corrupt"], counts["misses"], counts["hits"]) == (2, 10, 6)
    assert dataset.__getitems__(list(range(8))) == samples
    assert stored_counts(client)["hits"] == 14


def test_redis_killed_mid_epoch_then_restarted(start_redis, make_origin):
    redis_server, samples, origin, dataset = cached(start_redis, make_origin, 24, retry_seconds=0.3)
    plan = batches(24)

    served = [dataset.__getitems__(indices) for indices in plan[:2]]
    redis_server.kill()
    origin.arm()
    served.append(dataset.__getitems__(plan[2]))
    assert origin.first_read_after < 0.25
    served += [dataset.__getitems__(indices) for indices in plan[3:]]
    assert [s for batch in served for s in batch] == samples

    redis_server.start()  # same port, empty: no persistence
    client = redis_server.client()
    asked_since_kill = 16
    while client.get(keys.blob(hashlib.sha256(samples[0]).digest())) is None:
        assert dataset.__getitems__(plan[0]) == samples[:BATCH]
        asked_since_kill += BATCH
        assert asked_since_kill < 10_000, "never went back to Redis"
    counts = stored_counts(client)  # what was counted while Redis was away arrived with the first write
    assert counts["fallbacks"] >= 16 and counts["redis_errors"] >= 1
    assert counts.get("hits", 0) + counts["misses"] + counts["fallbacks"] == asked_since_kill


def test_stalled_redis_falls_back_within_250ms_and_recovers(start_redis, make_origin):
    redis_server, samples, origin, dataset = cached(start_redis, make_origin, 16, timeout=0.2, retry_seconds=0.3)
    redis_server.pause()
    try:
        origin.arm()
        assert dataset.__getitems__(list(range(8))) == samples[:8]
        assert origin.first_read_after < 0.25
        origin.arm()
        assert dataset.__getitems__(list(range(8, 16))) == samples[8:]
        assert origin.first_read_after < 0.05  # Redis is not asked again until retry_seconds pass
    finally:
        redis_server.resume()
    client = redis_server.client()
    assert stored_counts(client).get("hits", 0) == 0  # the first 16 were misses
    wait_until(
        lambda: dataset.__getitems__(list(range(16))) == samples and stored_counts(client).get("hits", 0) >= 16,
        timeout=10,
    )
    assert stored_counts(client)["fallbacks"] >= 16


def test_redis_killed_with_pipelined_batches_in_flight_serves_them_from_the_origin_in_order(start_redis, make_origin):
    redis_server, samples, origin, dataset = cached(start_redis, make_origin, 24, retry_seconds=30)
    dataset._runtime_here().counters.take()  # counting starts here

    redis_server.pause()  # what is asked from here on stays unanswered
    killer = threading.Timer(0.05, redis_server.kill)  # while the first reply is awaited, two more owed
    origin.arm()
    killer.start()
    served = [s for batch in dataset.batches(batches(24), depth=3) for s in batch]
    killer.join()
    assert served == samples
    assert 0.05 <= origin.first_read_after < 0.25
    pending = dataset._runtime_here().counters.take()  # Redis is gone: still pending
    # one failure counted, not one per batch lost with the connection; Redis not asked again for 30 s
    assert (pending["fallbacks"], pending["redis_errors"], pending["fetches"]) == (24, 1, 6)
    assert "hits" not in pending


def test_stalled_redis_with_pipelined_batches_falls_back_within_250ms(start_redis, make_origin):
    redis_server, samples, origin, dataset = cached(start_redis, make_origin, 16, timeout=0.2, retry_seconds=30)
    redis_server.pause()
    try:
        origin.arm()
        fetched = dataset.batches(batches(16))
        assert next(fetched) == samples[:BATCH]
        assert origin.first_read_after < 0.25
        assert [s for batch in fetched for s in batch] == samples[BATCH:]
        assert time.monotonic() - origin.armed_at < 0.4  # one timeout in all
    finally:
        redis_server.resume()


def test_redis_stalled_when_the_dataset_opens_is_used_once_it_answers(start_redis, make_origin):
    redis_server = start_redis()
    samples = sample_bytes(8)
    origin = make_origin(samples)
    CachedDataset(redis_server.url, "train", origin, job="first").__getitems__(list(range(8)))

    class NoOrigin(DirectoryOrigin):
        def read(self, index: int) -> bytes:
            raise AssertionError(f"origin read for sample {index}: Redis had it")

    redis_server.pause()
    try:
        dataset = CachedDataset(redis_server.url, "train", NoOrigin(origin.root), job="second", retry_seconds=0.3)
    finally:
        redis_server.resume()
    wait_until(dataset._runtime_here().health.available, timeout=10)  # retry_seconds after the failed open
    assert dataset.__getitems__(list(range(8))) == samples  # the manifest is read first, then the blobs
    assert float(redis_server.client().hget(keys.job("second"), "hits")) == 8


def test_a_full_redis_refusing_the_counters_still_serves_and_counts_the_refusal(start_redis, make_origin):
    redis_server = start_redis("--maxmemory-policy", "noeviction")
    samples = sample_bytes(8)
    dataset = CachedDataset(redis_server.url, "train", make_origin(samples), job="j")
    assert dataset.__getitems__(list(range(8))) == samples  # cached
    client = redis_server.client()
    client.config_set("maxmemory", client.info("memory")["used_memory"] // 2)  # over the limit: writes refused
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.hincrby(keys.dataset("train"), "hits", 0)
    assert dataset.__getitems__(list(range(8))) == samples  # MGET still answers; the counters' script is refused
    client.config_set("maxmemory", 0)
    assert dataset.__getitems__(list(range(4))) == samples[:4]
    counts = stored_counts(client)  # the refused batch's counts were dropped, its refusal counted
    assert (counts["hits"], counts["misses"], counts["redis_errors"]) == (4, 8, 1)


def test_redis_absent_from_the_start_serves_the_origin(make_origin):
    samples = sample_bytes(6)
    dataset = CachedDataset(f"redis://127.0.0.1:{free_port()}/0", "train", make_origin(samples), job="j")
    started = time.monotonic()
    assert dataset.__getitems__(list(range(6))) == samples
    assert dataset[5] == samples[5]
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_a_server_that_is_not_redis_serves_the_origin(make_origin, scheme):
    """Something else listens at the cache's address (an HTTP server, a proxy): its replies are not Redis's."""
    import socketserver

    class Http(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.recv(1 << 16)
            self.request.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Http)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        samples = sample_bytes(6)
        dataset = CachedDataset(
            f"{scheme}://127.0.0.1:{server.server_address[1]}", "train", make_origin(samples), job="j"
        )
        assert dataset.__getitems__(list(range(6))) == samples and dataset[5] == samples[5]
    finally:
        server.shutdown()
        server.server_close()


def test_one_origin_read_per_key_while_others_wait_for_it():
    flight = SingleFlight()
    release, reads, results = threading.Event(), [], []

    def slow_read():
        reads.append(1)
        release.wait(10)
        return b"bytes"

    def ask():
        results.append(flight.run(7, slow_read))

    leader = threading.Thread(target=ask)
    leader.start()
    wait_until(lambda: reads)
    followers = [threading.Thread(target=ask) for _ in range(3)]
    for follower in followers:
        follower.start()
    wait_until(lambda: len(flight._in_flight[7]._condition._waiters) == 3)  # blocked on a condition, not polling
    release.set()
    for thread in (leader, *followers):
        thread.join(10)
    assert (len(reads), results) == (1, [b"bytes"] * 4)
    assert flight.run(7, lambda: b"again") == b"again"  # nothing left in flight


def test_origin_errors_reach_every_waiter():
    flight = SingleFlight()

    def failing_read():
        raise FileNotFoundError("gone")

    try:
        flight.run("k", failing_read)
    except FileNotFoundError as e:
        assert str(e) == "gone"
    else:
        raise AssertionError("the origin's error was swallowed")
