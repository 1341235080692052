"""The cap (ALNAIR_COMPUTE_LIMIT) and the share (ALNAIR_COMPUTE_SHARE) on measured GPU time, through the library,
its monitor and the share table, against the fake driver (docs/intercept.md, Limits). The fake's processes each run
their own queue (its GPUs do not time-slice), so two busy processes are busy together all the time and each counts
half of it: a cap or a share holds when the GPU time it publishes does. Exact behaviour on a time-sliced GPU is
tested on a virtual clock (test_gpu_time.py)."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from conftest import published_record, writer_pids
from support import wait_until

LAUNCH_NS = 1_000_000  # 17 launches of 1 ms and a sync: 17 ms steps


@dataclass
class Times:
    at: float  # time.monotonic() of the reading
    gpu_time_ns: int
    busy_ns: int
    throttled_ns: int


def times(shm_dir: Path, pid: int) -> Times | None:
    record = published_record(shm_dir, pid)
    if not record or not record.devices or record.devices_ext is None:
        return None
    d = record.devices[0]
    return Times(time.monotonic(), d.gpu_time_ns, record.devices_ext[0].busy_ns, d.throttled_ns)


@dataclass
class Measured:
    gpu_share: float  # GPU time / wall time over the span
    of_busy: float  # GPU time / busy time over the span
    throttled: float  # of the span, how much launches waited


def between(a: Times, b: Times) -> Measured:
    wall = (b.at - a.at) * 1e9
    busy = b.busy_ns - a.busy_ns
    return Measured(
        (b.gpu_time_ns - a.gpu_time_ns) / wall,
        (b.gpu_time_ns - a.gpu_time_ns) / busy if busy else 0,
        (b.throttled_ns - a.throttled_ns) / wall,
    )


def stepping(run_client, env: dict[str, str], seconds: float):
    env = {"FAKE_CUDA_ASYNC": "1", "FAKE_CUDA_LAUNCH_NS": str(LAUNCH_NS), **env}
    return run_client("gpa", "batches", "0", str(seconds), "17", env=env)


def together(
    run_client,
    shm_dir: Path,
    envs: list[dict[str, str]],
    settle: float = 1.5,
    span: float = 1.5,
    after_settling=None,
    said: list[str] | None = None,
) -> list[Measured | None]:
    """Processes stepping at once (started in order, so their pids are known), measured over `span` seconds once
    `settle` seconds passed and `after_settling` (given the pids) returned; None for a process gone by then.
    What each process said on stderr goes into `said`, "" where it exited 0 without a word."""
    with ThreadPoolExecutor(len(envs)) as pool:
        futures, pids = [], []
        for env in envs:
            futures.append(pool.submit(stepping, run_client, env, settle + span + 3))
            pids.append(wait_until(lambda: (new := writer_pids(shm_dir) - set(pids)) and new.pop(), timeout=10))
        assert wait_until(lambda: all(times(shm_dir, pid) for pid in pids), timeout=10)
        time.sleep(settle)
        if after_settling:
            after_settling(pids)
        first = [times(shm_dir, pid) for pid in pids]
        time.sleep(span)
        second = [times(shm_dir, pid) for pid in pids]
        for future in futures:
            if future.exception() is None:  # a killed process's client raises instead
                client = future.result()
                stderr = client.stop()
                if said is not None:
                    said.append(stderr if client.proc.returncode == 0 else f"exit {client.proc.returncode}: {stderr}")
    return [between(a, b) if a and b else None for a, b in zip(first, second)]


def test_a_cap_holds_its_process_to_its_part_of_the_gpu_alone(run_client, shm_dir):
    [capped] = together(run_client, shm_dir, [{"ALNAIR_COMPUTE_LIMIT": "30"}])
    assert abs(capped.gpu_share - 0.30) < 0.04, capped
    assert capped.throttled > 0.5, capped  # the rest of the time its launches waited


def test_caps_hold_beside_each_other(run_client, shm_dir):
    small, large = together(run_client, shm_dir, [{"ALNAIR_COMPUTE_LIMIT": "30"}, {"ALNAIR_COMPUTE_LIMIT": "70"}])
    assert abs(small.gpu_share - 0.30) < 0.05 and abs(large.gpu_share - 0.70) < 0.05, (small, large)


def test_a_cap_beside_an_unlimited_process_leaves_it_the_rest(run_client, shm_dir):
    capped, free = together(run_client, shm_dir, [{"ALNAIR_COMPUTE_LIMIT": "30"}, {}])
    assert abs(capped.gpu_share - 0.30) < 0.05 and free.gpu_share > 0.65, (capped, free)
    assert free.throttled == 0


def test_a_share_alone_never_waits(run_client, shm_dir):
    [alone] = together(run_client, shm_dir, [{"ALNAIR_COMPUTE_SHARE": "30"}])
    assert alone.throttled == 0 and alone.gpu_share > 0.95, alone


def test_shares_hold_while_both_want_the_gpu(run_client, shm_dir):
    small, large = together(run_client, shm_dir, [{"ALNAIR_COMPUTE_SHARE": "30"}, {"ALNAIR_COMPUTE_SHARE": "70"}])
    assert abs(small.gpu_share - 0.30) < 0.05 and abs(large.gpu_share - 0.70) < 0.05, (small, large)


def test_processes_without_a_share_are_not_held_back_by_each_other(run_client, shm_dir):
    first, second = together(run_client, shm_dir, [{}, {}])
    assert first.throttled == second.throttled == 0
    assert abs(first.of_busy - 0.5) < 0.05 and abs(second.of_busy - 0.5) < 0.05, (first, second)


def test_a_killed_process_stops_counting_within_a_second_and_a_half(run_client, shm_dir):
    """Two busy processes split their time; once one is killed (no clean exit: its slot's lock is all that
    tells) the other's busy time is all its own again."""

    def kill_second(pids):
        os.kill(pids[1], signal.SIGKILL)
        time.sleep(1.5)  # the liveness check runs every second

    first, _ = together(run_client, shm_dir, [{}, {}], settle=1.0, span=1.0, after_settling=kill_second)
    assert first.of_busy > 0.95, first


def test_a_launch_that_waits_drains_its_stream_but_never_a_capturing_one(run_client, shm_dir):
    """A 30% cap on a program that never syncs: the launches that wait drain their stream first (the only syncs the
    driver sees); while the stream captures a graph, they wait without a sync, and the cap still holds them."""
    env = {"FAKE_CUDA_LAUNCH_NS": "200000", "ALNAIR_COMPUTE_LIMIT": "30"}
    draining = run_client("gpa", "rate", "0.5", "1.5", env=env)
    capturing = run_client("gpa", "rate", "0.5", "1.5", env={**env, "FAKE_CUDA_CAPTURING": "1"})
    free = run_client("gpa", "rate", "0.5", "1.5", env={"FAKE_CUDA_LAUNCH_NS": "200000"})
    assert int(draining.values("driver_syncs")[0][0]) > 0
    assert int(capturing.values("driver_syncs")[0][0]) == 0
    rate = {name: float(c.values("rate")[0][0]) for name, c in [("capturing", capturing), ("free", free)]}
    assert rate["capturing"] < 0.5 * rate["free"], rate
