"""Memory and compute limits for shared GPUs."""
from __future__ import annotations

import os
import signal
import struct
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import published
from support import wait_until

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY = 2


def test_memory_limit_is_never_overshot_by_16_racing_threads_and_is_what_the_program_sees(run_client, shm_dir):
    client = run_client("gpa", "limit", "16", env={"ALNAIR_MEMORY_LIMIT": "100Mi"})
    report = {k: int(v[0]) for k, *v in (line.split() for line in client.lines)}
    assert report["reported_total"] == 100 * MIB
    assert report["reported_free"] == 100 * MIB
    assert report["device_total"] == 100 * MIB
    assert report["granted"] == 100 * MIB  # exactly up to the limit, never past it
    assert report["refused_result"] == CUDA_ERROR_OUT_OF_MEMORY
    # one refusal per thread, and the last probe: wait for the publish after it
    device = wait_until(lambda: (d := published(shm_dir, client.proc.pid).get(0)) and d.limit_denied_allocations >= 17 and d)
    assert device.bytes_in_use == device.peak_bytes == 100 * MIB
    assert device.memory_limit_bytes == 100 * MIB
    assert device.failed_allocations == 0  # refused before reaching the driver


def test_per_device_memory_limit_leaves_other_devices_unlimited(run_client, shm_dir):
    client = run_client("gpa", "limit", "1", env={"ALNAIR_MEMORY_LIMIT": "1=1Mi,0=3Mi"})
    assert ["3145728"] in client.values("granted")


def test_malformed_limits_are_reported_once_each_and_ignored(run_client, shm_dir):
    """Two bad variables, two lines, once per process however many threads start using CUDA;
    every refused syntax is in test_configuration.py."""
    env = {"ALNAIR_MEMORY_LIMIT": "lots", "ALNAIR_COMPUTE_LIMIT": "250"}
    client = run_client("gpa", "launches", "2", "10", "1", env=env)
    device = wait_until(lambda: (d := published(shm_dir, client.proc.pid).get(0)) and d.kernel_launches == 20 and d)
    assert device.memory_limit_bytes == 0 and device.compute_limit_percent == 0
    assert client.stop() == (
        'alnair: ignoring ALNAIR_MEMORY_LIMIT="lots": want bytes like 8Gi, 512M or 1073741824, '
        "or per device 0=8Gi,1=4Gi; running with no memory limit\n"
        'alnair: ignoring ALNAIR_COMPUTE_LIMIT="250": want a percent 1-100, or per device 0=30,1=70; '
        "running with no compute limit\n")
    assert client.proc.returncode == 0


def launch_rate(run_client, env: dict[str, str]) -> float:
    client = run_client("gpa", "rate", "1.0", "2.0", env={"FAKE_CUDA_LAUNCH_NS": "200000", **env})
    return float(client.values("rate")[0][0]), client


def test_compute_limit_throttles_launches_to_its_share(run_client, shm_dir):
    """Without NVML (no GPU here) the bucket refills at limit x the unthrottled rate."""
    free_rate, _ = launch_rate(run_client, {})
    limited_rate, client = launch_rate(run_client, {"ALNAIR_COMPUTE_LIMIT": "30"})
    assert 0.22 < limited_rate / free_rate < 0.38, (free_rate, limited_rate)
    # most of the 2 s were spent waiting for tokens
    device = wait_until(lambda: (d := published(shm_dir, client.proc.pid).get(0)) and d.throttled_ns > 1e9 and d)
    assert device.compute_limit_percent == 30


def launch_rates_together(run_client, limits: list[str | None], gpu_file) -> list[float]:
    """Launch rates of processes sharing one fake GPU (FAKE_CUDA_SHARED_GPU), started together."""
    def run(limit):
        env = {"FAKE_CUDA_LAUNCH_NS": "200000", "FAKE_CUDA_SHARED_GPU": str(gpu_file)}
        return run_client("gpa", "rate", "0.5", "2.0", env={**env, **({"ALNAIR_COMPUTE_LIMIT": limit} if limit else {})})
    with ThreadPoolExecutor(len(limits)) as pool:
        clients = list(pool.map(run, limits))
    rates = [float(c.values("rate")[0][0]) for c in clients]
    for client in clients:  # gone, they take no part in the next processes' turns
        client.stop()
    return rates


def launches_and_overlaps(gpu_file) -> tuple[int, int]:
    _running, _pad, launches, overlaps = struct.unpack("<iiQQ", gpu_file.read_bytes()[:24])
    return launches, overlaps


