"""The intercept's environment: every accepted syntax applies exactly, every other value costs
exactly one stderr line naming the variable and the value, and the variable counts as unset."""

from __future__ import annotations

import os
import time

import pytest

from conftest import published
from limit_cases import BAD_COMPUTE, BAD_MEMORY, TWICE
from support import wait_until

MIB = 1 << 20
GIB = 1 << 30
CUDA_ERROR_OUT_OF_MEMORY = 2
DEVICE_BYTES = 8 * MIB  # the fake GPU's size in the tests of refused limits: each would-be limit is below it


def ignored(variable: str, shown: str, why: str, instead: str) -> str:
    return f'alnair: ignoring {variable}="{shown}": {why}; {instead}\n'


def limit_report(client) -> dict[str, int]:
    return {k: int(v[0]) for k, *v in (line.split() for line in client.lines)}


def device_zero(shm_dir, pid: int, ready=lambda d: True):
    return wait_until(lambda: (d := published(shm_dir, pid).get(0)) and ready(d) and d)


# ---- ALNAIR_MEMORY_LIMIT ---------------------------------------------------------------------


@pytest.mark.parametrize("value, shown, why", BAD_MEMORY, ids=[repr(v[:30]) for v, _, _ in BAD_MEMORY])
def test_a_refused_memory_limit_costs_one_line_and_the_program_runs_unlimited(run_client, shm_dir, value, shown, why):
    env = {"ALNAIR_MEMORY_LIMIT": value, "FAKE_CUDA_DEVICE_BYTES": str(DEVICE_BYTES)}
    client = run_client("gpa", "limit", "1", env=env)
    report = limit_report(client)
    # the whole fake GPU, past any would-be limit, until the driver itself says no
    assert report["granted"] == report["reported_total"] == report["device_total"] == DEVICE_BYTES
    assert report["refused_result"] == CUDA_ERROR_OUT_OF_MEMORY
    device = device_zero(shm_dir, client.proc.pid, lambda d: d.failed_allocations >= 2)
    assert device.memory_limit_bytes == 0 and device.limit_denied_allocations == 0
    assert client.stop() == ignored("ALNAIR_MEMORY_LIMIT", shown, why, "running with no memory limit")


