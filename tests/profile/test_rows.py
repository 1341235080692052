"""Rows from series as Prometheus returns them, without a Prometheus: the GPU columns (which CI's CPU job cannot
produce), a pod of two processes, DataLoader workers, and a job known only by its samples."""

from __future__ import annotations

import pytest

from alnair.profiler import jobs
from alnair.profiler.prometheus import Series

NODE = {"instance": "n1:9876", "job": "alnair"}
GPU = {"gpu": "0", "uuid": "GPU-a"}
OTHER = {"gpu": "1", "uuid": "GPU-b"}
T = [100.0, 115.0, 130.0, 145.0]


def series(labels: dict, values: list[float], times: list[float] = T) -> Series:
    return Series({**NODE, **labels}, list(times), list(values))


def job(pid: str, pod: str, families: dict[str, list[Series]]) -> jobs.Job:
    found = jobs.Job(
        "n1:9876", pid, {"namespace": "team", "pod": pod, "container": "c", "pod_uid": "u", "comm": "python"}
    )
    found.families.update(families)
    return found


def node_families() -> dict[str, list[Series]]:
    gpu_info = {"name": "NVIDIA H200", "driver_version": "570.86.15", "parent_uuid": ""}
    return {
        "alnair_node_info": [series({"node": "node-1"}, [1] * 4)],
        "alnair_nvml_gpu_info": [series({**GPU, **gpu_info}, [1] * 4), series({**OTHER, **gpu_info}, [1] * 4)],
        "alnair_nvml_sm_utilization_ratio": [series(GPU, [0.2, 0.9, 0.5, 0.1]), series(OTHER, [1, 1, 1, 1])],
        "alnair_nvml_memory_used_bytes": [series(GPU, [10, 40, 40, 10])],
        "alnair_nvml_memory_total_bytes": [series(GPU, [100] * 4)],
        "alnair_nvml_energy_joules_total": [series(GPU, [1000, 1500, 100, 600])],  # a driver reload between
    }


@pytest.fixture
def rows():
    trainer = job(
        "7",
        "train",
        {
            "alnair_cuda_process_start_time_seconds": [series({"pid": "7"}, [110] * 4)],
            "alnair_cuda_process_exited_timestamp_seconds": [series({"pid": "7"}, [140], [145])],
            "alnair_cuda_memory_peak_bytes": [series({"pid": "7", **GPU}, [5, 8, 8, 8])],
            "alnair_cuda_kernel_launches_total": [series({"pid": "7", **GPU}, [0, 10, 20, 30])],
            "alnair_python_steps_total": [series({"pid": "7"}, [0, 10, 30, 30])],
            "alnair_python_step_seconds_total": [series({"pid": "7"}, [0, 1, 5, 5])],
        },
    )
    sidecar = job("8", "train", {"alnair_python_steps_total": [series({"pid": "8"}, [0, 1], T[1:3])]})
    worker = job("9", "train", {"alnair_python_dataloader_worker": [series({"pid": "9"}, [1] * 4)]})
    found = {(j.instance, j.pid): j for j in (trainer, sidecar, worker)}
    return {r["pid"]: r for r in jobs.rows(found, {"n1:9876": node_families()})}


def test_gpu_columns_come_from_the_jobs_gpu_within_its_run(rows):
    row = rows["7"]
    assert (row["gpu_count"], row["gpu_uuids"], row["gpu_model"], row["driver_version"]) == (
        1,
        "GPU-a",
        "NVIDIA H200",
        "570.86.15",
    )
    assert (row["start_time"], row["end_time"], row["duration_source"]) == (110, 140, "record")
    assert (row["gpu_util_ratio_min"], row["gpu_util_ratio_max"]) == (0.5, 0.9)  # 115 and 130 s: inside the run
    assert row["gpu_memory_used_ratio_max"] == 0.4 and row["gpu_memory_used_bytes_range"] == 0
    assert row["gpu_energy_joules"] == 100  # 1500 -> 100 is a reset: 100 joules since it
    assert (row["cuda_memory_peak_bytes"], row["cuda_kernel_launches"], row["steps"]) == (8, 30, 30)
    assert row["step_seconds_p50"] == pytest.approx(0.2) and row["step_seconds_p95"] == pytest.approx(0.2)
    assert row["node"] == "node-1"