def overlap_fraction(run_client, limits: list[str | None], gpu_file) -> tuple[float, list[float]]:
    rates = launch_rates_together(run_client, limits, gpu_file)
    launches, overlaps = launches_and_overlaps(gpu_file)
    return overlaps / launches, rates


@pytest.mark.parametrize("limits, share_of_first", [(["30", "70"], 0.3), (["60", "60"], 0.5)])
def test_limited_processes_on_one_gpu_take_turns_in_proportion(run_client, tmp_path, limits, share_of_first):
    """A time-sliced GPU gives each limited process its share only if they take turns:
    their launches must not overlap, and oversubscribed limits shrink alike."""
    unlimited, _ = overlap_fraction(run_client, [None, None], tmp_path / "control")
    assert unlimited > 0.1  # the shared fake GPU does see two processes at once
    limited, (first, second) = overlap_fraction(run_client, limits, tmp_path / "gpu")
    assert abs(first / (first + second) - share_of_first) < 0.08, (first, second)  # CPU-starved runs drift
    # A launch begun just before its window closes may still run into the next one,
    # the more so on a loaded 2-core machine: overlaps are rare, not impossible.
    assert limited < 0.2 * unlimited, (limited, unlimited)


def quota_ms(shm_dir, pid: int) -> float:
    device = published(shm_dir, pid).get(0)
    return device.compute_quota_ns / 1e6 if device else -1


def test_a_killed_process_hands_its_share_back_and_windows_are_published(run_client, shm_dir):
    first = run_client("gpa", "launches", "1", "10", "1", env={"ALNAIR_COMPUTE_LIMIT": "60"})
    assert wait_until(lambda: quota_ms(shm_dir, first.proc.pid) == 60)
    second = run_client("gpa", "launches", "1", "10", "1", env={"ALNAIR_COMPUTE_LIMIT": "60"})
    # 60% + 60% of one GPU: both shrink to half a period
    assert wait_until(lambda: quota_ms(shm_dir, first.proc.pid) == quota_ms(shm_dir, second.proc.pid) == 50)
    assert published(shm_dir, first.proc.pid)[0].compute_period_ns == 100_000_000
    os.kill(second.proc.pid, signal.SIGKILL)  # no clean exit: its slot's lock is all that tells
    assert wait_until(lambda: quota_ms(shm_dir, first.proc.pid) == 60, timeout=5)


def batches(run_client, env: dict[str, str], batch: int, seconds: float, value: str) -> float:
    """cuda_client's batches scenario on the fake driver's asynchronous queue, after 0.5 s of warm-up: `value`."""
    client = run_client("gpa", "batches", "0.5", str(seconds), str(batch), env={"FAKE_CUDA_ASYNC": "1", **env})
    return float(client.values(value)[0][0])


def device_share(run_client, limit: str | None, batch: int) -> float:
    env = {"FAKE_CUDA_LAUNCH_NS": "1000000", **({"ALNAIR_COMPUTE_LIMIT": limit} if limit else {})}
    return batches(run_client, env, batch, 3.0, "device_share")


def test_work_queued_past_the_window_is_given_back(run_client):
    """Batches of 40 ms of queued work under a 30% limit: one batch per 30 ms window
    would give the process 40% of the device; the overrun its syncs reveal is given
    back from its next windows, so it gets its 30%."""
    assert device_share(run_client, None, 40) > 0.9  # the fake device's clock: alone, busy all the time
    share = device_share(run_client, "30", 40)
    assert 0.25 < share < 0.35, share


def batch_rate(run_client, env: dict[str, str]) -> float:
    return batches(run_client, {"FAKE_CUDA_LAUNCH_NS": "1", "ALNAIR_COMPUTE_LIMIT": "50", **env}, 10, 1.0, "batch_rate")


def test_one_slow_sync_does_not_throttle_a_launch_bound_loop_for_good(run_client):
    """A loop whose GPU keeps up with its launches (its syncs find the work done) under a 50% limit:
    one sync that waits 150 ms (other contexts ran first) teaches a GPU time per launch
    of milliseconds; the syncs that follow, finding their work done, must unteach it, or each window
    lets a dozen launches through (the H200 campaign saw a DQN beside a DCGAN slow 13x once)."""
    steady = batch_rate(run_client, {})
    stalled = batch_rate(run_client, {"FAKE_CUDA_STALL_AFTER": "1000", "FAKE_CUDA_STALL_NS": "150000000"})
    print(f"batches/s: steady {steady:.1f}, after the stall {stalled:.1f}, ratio {stalled / steady:.3f}")  # pytest -s
    # stuck, it keeps a few batches a second of some 400,000: a loaded machine's noise is far from either
    assert stalled > 0.1 * steady, (stalled, steady)
