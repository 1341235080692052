"""The cuda collector turns the C writer's segments into per-process, per-device series."""

from __future__ import annotations

import argparse
import time

import psutil
import pytest

from alnair.collectors.cuda import CudaCollector
from alnair.exporter.plugin import render
from support import PythonProgram, cuda_record_program, parse_samples

# The test writer's device UUIDs: bytes 0x00-0x0f for device 0, 0x10-0x1f for device 1 (and so on).
UUIDS = {
    0: "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f",
    1: "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f",
    2: "GPU-20212223-2425-2627-2829-2a2b2c2d2e2f",
}


def device(writer, gpu: int) -> str:
    """The labels of one writer's device series."""
    return f'gpu="{gpu}",pid="{writer.pid}",uuid="{UUIDS[gpu]}"'


def sample(shm_dir, collector: CudaCollector | None = None) -> dict[str, float]:
    collector = collector or CudaCollector(argparse.Namespace(shm_dir=str(shm_dir), procfs="/proc"))
    return parse_samples(render(collector.collect()).decode())


def test_device_counters_are_exported_per_pid_and_gpu(start_writer, shm_dir):
    w = start_writer(
        "--devices",
        "2",
        "--set",
        "kernel_launches=100",
        "--set",
        "graph_launches=3",
        "--set",
        "bytes_in_use=1048576",
        "--set",
        "peak_bytes=2097152",
        "--set",
        "allocations=9",
        "--set",
        "failed_allocations=1",
        "--set",
        "limit_denied_allocations=2",
        "--set",
        "throttled_ns=1500000000",
        "--set",
        "compute_quota_ns=25000000",
        "--set",
        "compute_period_ns=100000000",
    )
    s = sample(shm_dir)
    gpu0 = device(w, 0)
    gpu1 = device(w, 1)
    assert s[f"alnair_cuda_kernel_launches_total{{{gpu0}}}"] == 100
    assert s[f"alnair_cuda_kernel_launches_total{{{gpu1}}}"] == 101
    assert s[f"alnair_cuda_graph_launches_total{{{gpu0}}}"] == 3
    assert s[f"alnair_cuda_memory_used_bytes{{{gpu0}}}"] == 1048576
    assert s[f"alnair_cuda_memory_peak_bytes{{{gpu0}}}"] == 2097152
    assert s[f"alnair_cuda_allocations_total{{{gpu0}}}"] == 9
    assert s[f"alnair_cuda_allocation_failures_total{{{gpu0}}}"] == 1
    assert s[f"alnair_cuda_allocations_denied_total{{{gpu0}}}"] == 2
    assert s[f"alnair_cuda_throttled_seconds_total{{{gpu0}}}"] == 1.5
    assert s[f"alnair_cuda_compute_quota_ratio{{{gpu0}}}"] == 0.25
    assert s["alnair_cuda_segments"] == 1


def test_limits_are_exported_only_when_set(start_writer, shm_dir):
    limited = start_writer("--set", "memory_limit_bytes=8589934592", "--compute-limit", "30")
    free = start_writer()
    s = sample(shm_dir)
    assert s[f"alnair_cuda_memory_limit_bytes{{{device(limited, 0)}}}"] == 8589934592
    assert s[f"alnair_cuda_compute_limit_ratio{{{device(limited, 0)}}}"] == 0.3
    assert not any(f'pid="{free.pid}"' in key for key in s if "limit" in key)
    assert s["alnair_cuda_segments"] == 2


# A writer with the GPU-time limits, as the intercept lays the record out (the C test writer cannot set a share), on
# the C writer's UUIDs: device 0 a 30% cap and a 50% share, device 1 a 25% share alone, device 2 neither; its
# compute_quota_ns and compute_period_ns are 0, as the GPU-time limits always leave them.
COMPUTE_LIMITS_WRITER = cuda_record_program("""
    record.device_count = 3
    for i in range(3):
        record.devices[i].device_index = i
        record.devices[i].uuid[:] = [i * 16 + k for k in range(16)]
    record.devices[0].compute_limit_percent, record.devices[0].compute_share_percent = 30, 50
    record.devices[1].compute_share_percent = 25
    record.devices[0].throttled_ns = 2_500_000_000
""")