def test_a_pods_processes_are_rows_of_their_own_and_workers_are_none(rows):
    assert sorted(rows) == ["7", "8"]
    assert rows["7"]["pod_processes"] == rows["8"]["pod_processes"] == 2
    sidecar = rows["8"]
    assert (sidecar["start_time"], sidecar["end_time"], sidecar["duration_source"]) == (115, 130, "samples")
    assert sidecar["gpu_count"] == 0 and sidecar["gpu_util_ratio_max"] is None


def test_the_training_minimum_leaves_out_the_warm_up_and_the_exit():
    times = [100.0 + t for t in range(10)]
    node = node_families() | {
        "alnair_nvml_sm_utilization_ratio": [series(GPU, [0, 0, 0, 0, 0.05, 0.5, 0.6, 0.1, 0, 0], times)]
    }
    record = {
        "alnair_cuda_process_start_time_seconds": [series({"pid": "7"}, [100] * 10, times)],
        "alnair_cuda_process_exited_timestamp_seconds": [series({"pid": "7"}, [108], [109])],
        "alnair_cuda_kernel_launches_total": [series({"pid": "7", **GPU}, [0] * 10, times)],
    }
    trained = job(
        "7",
        "train",
        record | {"alnair_python_steps_total": [series({"pid": "7"}, [0, 0, 1, 1, 5, 10, 15, 20, 20, 20], times)]},
    )
    untimed = job(
        "8", "other", {**record, "alnair_cuda_process_start_time_seconds": [series({"pid": "8"}, [100] * 10, times)]}
    )
    found = {r["pid"]: r for r in jobs.rows({("n1:9876", j.pid): j for j in (trained, untimed)}, {"n1:9876": node})}
    # 2 steps first at 104 s (its reading holds the warm-up), all 20 at 107 s (its reading holds the exit): 105-106 s
    assert found["7"]["gpu_util_ratio_min"] == 0.0 and found["7"]["gpu_util_ratio_training_min"] == 0.5
    assert found["8"]["gpu_util_ratio_min"] == 0.0 and found["8"]["gpu_util_ratio_training_min"] is None


@pytest.mark.parametrize(
    "gpu_time, share, seconds, ratio",
    [
        ({"a": [0, 3, 6, 9]}, [0.5] * 4, 9, 0.3),  # 9 s of its GPU's time over its 30 s run
        ({"a": [0, 2, 4, 6], "b": [0, 1, 2, 3]}, None, 9, 0.15),  # two GPUs: 9 s of their 60 s
        ({}, None, None, None),  # a writer before GPU time: no series, no value
    ],
)
def test_gpu_time_and_the_share_come_from_the_records_series(gpu_time, share, seconds, ratio):
    devices = {"a": GPU, "b": OTHER}
    record = {
        "alnair_cuda_process_start_time_seconds": [series({"pid": "7"}, [110] * 4)],
        "alnair_cuda_process_exited_timestamp_seconds": [series({"pid": "7"}, [140], [145])],
        "alnair_cuda_gpu_time_seconds_total": [series({"pid": "7", **devices[d]}, v) for d, v in gpu_time.items()],
    }
    if share is not None:
        record["alnair_cuda_compute_share_ratio"] = [series({"pid": "7", **GPU}, share)]
    [row] = jobs.rows({("n1:9876", "7"): job("7", "train", record)}, {"n1:9876": node_families()})
    assert row["duration_seconds"] == 30
    assert (row["cuda_gpu_time_seconds"], row["cuda_gpu_time_ratio"]) == (
        seconds,
        pytest.approx(ratio) if ratio else None,
    )
    assert row["cuda_compute_share_ratio"] == (share[-1] if share else None)
    assert row["cuda_compute_limit_ratio"] is None
