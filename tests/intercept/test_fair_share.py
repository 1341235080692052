"""Fair turns on a GPU where any process has a compute limit: processes without a limit take
what the limited ones leave, in turns; an idle one takes no window; a peer's arrival undoes the
feedback a process took alone; a window's last launches end inside it (docs/intercept.md, Limits)."""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from conftest import published
from support import wait_until
from test_limits import overlap_fraction


def share_tables(shm_dir: Path) -> list[str]:
    return [name for name in os.listdir(shm_dir) if name.startswith("alnair.share.")]


def writer_pids(shm_dir: Path) -> set[int]:
    """The pids of the cuda segments in the directory (alnair.cuda.<namespace>.<pid>.<start>)."""
    return {int(name.split(".")[3]) for name in os.listdir(shm_dir) if name.startswith("alnair.cuda.")}


def window_ms(shm_dir: Path, pid: int) -> float | None:
    """The window a process takes turns with, in ms; None while it takes no turns."""
    device = published(shm_dir, pid).get(0)
    return device.compute_quota_ns / 1e6 if device and device.compute_period_ns else None


def test_an_unlimited_process_takes_the_rest_in_turns_with_a_limited_one(run_client, shm_dir, tmp_path):
    unlimited, _ = overlap_fraction(run_client, [None, None], tmp_path / "control")
    assert unlimited > 0.1  # with no limit anywhere nobody takes turns,
    assert len(share_tables(shm_dir)) == 1  # though both joined the GPU's table (for their GPU time)
    limited, (first, second) = overlap_fraction(run_client, ["30", None], tmp_path / "gpu")
    assert abs(first / (first + second) - 0.3) < 0.08, (first, second)
    assert limited < 0.2 * unlimited, (limited, unlimited)


def test_unlimited_processes_split_the_rest_and_an_idle_one_takes_no_window(run_client, shm_dir):
    limited = run_client("gpa", "launches", "1", "10", "1", env={"ALNAIR_COMPUTE_LIMIT": "30"})  # then idle
    assert wait_until(lambda: window_ms(shm_dir, limited.proc.pid) == 30)
    with ThreadPoolExecutor(2) as pool:
        busy = [pool.submit(run_client, "gpa", "rate", "0", "3") for _ in range(2)]  # launching for 3 s
        others = wait_until(lambda: len(pids := writer_pids(shm_dir) - {limited.proc.pid}) == 2 and pids)
        assert wait_until(lambda: [window_ms(shm_dir, pid) for pid in others] == [35, 35])
        assert window_ms(shm_dir, limited.proc.pid) == 30  # a limit is what its process gets
        [future.result() for future in busy]
    # a second after their last launch they take no turns, and still hold their slots
    assert wait_until(lambda: [window_ms(shm_dir, pid) for pid in others] == [None, None], timeout=5)


def test_an_unlimited_process_gets_a_floor_when_limits_take_the_whole_gpu(run_client, shm_dir):
    limited = run_client("gpa", "launches", "1", "10", "1", env={"ALNAIR_COMPUTE_LIMIT": "100"})
    assert wait_until(lambda: window_ms(shm_dir, limited.proc.pid) == 100)
    with ThreadPoolExecutor(1) as pool:
        busy = pool.submit(run_client, "gpa", "rate", "0", "2")
        # 5% of the period, and the limited process shrinks as oversubscribed limits do: 100 / 1.05
        assert wait_until(lambda: round(window_ms(shm_dir, limited.proc.pid), 3) == 95.238)
        [other] = writer_pids(shm_dir) - {limited.proc.pid}
        assert round(window_ms(shm_dir, other), 3) == 4.762
        busy.result()
    assert wait_until(lambda: window_ms(shm_dir, limited.proc.pid) == 100, timeout=5)  # idle: given back


def nvml_env(fake_nvml_dir: Path, fake_driver_dir: Path, **settings: str) -> dict[str, str]:
    """The fake NVML on the library path, reporting the processes' utilization as settings say."""
    return {"LD_LIBRARY_PATH": f"{fake_nvml_dir}:{fake_driver_dir}", **settings}


def windows_for(shm_dir: Path, pids: list[int], seconds: float) -> list[list[float | None]]:
    samples, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append([window_ms(shm_dir, pid) for pid in pids])
        time.sleep(0.05)
    return samples


def test_a_peers_arrival_undoes_the_feedback_taken_alone(run_client, shm_dir, fake_nvml_dir, fake_driver_dir):
    env = nvml_env(fake_nvml_dir, fake_driver_dir, FAKE_NVML_SM_UTIL="60", ALNAIR_COMPUTE_LIMIT="30")
    first = run_client("gpa", "launches", "1", "10", "1", env=env)
    # alone, NVML says it used twice its limit: each step shrinks its window, down to half the limit
    assert wait_until(lambda: window_ms(shm_dir, first.proc.pid) == 15)
    second = run_client("gpa", "launches", "1", "10", "1", env={**env, "ALNAIR_COMPUTE_LIMIT": "20"})
    pids = [first.proc.pid, second.proc.pid]
    assert wait_until(lambda: [window_ms(shm_dir, pid) for pid in pids] == [30, 20])
    # with a peer NVML cannot tell whose time is whose: neither takes a step (several feedback periods)
    assert all(sample == [30, 20] for sample in windows_for(shm_dir, pids, 1.6))


def test_no_feedback_while_nvml_sees_another_process_busy(run_client, shm_dir, fake_nvml_dir, fake_driver_dir):
    """A process without the intercept is in no table: NVML's samples still show it busy."""
    env = nvml_env(fake_nvml_dir, fake_driver_dir, FAKE_NVML_SM_UTIL="60", ALNAIR_COMPUTE_LIMIT="30")
    control = run_client("gpa", "launches", "1", "10", "1", env=env)
    assert wait_until(lambda: window_ms(shm_dir, control.proc.pid) == 15)  # the same process alone steps
    control.stop()
    client = run_client("gpa", "launches", "1", "10", "1", env={**env, "FAKE_NVML_OTHER_SM_UTIL": "50"})
    assert wait_until(lambda: window_ms(shm_dir, client.proc.pid) == 30)
    assert all(sample == [30] for sample in windows_for(shm_dir, [client.proc.pid], 1.6))


def test_a_windows_last_launches_end_inside_it(run_client):
    """Batches of 40 ms of queued work under a 30% limit: launching until the window closes would
    leave 10 ms of every batch running past it, into the next process's window. The launches that
    would not end in the window wait for the next one, so the work stays inside."""
    env = {"FAKE_CUDA_ASYNC": "1", "FAKE_CUDA_LAUNCH_NS": "1000000", "FAKE_CUDA_WINDOW_NS": "30000000",
           "ALNAIR_COMPUTE_LIMIT": "30"}
    client = run_client("gpa", "batches", "0.5", "3.0", "40", env=env)
    share, outside = (float(client.values(key)[0][0]) for key in ("device_share", "outside_window_share"))
    assert 0.25 < share < 0.35, share
    assert outside < 0.2, outside  # 0.01-0.09 on a loaded 2-CPU VM; 0.59 before the launches waited
