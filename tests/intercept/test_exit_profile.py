"""alnair-run --profile on jobs of the C client under the fake driver: one JSON file and a summary when the job ends,
values equal to what the programs did, also for a SIGTERMed job; an unwritable path is one line and the job runs."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from alnair.collectors.cuda import CudaCollector
from alnair.exporter.plugin import render
from conftest import published, writer_pids
from support import LineReader, parse_samples, wait_until

LAUNCH_NS = 2_000_000  # each launch of the first process keeps the fake GPU busy this long
COPY_NS = 20_000_000  # each copy call of the third process takes this long
BATCH_SECONDS = 0.5
# Six processes, one after another ($0 is the client), each alive 0.1 s or more after it first publishes (the watcher
# must see a process alive to know it is the job's): launches in synchronized batches (GPU time); an allocation and
# two launches (activity times, peak memory); every copy entry point (copies by direction); two that launch named
# kernels (k launched 1000 - 10 k times on device k % devices; the second names 32 of its kernels, not 20); launches
# that only the exit's final publish carries (a 60 s publish period; one device, whose UUID the publish at the
# monitor's start learnt). The job's own exit code is 3. The kernel processes get their line 0.2 s after they print
# "waiting", so publishes after their last launch name every kernel (the exit's own publish never asks the driver for
# names): a line sent 0.2 s after their start was there already when a slow start had used that time up.
JOB = f"""
released() {{ f=$(mktemp -u) && mkfifo "$f" && "$@" <"$f" | {{ exec 3>"$f"; rm "$f"; while IFS= read -r l; do
  echo "$l"; [ "$l" != waiting ] || {{ sleep 0.2; echo >&3; exec 3>&-; }}; done; }}; }}