def test_the_cap_and_the_share_are_exported_only_where_set(start_writer, shm_dir):
    writer = PythonProgram(COMPUTE_LIMITS_WRITER, shm_dir)
    try:
        # a writer from before: a window, no share
        older = start_writer(
            "--compute-limit", "30", "--set", "compute_quota_ns=25000000", "--set", "compute_period_ns=100000000"
        )
        s = sample(shm_dir)
    finally:
        writer.finish()
    gpu = {i: device(writer, i) for i in range(3)}
    compute = {k: v for k, v in s.items() if k.startswith("alnair_cuda_compute_")}
    assert compute == {
        f"alnair_cuda_compute_limit_ratio{{{gpu[0]}}}": 0.3,
        f"alnair_cuda_compute_share_ratio{{{gpu[0]}}}": 0.5,
        f"alnair_cuda_compute_share_ratio{{{gpu[1]}}}": 0.25,
        f"alnair_cuda_compute_limit_ratio{{{device(older, 0)}}}": 0.3,
        f"alnair_cuda_compute_quota_ratio{{{device(older, 0)}}}": 0.25,
    }
    assert s[f"alnair_cuda_throttled_seconds_total{{{gpu[0]}}}"] == 2.5


def test_process_identity_and_start_time_are_exported(start_writer, shm_dir):
    w = start_writer(env={"ALNAIR_POD_UID": "pod-1", "ALNAIR_CONTAINER_ID": "cri-o://c1"})  # on the host: not believed
    s = sample(shm_dir)
    info = [k for k in s if k.startswith("alnair_cuda_process_info")]
    assert len(info) == 1
    for label in (f'pid="{w.pid}"', 'pod_uid="<none>"', 'container_id=""', 'comm="alnair-shm-test"'):
        assert label in info[0]
    assert s["alnair_cuda_identity_claims_ignored_total"] == 1
    started = s[f'alnair_cuda_process_start_time_seconds{{pid="{w.pid}"}}']
    assert abs(started - psutil.Process(w.pid).create_time()) < 1.0


def test_start_time_lies_between_the_spawn_and_its_return(start_writer, shm_dir):
    # to the clock tick (10 ms): /proc/stat's btime alone, cut to whole seconds, put it up to 1 s before the spawn
    before = time.time()
    w = start_writer()
    after = time.time()
    started = sample(shm_dir)[f'alnair_cuda_process_start_time_seconds{{pid="{w.pid}"}}']
    assert before - 0.011 <= started <= after, (before, started, after)


def test_dead_writer_series_disappear_and_reclaim_is_counted(start_writer, shm_dir):
    w = start_writer()
    w.kill()
    s = sample(shm_dir)
    assert s["alnair_cuda_segments"] == 0
    assert s["alnair_cuda_segments_reclaimed_total"] == 1
    assert not any(f'pid="{w.pid}"' in key for key in s)


def test_empty_directory_yields_no_process_series(shm_dir):
    s = sample(shm_dir)
    assert s["alnair_cuda_segments"] == 0
    assert not any(k.startswith("alnair_cuda_kernel_launches_total{") for k in s)


COPIES = [
    "--set",
    "host_to_device.copies=10",
    "--set",
    "host_to_device.bytes=1048576",
    "--set",
    "host_to_device.sync_ns=250000000",
    "--set",
    "device_to_host.copies=4",
    "--set",
    "device_to_host.bytes=4096",
    "--set",
    "device_to_device.copies=2",
    "--set",
    "device_to_device.bytes=512",
]
ACTIVITY = [
    "--set",
    "first_launch_ns=2500000000",
    "--set",
    "first_allocation_ns=1250000000",
    "--set",
    "last_launch_time_ns=1700000000123456789",
]


def test_copies_are_exported_per_device_and_direction(start_writer, shm_dir):
    w = start_writer("--devices", "2", *COPIES)
    s = sample(shm_dir)
    gpu = {0: device(w, 0), 1: device(w, 1)}
    h2d, d2h, d2d = (f'direction="{d}",' for d in ("host_to_device", "device_to_host", "device_to_device"))
    assert s[f"alnair_cuda_copies_total{{{h2d}{gpu[0]}}}"] == 10
    assert s[f"alnair_cuda_copies_total{{{h2d}{gpu[1]}}}"] == 11  # the writer gives device i V + i
    assert s[f"alnair_cuda_copy_bytes_total{{{h2d}{gpu[0]}}}"] == 1048576
    assert s[f"alnair_cuda_sync_copy_seconds_total{{{h2d}{gpu[0]}}}"] == 0.25
    assert (
        s[f"alnair_cuda_copies_total{{{d2h}{gpu[0]}}}"] == 4
        and s[f"alnair_cuda_copy_bytes_total{{{d2h}{gpu[0]}}}"] == 4096
    )
    assert s[f"alnair_cuda_copy_bytes_total{{{d2d}{gpu[1]}}}"] == 513
    assert s[f"alnair_cuda_sync_copy_seconds_total{{{d2d}{gpu[0]}}}"] == 0  # every direction, 0 until it copies
    assert sum(k.startswith("alnair_cuda_copies_total{") for k in s) == 6  # 2 devices x 3 directions


