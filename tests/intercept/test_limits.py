"""Memory and compute limits for shared GPUs."""

from __future__ import annotations

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
    device = wait_until(
        lambda: (d := published(shm_dir, client.proc.pid).get(0)) and d.limit_denied_allocations >= 17 and d
    )
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
        "running with no compute limit\n"
    )
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


def batches(run_client, env: dict[str, str], batch: int, seconds: float, value: str) -> float:
    """cuda_client's batches scenario on the fake driver's asynchronous queue, after 0.5 s of warm-up: `value`."""
    client = run_client("gpa", "batches", "0.5", str(seconds), str(batch), env={"FAKE_CUDA_ASYNC": "1", **env})
    return float(client.values(value)[0][0])


def device_share(run_client, limit: str | None, batch: int) -> float:
    env = {"FAKE_CUDA_LAUNCH_NS": "1000000", **({"ALNAIR_COMPUTE_LIMIT": limit} if limit else {})}
    return batches(run_client, env, batch, 3.0, "device_share")


def test_work_queued_deep_counts_against_the_cap(run_client):
    """Batches of 40 ms of queued work under a 30% cap: whole batches run past what the cap allows at once, and
    the debt they leave makes the next launches wait for as long, so the process gets its 30%."""
    assert device_share(run_client, None, 40) > 0.9  # the fake device's clock: alone, busy all the time
    share = device_share(run_client, "30", 40)
    assert 0.25 < share < 0.35, share


def batch_rate(run_client, env: dict[str, str]) -> float:
    return batches(run_client, {"FAKE_CUDA_LAUNCH_NS": "1", "ALNAIR_COMPUTE_LIMIT": "50", **env}, 10, 1.0, "batch_rate")


def test_one_slow_sync_does_not_throttle_a_launch_bound_loop_for_good(run_client):
    """A loop whose GPU keeps up with its launches (its syncs find the work done) under a 50% cap: one sync
    that waits 150 ms (other contexts ran first) costs it that span's GPU time once, not its rate for good
    (the H200 campaign saw a DQN beside a DCGAN slow 13x once, under the turns this cap replaced)."""
    steady = batch_rate(run_client, {})
    stalled = batch_rate(run_client, {"FAKE_CUDA_STALL_AFTER": "1000", "FAKE_CUDA_STALL_NS": "150000000"})
    print(f"batches/s: steady {steady:.1f}, after the stall {stalled:.1f}, ratio {stalled / steady:.3f}")  # pytest -s
    # stuck, it keeps a few batches a second of some 400,000: a loaded machine's noise is far from either
    assert stalled > 0.1 * steady, (stalled, steady)