FAKE_CUDA_ASYNC=1 FAKE_CUDA_LAUNCH_NS={LAUNCH_NS} "$0" gpa batches 0 {BATCH_SECONDS} 10 </dev/null
printf '\\n\\n' | "$0" gpa activity
FAKE_CUDA_COPY_NS={COPY_NS} "$0" gpa copies </dev/null
released "$0" gpa kernels 30 2 wait
released env ALNAIR_KERNEL_NAMES_TOP=32 "$0" gpa kernels 32 1 wait
sleep 0.2 | ALNAIR_PUBLISH_INTERVAL_MS=60000 "$0" gpa launches 1 300 1
exit 3
"""


def alnair_run() -> str:
    return shutil.which("alnair-run") or pytest.fail("alnair-run is not installed: pip install -e '.[test]'")


def job_environment(fake_driver_dir: Path, shm_dir: Path) -> dict[str, str]:
    return {**os.environ, "LD_LIBRARY_PATH": str(fake_driver_dir), "ALNAIR_SHM_DIR": str(shm_dir)}


@dataclass
class Ran:
    profile: dict
    path: Path
    summary: list[str]  # alnair-run's stderr
    lines: list[str]  # what the programs printed
    elapsed: float  # seconds, as the test measured around alnair-run
    shm_dir: Path


@pytest.fixture(scope="module")
def job(intercept_library, fake_driver_dir, client_programs, tmp_path_factory) -> Ran:
    """The four-process job, run once under alnair-run --profile."""
    shm_dir, path = tmp_path_factory.mktemp("shm"), tmp_path_factory.mktemp("out") / "profile.json"
    started = time.monotonic()
    command = [alnair_run(), "--profile", str(path), "sh", "-c", JOB, str(client_programs["gpa"])]
    result = subprocess.run(
        command, check=False, capture_output=True, text=True, env=job_environment(fake_driver_dir, shm_dir), timeout=60
    )
    elapsed = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    return Ran(
        json.loads(path.read_text()), path, result.stderr.splitlines(), result.stdout.splitlines(), elapsed, shm_dir
    )


def printed(lines: list[str], key: str) -> list[list[str]]:
    return [line.split()[1:] for line in lines if line.split()[:1] == [key]]


def by_index(process: dict) -> dict[int, dict]:
    return {d["index"]: d for d in process["cuda"]["devices"]}


def test_one_file_holds_every_process_of_the_job_and_its_exit(job):
    profile = job.profile
    assert profile["profile_version"] == 1 and profile["exit"] == {"code": 3}
    assert profile["command"][:2] == ["sh", "-c"]
    processes = profile["processes"]
    assert [p["comm"] for p in processes] == ["cuda_client"] * 6
    assert not any(p["running"] for p in processes)
    assert [p["started_ns"] for p in processes] == sorted(p["started_ns"] for p in processes)
    # Every writer removed its segment at its exit (no exporter's marker): the profile read them through descriptors.
    assert not writer_pids(job.shm_dir)
    assert BATCH_SECONDS + 0.1 < profile["wall_ns"] / 1e9 < job.elapsed


def test_launches_and_gpu_time_are_what_the_programs_did(job):
    batches, activity, _, _, _, launches = job.profile["processes"]
    device = by_index(batches)[0]
    assert device["kernel_launches"] % 10 == 0 and device["kernel_launches"] * LAUNCH_NS >= 0.9 * BATCH_SECONDS * 1e9
    busy = device["kernel_launches"] * LAUNCH_NS  # the fake GPU's time on them
    assert abs(device["gpu_time_ns"] - busy) <= 0.03 * busy
    assert device["busy_ns"] == device["gpu_time_ns"]  # alone on the GPU: its busy time is all its own
    assert by_index(activity)[0]["kernel_launches"] == 2
    # published by the exit alone: the last counts a process makes are in the profile
    assert {i: d["kernel_launches"] for i, d in by_index(launches).items()} == {
        int(d): int(n) for d, n in printed(job.lines, "launches")
    }


def test_each_device_totals_its_processes_by_uuid(job):
    expected: dict[str, Counter] = {}
    for process in job.profile["processes"]:
        for device in process["cuda"]["devices"]:
            expected.setdefault(device["uuid"], Counter()).update(
                {k: device[k] for k in ("kernel_launches", "peak_bytes", "allocations", "gpu_time_ns")}
            )
    assert {
        d["uuid"]: {k: d[k] for k in ("kernel_launches", "peak_bytes", "allocations", "gpu_time_ns")}
        for d in job.profile["devices"]
    } == {uuid: dict(c) for uuid, c in expected.items()}
    assert len(job.profile["devices"]) == 4 and all(d["uuid"].startswith("GPU-") for d in job.profile["devices"])


def test_copies_by_direction_are_exact_with_their_synchronous_time(job):
    copies = by_index(job.profile["processes"][2])
    names = {"h2d": "host_to_device", "d2h": "device_to_host", "d2d": "device_to_device"}
    count, size, synchronous = Counter(), Counter(), Counter()
    for _, device, direction, n, sync in printed(job.lines, "copy"):
        if direction != "none":
            key = (int(device), names[direction])
            count[key] += 1
            size[key] += int(n)
            synchronous[key] += int(sync)
    by_direction = {(i, name): c for i, d in copies.items() for name, c in d["copies"].items() if c["copies"]}
    assert {key: c["copies"] for key, c in by_direction.items()} == count
    assert {key: c["bytes"] for key, c in by_direction.items()} == size
    for (i, name), n in synchronous.items():  # each synchronous call took COPY_NS; asynchronous ones are not timed
        assert n * COPY_NS <= copies[i]["copies"][name]["sync_ns"] <= 1.5 * n * COPY_NS + 50e6, (i, name)
    wall = job.profile["wall_ns"] / 1e9
    for total in job.profile["devices"]:
        for c in total["copies"].values():
            assert c["bytes_per_second"] == pytest.approx(c["bytes"] / wall, rel=1e-5)


def test_first_allocation_and_launch_count_from_the_jobs_start(job):
    profile = job.profile
    batches, activity, *_ = profile["processes"]
    [[before]], [[after]] = printed(job.lines, "before_allocation"), printed(job.lines, "after_allocation")
    assert int(before) <= activity["cuda"]["first_allocation_ns"] <= int(after)
    assert activity["started_ns"] >= BATCH_SECONDS * 1e9 - 10e6  # it started after the batches (ticks of 10 ms)
    assert profile["first_allocation_ns"] == activity["started_ns"] + activity["cuda"]["first_allocation_ns"]
    assert batches["started_ns"] < 0.1e9  # the shell's first child
    assert profile["first_launch_ns"] == batches["started_ns"] + batches["cuda"]["first_launch_ns"] < 0.5e9


def test_peak_memory_is_each_processes_own(job):
    assert by_index(job.profile["processes"][1])[0]["peak_bytes"] == 1 << 20  # one MiB allocated, never freed
    assert by_index(job.profile["processes"][2])[0]["peak_bytes"] == 8 << 20


def launched(k: int) -> int:
    return 1000 - 10 * k  # the client's kernels scenario


def kernel_name(k: int) -> str:
    """As the fake driver names kernel k: odd ones C++-mangled (not demangled: the client has no C++ runtime)."""
    return f"fake_kernel_{k}" if k % 2 == 0 else f"_Z{len(f'fake_kernel_{k}')}fake_kernel_{k}Pf"


def test_each_process_keeps_its_own_kernel_table(job):
    first = job.profile["processes"][3]  # kernels 0-29 on devices 0 and 1, the 20 most launched named
    named = [{"index": k % 2, "name": kernel_name(k), "launches": launched(k)} for k in range(20)]
    other = [
        {"index": d, "name": "(other)", "launches": sum(launched(k) for k in range(20, 30) if k % 2 == d)}
        for d in (0, 1)
    ]
    assert first["cuda"]["kernels"] == named + other


def test_the_top_kernels_of_each_gpu_sum_the_processes_by_name(job):
    """Device 0: kernels 0-18 (even) from both kernel processes, the odd ones and 20-31 from the second alone; the 20
    most launched across them are named, the rest join the processes' own (other) rows."""
    device0, device1 = job.profile["devices"][:2]
    both = {kernel_name(k): launched(k) * (2 if k % 2 == 0 else 1) for k in range(20)}
    expected = sorted(both.items(), key=lambda item: -item[1])
    other = device0["kernel_launches"] - sum(both.values())
    assert [(k["name"], k["launches"]) for k in device0["kernels"]] == [*expected, ("(other)", other)]
    odd = [(kernel_name(k), launched(k)) for k in range(1, 20, 2)]
    other = device1["kernel_launches"] - sum(n for _, n in odd)
    assert [(k["name"], k["launches"]) for k in device1["kernels"]] == [*odd, ("(other)", other)]
    assert [d["kernels"] for d in job.profile["devices"][2:]] == [[{"name": "(other)", "launches": 0}]] * 2  # no launch