def test_activity_times_are_exported_per_process_once_they_happened(start_writer, shm_dir):
    active = start_writer(*ACTIVITY)
    allocated_only = start_writer("--set", "first_allocation_ns=500000000")
    s = sample(shm_dir)
    assert s[f'alnair_cuda_time_to_first_launch_seconds{{pid="{active.pid}"}}'] == 2.5
    assert s[f'alnair_cuda_time_to_first_allocation_seconds{{pid="{active.pid}"}}'] == 1.25
    assert s[f'alnair_cuda_last_launch_timestamp_seconds{{pid="{active.pid}"}}'] == 1700000000.1234567
    assert s[f'alnair_cuda_time_to_first_allocation_seconds{{pid="{allocated_only.pid}"}}'] == 0.5
    assert not any(f'pid="{allocated_only.pid}"' in k for k in s if "launch_" in k and "seconds" in k)


def test_a_writer_older_than_the_copy_and_activity_fields_has_none_of_their_series(start_writer, shm_dir):
    old = start_writer("--record-size", "8224", *COPIES, *ACTIVITY, "--set", "kernel_launches=5")
    s = sample(shm_dir)
    assert s[f"alnair_cuda_kernel_launches_total{{{device(old, 0)}}}"] == 5
    assert not any(f'pid="{old.pid}"' in k for k in s if "cop" in k or "first_" in k or "last_launch" in k)


MEMORY = [
    "--set",
    "context_bytes=524288000",
    "--set",
    "pool_reserved_bytes=301989888",
    "--set",
    "pool_used_bytes=203505664",
    "--set",
    "charged_bytes=400000000",
]


def test_context_and_pool_memory_are_exported_per_device(start_writer, shm_dir):
    w = start_writer("--devices", "2", *MEMORY, "--set", "memory_limit_bytes=4294967296")
    s = sample(shm_dir)
    gpu0 = device(w, 0)
    gpu1 = device(w, 1)
    assert s[f"alnair_cuda_context_memory_bytes{{{gpu0}}}"] == 524288000
    assert s[f"alnair_cuda_context_memory_bytes{{{gpu1}}}"] == 524288001
    assert s[f"alnair_cuda_pool_reserved_bytes{{{gpu0}}}"] == 301989888
    assert s[f"alnair_cuda_pool_used_bytes{{{gpu0}}}"] == 203505664
    assert s[f"alnair_cuda_memory_charged_bytes{{{gpu0}}}"] == 400000000
    assert s[f"alnair_cuda_memory_limit_includes_context{{{gpu0}}}"] == 0


def test_an_unmeasured_context_and_an_unlimited_process_have_no_such_series(start_writer, shm_dir):
    w = start_writer("--set", "pool_reserved_bytes=4096")
    s = sample(shm_dir)
    assert s[f"alnair_cuda_pool_reserved_bytes{{{device(w, 0)}}}"] == 4096
    assert not any(
        k.startswith(("alnair_cuda_context_memory_bytes{", "alnair_cuda_memory_limit_includes_context{")) for k in s
    )


def test_a_writer_older_than_the_memory_fields_has_none_of_their_series(start_writer, shm_dir):
    from alnair.abi import layout

    old = start_writer("--record-size", str(layout.CUDA_DEVICES_MEMORY_OFFSET), *MEMORY, *COPIES)
    s = sample(shm_dir)
    assert any(f'pid="{old.pid}"' in k for k in s if k.startswith("alnair_cuda_copies_total{"))  # it has copies
    assert not any(f'pid="{old.pid}"' in k for k in s if "pool_" in k or "context_memory" in k or "charged" in k)


# A writer that measures GPU time, as the intercept lays the record out (the C test writer sets no flags), on the
# C writer's UUIDs: device 0 measured, 0.75 s of GPU time in 1.5 s busy; device 1 measured, nothing yet; device 2
# with values but not the flag (a writer older than the fields leaves 0; the flag, not the value, decides).
GPU_TIME_WRITER = cuda_record_program("""
    record.device_count = 3
    for i in range(3):
        record.devices[i].device_index = i
        record.devices[i].uuid[:] = [i * 16 + k for k in range(16)]
    record.devices[0].flags = record.devices[1].flags = layout.CUDA_DEVICE_GPU_TIME
    record.devices[0].gpu_time_ns, record.devices_ext[0].busy_ns = 750_000_000, 1_500_000_000
    record.devices[2].gpu_time_ns, record.devices_ext[2].busy_ns = 250_000_000, 500_000_000
""")