ENFORCED_MEMORY = [
    ("1048576", MIB),
    ("3Mi", 3 * MIB),
    ("3MiB", 3 * MIB),
    ("3mi", 3 * MIB),
    ("3Mib", 3 * MIB),
    ("5M", 5_000_000),
    ("5MB", 5_000_000),
    ("5m", 5_000_000),
    ("2048K", 2_048_000),
    ("2048Ki", 2 * MIB),
    ("2048k", 2_048_000),
    ("1.5Mi", 1_572_864),
    ("1.50Mi", 1_572_864),
    ("1.0Mi", MIB),
    ("007Mi", 7 * MIB),
    ("0.25Gi", GIB // 4),
    ("0.001G", 1_000_000),
    ("1.5Gi", 1_610_612_736),
    ("1Gi", GIB),
    ("1.000001M", 1_000_001),
    ("0=3Mi", 3 * MIB),
    ("1=1Mi,0=3Mi", 3 * MIB),
]


@pytest.mark.parametrize("value, limit", ENFORCED_MEMORY)
def test_every_accepted_memory_syntax_is_enforced_to_the_byte(run_client, shm_dir, value, limit):
    client = run_client("gpa", "limit", "1", env={"ALNAIR_MEMORY_LIMIT": value})  # a 16 GiB fake GPU
    report = limit_report(client)
    assert report["reported_total"] == report["device_total"] == limit
    assert report["granted"] == limit // MIB * MIB  # 1 MiB at a time, up to the limit and no further
    assert report["refused_result"] == CUDA_ERROR_OUT_OF_MEMORY
    device = device_zero(shm_dir, client.proc.pid, lambda d: d.limit_denied_allocations >= 2)
    assert device.memory_limit_bytes == limit and device.failed_allocations == 0
    assert client.stop() == ""


def published_on_64_devices(run_client, shm_dir, env: dict[str, str]) -> tuple[dict[int, object], str]:
    """Launches once on each of 64 fake devices, so every device's limits are published."""
    client = run_client("gpa", "launches", "64", "1", "64", env={"FAKE_CUDA_DEVICES": "64", **env})
    devices = wait_until(lambda: len(d := published(shm_dir, client.proc.pid)) == 64 and d)
    return devices, client.stop()


@pytest.mark.parametrize(
    "value, limits",
    [
        ("8Gi", {i: 8 * GIB for i in range(64)}),
        ("1=1Mi,0=3Mi", {0: 3 * MIB, 1: MIB}),
        ("0=8Gi,1=4Gi", {0: 8 * GIB, 1: 4 * GIB}),
        ("5=1.5Gi,2=512M,63=1", {5: 1_610_612_736, 2: 512_000_000, 63: 1}),
        ("00=1Mi", {0: MIB}),
        ("2Ti", {i: 2 << 40 for i in range(64)}),
        ("1.5Ti", {i: 3 << 39 for i in range(64)}),
        ("1T", {i: 10**12 for i in range(64)}),
        ("1P", {i: 10**15 for i in range(64)}),
        ("0=1Pi,1=1125899906842624,2=0.5Pi", {0: 1 << 50, 1: 1 << 50, 2: 1 << 49}),  # the bound itself is accepted
    ],
)
def test_per_device_and_large_memory_limits_land_on_exactly_their_devices(run_client, shm_dir, value, limits):
    devices, stderr = published_on_64_devices(run_client, shm_dir, {"ALNAIR_MEMORY_LIMIT": value})
    assert {i: d.memory_limit_bytes for i, d in devices.items()} == {i: limits.get(i, 0) for i in range(64)}
    assert stderr == ""


def test_the_environment_is_read_once_per_process_not_again_in_a_forked_child(run_client, shm_dir):
    """Parent and child both use CUDA: one line in all, and the child keeps the parent's limits."""
    client = run_client("gpa", "fork", env={"ALNAIR_MEMORY_LIMIT": "0=1Gi,0=2Gi", "ALNAIR_COMPUTE_LIMIT": "40"})
    client.read_until_ready()  # the child's ready line
    child = int(client.values("child")[0][0])
    assert wait_until(lambda: (d := published(shm_dir, child).get(0)) and d.compute_limit_percent == 40)
    assert published(shm_dir, child)[0].memory_limit_bytes == 0
    assert client.stop() == ignored("ALNAIR_MEMORY_LIMIT", "0=1Gi,0=2Gi", TWICE, "running with no memory limit")


def test_an_empty_memory_limit_is_unset_and_silent(run_client, shm_dir):
    env = {"ALNAIR_MEMORY_LIMIT": "", "FAKE_CUDA_DEVICE_BYTES": str(DEVICE_BYTES)}
    client = run_client("gpa", "limit", "1", env=env)
    assert limit_report(client)["granted"] == DEVICE_BYTES
    assert client.stop() == ""


# ---- ALNAIR_COMPUTE_LIMIT and ALNAIR_COMPUTE_SHARE: one grammar -------------------------------


COMPUTE_VARIABLES = [
    ("ALNAIR_COMPUTE_LIMIT", "compute_limit_percent", "running with no compute limit"),
    ("ALNAIR_COMPUTE_SHARE", "compute_share_percent", "running with no compute share"),
]


@pytest.mark.parametrize("variable, field, instead", COMPUTE_VARIABLES, ids=["limit", "share"])
@pytest.mark.parametrize("value, why", BAD_COMPUTE)
def test_a_refused_compute_limit_costs_one_line_and_the_program_runs_unlimited(
    run_client, shm_dir, value, why, variable, field, instead
):
    client = run_client("gpa", "launches", "1", "10", "1", env={variable: value})
    device = device_zero(shm_dir, client.proc.pid, lambda d: d.kernel_launches == 10)
    assert getattr(device, field) == 0 and device.throttled_ns == 0
    assert client.stop() == ignored(variable, value, why, instead)


@pytest.mark.parametrize(
    "value, limits",
    [
        ("30", {i: 30 for i in range(64)}),
        ("1", {i: 1 for i in range(64)}),
        ("100", {i: 100 for i in range(64)}),
        ("007", {i: 7 for i in range(64)}),
        ("0=30,1=70", {0: 30, 1: 70}),
        ("63=1,5=100", {63: 1, 5: 100}),
    ],
)
@pytest.mark.parametrize("variable, field, instead", COMPUTE_VARIABLES, ids=["limit", "share"])
def test_every_accepted_compute_syntax_limits_exactly_its_devices(
    run_client, shm_dir, value, limits, variable, field, instead
):
    devices, stderr = published_on_64_devices(run_client, shm_dir, {variable: value})
    assert {i: getattr(d, field) for i, d in devices.items()} == {i: limits.get(i, 0) for i in range(64)}
    assert stderr == ""


# ---- ALNAIR_PUBLISH_INTERVAL_MS --------------------------------------------------------------


def publishes_in(shm_dir, pid: int, seconds: float) -> int:
    """How many times the monitor published in a window of `seconds` (the seqlock moves by 2 each time)."""
    from alnair.abi import layout
    from alnair.abi.segments import SegmentDirectory

    def seq():
        for parsed in SegmentDirectory(str(shm_dir), layout.KIND_CUDA, reclaim=False).read():
            if parsed.segment.holder_pid == pid:
                return parsed.segment.header.seq
        return None

    before = wait_until(seq)
    time.sleep(seconds)
    return (seq() - before) // 2


@pytest.mark.parametrize(
    "value",
    [
        "10abc",
        "5000abc",
        "5000ms",
        "0",
        "60001",
        "-1",
        "+5000",
        " 5000",
        "5000 ",
        "1e3",
        "5000.0",
        "0x10",
        "99999999999999999999",
        "inf",
    ],
)
def test_a_refused_publish_interval_costs_one_line_and_the_default_10_ms_applies(run_client, shm_dir, value):
    client = run_client("gpa", "launches", "1", "1", "1", env={"ALNAIR_PUBLISH_INTERVAL_MS": value})
    assert publishes_in(shm_dir, client.proc.pid, 0.5) >= 10  # ~50 at 10 ms; a loaded machine loses some
    assert client.stop() == ignored(
        "ALNAIR_PUBLISH_INTERVAL_MS", value, "want milliseconds 1-60000", "publishing every 10 ms"
    )


@pytest.mark.parametrize("value, fast", [("1", True), ("010", True), ("", True), ("5000", False), ("60000", False)])
def test_every_accepted_publish_interval_applies(run_client, shm_dir, value, fast):
    client = run_client("gpa", "launches", "1", "1", "1", env={"ALNAIR_PUBLISH_INTERVAL_MS": value})
    count = publishes_in(shm_dir, client.proc.pid, 0.5)
    assert count >= 10 if fast else count <= 1, count
    assert client.stop() == ""


# ---- ALNAIR_INTERCEPT ------------------------------------------------------------------------


def granted_under_a_1_mib_limit(run_client, switch: str):
    env = {"ALNAIR_INTERCEPT": switch, "ALNAIR_MEMORY_LIMIT": "1Mi", "FAKE_CUDA_DEVICE_BYTES": str(DEVICE_BYTES)}
    client = run_client("gpa", "limit", "1", env=env)
    return limit_report(client)["granted"], client.stop()


@pytest.mark.parametrize("switch", ["off", "OFF", "Off", "0", "false", "FALSE", "no", "No"])
def test_the_kill_switch_passes_everything_through(run_client, shm_dir, switch):
    granted, stderr = granted_under_a_1_mib_limit(run_client, switch)
    assert granted == DEVICE_BYTES and stderr == ""  # the limit is not even read
    assert os.listdir(shm_dir) == []


@pytest.mark.parametrize("switch", ["on", "ON", "1", "true", "True", "yes", "YES", ""])
def test_an_accepted_on_value_intercepts_silently(run_client, switch):
    assert granted_under_a_1_mib_limit(run_client, switch) == (MIB, "")


@pytest.mark.parametrize(
    "switch, shown",
    [
        ("offx", "offx"),
        (" off", " off"),
        ("off ", "off "),
        ("disable", "disable"),
        ("2", "2"),
        ("off\n", "off\\x0a"),
        ("nope", "nope"),
    ],
)
def test_an_unknown_switch_costs_one_line_and_intercepts_as_if_unset(run_client, switch, shown):
    why = "want off, 0, false or no (or on, 1, true, yes)"
    line = ignored("ALNAIR_INTERCEPT", shown, why, "intercepting")
    assert granted_under_a_1_mib_limit(run_client, switch) == (MIB, line)  # the 1 MiB limit applies