def test_the_summary_says_it_on_stderr(job):
    profile, summary = job.profile, job.summary
    device = profile["devices"][0]
    h2d = device["copies"]["host_to_device"]["copies"]
    assert summary[0].startswith("alnair: profile of `sh -c \ufffdreleased() {")  # the script's newline, shown
    assert summary[0].endswith(f"...` (exit 3) in {job.path}")
    assert summary[1].startswith(f"  wall {profile['wall_ns'] / 1e9:.2f} s; first allocation ")
    assert summary[1].endswith("; 6 processes published counters")
    assert summary[2].startswith(f"  {device['uuid']}: GPU time ")
    assert f", {device['kernel_launches']:,} launches" in summary[2]
    assert summary[3].startswith(f"    copies: host->device {h2d} (")
    assert summary[4] == (
        "    top kernels: fake_kernel_0 2,000; fake_kernel_2 1,960; fake_kernel_4 1,920; "
        "fake_kernel_6 1,880; fake_kernel_8 1,840"
    )
    assert not any("training" in line for line in summary)


def test_a_sigtermed_job_still_writes_its_profile(
    intercept_library, fake_driver_dir, client_programs, shm_dir, tmp_path
):
    path = tmp_path / "profile.json"
    client = [str(client_programs["gpa"]), "gpa", "launches", "2", "300", "2"]
    proc = subprocess.Popen(
        [alnair_run(), "--profile", str(path), *client],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=job_environment(fake_driver_dir, shm_dir),
    )
    try:
        output = LineReader(proc.stdout)
        while output.read_line(30).strip() != "ready":
            pass
        (client,) = wait_until(lambda: writer_pids(shm_dir))
        wait_until(lambda: {i: d.kernel_launches for i, d in published(shm_dir, client).items()} == {0: 300, 1: 300})
        proc.send_signal(signal.SIGTERM)  # stdin stays open: the client ends by the signal alnair-run forwards
        assert proc.wait(30) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    profile = json.loads(path.read_text())
    assert profile["exit"] == {"signal": signal.SIGTERM, "name": "SIGTERM"}
    (process,) = profile["processes"]
    assert process["pid"] == client and not process["running"]
    assert {i: d["kernel_launches"] for i, d in by_index(process).items()} == {0: 300, 1: 300}
    assert "(killed by SIGTERM)" in proc.stderr.read().splitlines()[0]