@pytest.fixture
def gpu_time_writer(shm_dir):
    writer = PythonProgram(GPU_TIME_WRITER, shm_dir)
    yield writer
    if writer.proc.poll() is None:
        writer.finish()


def test_gpu_time_is_exported_only_for_devices_whose_writer_measures_it(gpu_time_writer, start_writer, shm_dir):
    older = start_writer("--devices", "2", "--set", "kernel_launches=5")
    s = sample(shm_dir)
    gpu = {i: device(gpu_time_writer, i) for i in range(3)}
    assert s[f"alnair_cuda_gpu_time_seconds_total{{{gpu[0]}}}"] == 0.75
    assert s[f"alnair_cuda_gpu_busy_seconds_total{{{gpu[0]}}}"] == 1.5
    assert s[f"alnair_cuda_gpu_time_seconds_total{{{gpu[1]}}}"] == 0  # measured: nothing yet
    assert s[f"alnair_cuda_gpu_busy_seconds_total{{{gpu[1]}}}"] == 0
    gpu_time = {
        k for k in s if k.startswith(("alnair_cuda_gpu_time_seconds_total{", "alnair_cuda_gpu_busy_seconds_total{"))
    }
    assert len(gpu_time) == 4  # no series for device 2 (no flag), nor for the C writer's devices
    assert (
        not any(f'pid="{older.pid}"' in k for k in gpu_time)
        and s[f"alnair_cuda_kernel_launches_total{{{device(older, 1)}}}"] == 6
    )


def test_an_exited_writers_gpu_time_lingers_with_its_last_record(gpu_time_writer, shm_dir):
    collector = CudaCollector(argparse.Namespace(shm_dir=str(shm_dir), procfs="/proc", shm_linger=60.0))
    gpu0 = device(gpu_time_writer, 0)
    assert sample(shm_dir, collector)[f"alnair_cuda_gpu_time_seconds_total{{{gpu0}}}"] == 0.75  # seen alive
    gpu_time_writer.proc.kill()
    gpu_time_writer.proc.wait(10)
    s = sample(shm_dir, collector)
    assert f'alnair_cuda_process_exited_timestamp_seconds{{pid="{gpu_time_writer.pid}"}}' in s
    assert (s[f"alnair_cuda_gpu_time_seconds_total{{{gpu0}}}"], s[f"alnair_cuda_gpu_busy_seconds_total{{{gpu0}}}"]) == (
        0.75,
        1.5,
    )


# A writer's kernel table, as the intercept lays it out: two named kernels and OTHER on device 0, one on device 1
# whose name needs escaping in a label, and its OTHER row.
KERNELS_WRITER = cuda_record_program("""
    record.device_count = 2
    for i in range(2):
        record.devices[i].device_index = i
        record.devices[i].uuid[:] = [i * 16 + k for k in range(16)]
    rows = [(0, b"void gemm<float>(float*, int)", 900, 0), (0, b"relu_kernel", 40, 0),
            (1, b'say "hi" \\\\ there', 7, 0),
            (0, b"", 60, layout.CUDA_KERNEL_OTHER), (1, b"", 0, layout.CUDA_KERNEL_OTHER)]
    record.kernels.count = len(rows)
    for slot, (gpu, name, launches, flags) in enumerate(rows):
        k = record.kernels.kernels[slot]
        k.device_index, k.name, k.launches, k.flags = gpu, name, launches, flags
""")


def test_kernel_launches_by_name_are_exported_per_pid_gpu_and_kernel(start_writer, shm_dir):
    writer = PythonProgram(KERNELS_WRITER, shm_dir)
    try:
        older = start_writer("--record-size", "20576")  # a writer from before the kernel table
        s = sample(shm_dir)
    finally:
        writer.finish()

    def series(gpu: int, kernel: str) -> str:
        labels = f'gpu="{gpu}",kernel="{kernel}",pid="{writer.pid}",uuid="{UUIDS[gpu]}"'
        return f"alnair_cuda_kernel_launches_by_name_total{{{labels}}}"

    by_name = {k: v for k, v in s.items() if k.startswith("alnair_cuda_kernel_launches_by_name_total{")}
    assert by_name == {
        series(0, "void gemm<float>(float*, int)"): 900,
        series(0, "relu_kernel"): 40,
        series(0, "(other)"): 60,
        series(1, 'say \\"hi\\" \\\\ there'): 7,
        series(1, "(other)"): 0,
    }
    assert not any(f'pid="{older.pid}"' in k for k in by_name)
