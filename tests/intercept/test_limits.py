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
    device = wait_until(lambda: (d := published(shm_dir, client.proc.pid).get(0)) and d.limit_denied_allocations >= 17 and d)
    assert device.bytes_in_use == device.peak_bytes == 100 * MIB
    assert device.memory_limit_bytes == 100 * MIB
    assert device.failed_allocations == 0  # refused before reaching the driver


def test_per_device_memory_limit_leaves_other_devices_unlimited(run_client, shm_dir):
    client = run_client("gpa", "limit", "1", env={"ALNAIR_MEMORY_LIMIT": "1=1Mi,0=3Mi"})
    assert ["3145728"] in client.values("granted")


def test_malformed_limits_are_reported_once_and_ignored(run_client, shm_dir):
    client = run_client("gpa", "launches", "2", "10", "1", env={"ALNAIR_MEMORY_LIMIT": "lots", "ALNAIR_COMPUTE_LIMIT": "250"})
    stderr = client.stop()
    assert stderr.count("ignoring ALNAIR_MEMORY_LIMIT=lots") == 1
    assert stderr.count("ignoring ALNAIR_COMPUTE_LIMIT=250") == 1
    assert client.proc.returncode == 0


def launch_rate(run_client, env: dict[str, str]) -> float:
    client = run_client("gpa", "rate", "1.0", "2.0", env={"FAKE_CUDA_LAUNCH_NS": "20000", **env})
    return float(client.values("rate")[0][0]), client


def test_compute_limit_throttles_launches_to_its_share(run_client, shm_dir):
    """Without NVML (no GPU here) the bucket refills at limit x the unthrottled rate."""
    free_rate, _ = launch_rate(run_client, {})
    limited_rate, client = launch_rate(run_client, {"ALNAIR_COMPUTE_LIMIT": "30"})
    assert 0.22 < limited_rate / free_rate < 0.38, (free_rate, limited_rate)
    # most of the 2 s were spent waiting for tokens
    device = wait_until(lambda: (d := published(shm_dir, client.proc.pid).get(0)) and d.throttled_ns > 1e9 and d)
    assert device.compute_limit_percent == 30