@pytest.mark.parametrize(
    "where, reason",
    [
        ("missing/profile.json", "No such file or directory"),
        ("file/profile.json", "Not a directory"),
        ("", "it is a directory"),
    ],
)
def test_an_unwritable_path_is_one_line_and_the_job_runs_with_its_own_status(
    intercept_library, tmp_path, where, reason
):
    (tmp_path / "file").write_text("")
    path = tmp_path / where
    result = subprocess.run(
        [alnair_run(), f"--profile={path}", "sh", "-c", "echo job; exit 7"], check=False, capture_output=True, text=True
    )
    assert (result.returncode, result.stdout) == (7, "job\n")
    assert result.stderr.splitlines() == [
        f'alnair-run: ignoring --profile="{path}": cannot write there ({reason}); writing no profile'
    ]


def test_the_environment_variable_is_the_flags_fallback_and_percent_p_its_pid(tmp_path):
    env = {**os.environ, "ALNAIR_PROFILE": str(tmp_path / "profile-%p.json")}
    proc = subprocess.Popen([alnair_run(), "sh", "-c", "exit 0"], env=env, stderr=subprocess.DEVNULL)
    assert proc.wait(30) == 0
    assert json.loads((tmp_path / f"profile-{proc.pid}.json").read_text())["exit"] == {"code": 0}


def test_the_profile_equals_the_exporters_view_of_the_same_job(
    intercept_library, fake_driver_dir, client_programs, tmp_path
):
    """Issue 37: the cuda collector scrapes the job while it holds after its work; the profile written at its exit
    says the same launches, per device and per kernel, for the same pid."""
    shm_dir, path = tmp_path / "shm", tmp_path / "profile.json"
    shm_dir.mkdir()
    command = [alnair_run(), "--profile", str(path), str(client_programs["gpa"]), "gpa", "kernels", "30", "2", "wait"]
    env = job_environment(fake_driver_dir, shm_dir)
    job = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert LineReader(job.stdout).read_line(timeout=20).strip() == "waiting"
        collector = CudaCollector(argparse.Namespace(shm_dir=str(shm_dir), procfs="/proc"))
        launches = "alnair_cuda_kernel_launches_total"
        scraped = wait_until(
            lambda: (
                (s := parse_samples(render(collector.collect()).decode()))
                and sum(v for k, v in s.items() if k.startswith(launches + "{")) == sum(launched(k) for k in range(30))
                and s
            )
        )
        job.stdin.write("\n")
        job.stdin.close()
        assert job.wait(20) == 0
    finally:
        job.kill()
        job.wait()
    (process,) = json.loads(path.read_text())["processes"]
    pid = process["pid"]
    uuids = {device["index"]: device["uuid"] for device in process["cuda"]["devices"]}
    for device in process["cuda"]["devices"]:
        labels = f'gpu="{device["index"]}",pid="{pid}",uuid="{device["uuid"]}"'
        assert device["kernel_launches"] == scraped[f"{launches}{{{labels}}}"] > 0
    rows = {(row["index"], row["name"]): row["launches"] for row in process["cuda"]["kernels"]}
    assert len(rows) == 22  # 20 named, and each device's (other)
    for (gpu, name), n in rows.items():
        labels = f'gpu="{gpu}",kernel="{name}",pid="{pid}",uuid="{uuids[gpu]}"'
        assert scraped[f"alnair_cuda_kernel_launches_by_name_total{{{labels}}}"] == n
