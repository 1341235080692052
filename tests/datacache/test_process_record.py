"""The loader's counters mirrored into the process's python-kind shared-memory record equal the ones it keeps
in Redis."""

from __future__ import annotations

import hashlib
import textwrap

from alnair.abi import cache_keys as keys
from alnair.datacache import process_record
from conftest import sample_bytes
from support import PythonProgram, python_records, read_line, wait_until

SAMPLES, SIZE = 12, 4096

LOADING = textwrap.dedent("""
    import sys, time
    from alnair.datacache import CachedDataset, DirectoryOrigin

    dataset = CachedDataset(sys.argv[1], "mirror", DirectoryOrigin(sys.argv[2]), job="mirror-job", retry_seconds=0.3)

    def epoch():
        for start in range(0, len(dataset), 4):
            dataset.__getitems__(list(range(start, min(start + 4, len(dataset)))))

    epoch()  # cold: misses
    print("ready", flush=True)
    sys.stdin.readline()  # Redis paused: one timeout, then the origin
    epoch()
    print("fell back", flush=True)
    sys.stdin.readline()  # Redis resumed
    time.sleep(dataset.retry_seconds)
    epoch()  # hits, and the corrupted value: a miss
    epoch()
    dataset.close()
    print("closed", flush=True)
    sys.stdin.read()
""")


def record_counts(record) -> dict[str, int]:
    counters = {c.name.decode(): c.value for c in record.counters[: record.counter_count]}
    return {field: counters.get(process_record.PREFIX + field, 0) for field in process_record.MIRRORED}


def fetch_phase(record):
    return next(p for p in record.phases[: record.phase_count] if p.name.decode() == process_record.FETCH_PHASE)


def test_shared_memory_record_holds_the_same_counts_as_redis(start_redis, make_origin, tmp_path):
    redis_server = start_redis()
    samples = sample_bytes(SAMPLES, SIZE)
    origin = make_origin(samples)
    client = redis_server.client()
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    program = PythonProgram(
        LOADING.replace("sys.argv[1]", repr(redis_server.url)).replace("sys.argv[2]", repr(str(origin.root))), shm_dir
    )
    try:
        client.set(keys.blob(hashlib.sha256(samples[5]).digest()), b"wrong bytes")
        redis_server.pause()
        program.proc.stdin.write("\n")
        program.proc.stdin.flush()
        assert read_line(program.proc.stdout, 30).strip() == "fell back"
        redis_server.resume()
        program.proc.stdin.write("\n")
        program.proc.stdin.flush()
        assert read_line(program.proc.stdout, 30).strip() == "closed"

        stored = {k.decode(): float(v) for k, v in client.hgetall(keys.job("mirror-job")).items()}
        expected = {field: int(stored.get(field, 0)) for field in process_record.MIRRORED}
        assert expected | {keys.REDIS_ERRORS: 0} == {
            "hits": 23,
            "misses": 13,
            "fallbacks": 12,
            "corrupt": 1,
            "redis_errors": 0,
            "cache_bytes": 23 * SIZE,
            "origin_bytes": 25 * SIZE,
            "substituted": 0,
        }
        assert expected[keys.REDIS_ERRORS] >= 1
        record = wait_until(
            lambda: (r := python_records(shm_dir).get(program.pid)) and record_counts(r) == expected and r
        )
        phase = fetch_phase(record)
        assert phase.count == stored[keys.FETCHES] == 4 * 3
        # The phase wraps the loader's own timing of each fetch: a little longer, never shorter.
        assert stored[keys.FETCH_SECONDS] <= phase.total_ns / 1e9 < stored[keys.FETCH_SECONDS] + 0.002 * phase.count
    finally:
        redis_server.resume()
        warnings = program.finish().splitlines()
        assert [line.split(":")[0] for line in warnings] == ["dataset cache mirror"], warnings  # the outage, once
