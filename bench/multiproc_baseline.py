"""The baseline for bench/scrape_latency.py: prometheus_client's multiprocess mode.

    PROMETHEUS_MULTIPROC_DIR=DIR python bench/multiproc_baseline.py write N
    PROMETHEUS_MULTIPROC_DIR=DIR python bench/multiproc_baseline.py serve PORT

`write` forks N writer processes, BATCH at a time. Each one creates the series one
Alnair cuda segment with one device exports (9 per-device series and 3 per-process
ones, all labelled by pid), writes its values into its own files in DIR, and exits.
Multiprocess mode keeps a dead process's counters and 'all' gauges, so the files
are read exactly as a live writer's would be; exiting spares the machine a thousand
idle Python interpreters.

`serve` is the documented multiprocess setup: start_http_server on a registry
holding only a MultiProcessCollector, which reads every file in DIR per scrape.

The environment variable must be set before prometheus_client is imported, hence
a separate process rather than an import from the benchmark.
"""

from __future__ import annotations

import os
import sys
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector

BATCH = 50
DEVICE_LABELS = ["pid", "gpu", "uuid"]
UUID = "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"

# The cuda collector's per-device families: (name, help).
COUNTERS = [
    ("alnair_cuda_kernel_launches", "Kernel launches, every launch path."),
    ("alnair_cuda_graph_launches", "CUDA graph launches."),
    ("alnair_cuda_allocations", "Successful device memory allocations."),
    ("alnair_cuda_allocation_failures", "Allocations the driver refused."),
    ("alnair_cuda_allocations_denied", "Allocations refused by the memory limit."),
    ("alnair_cuda_throttled_seconds", "Time launches waited for their compute-limit window."),
]
DEVICE_GAUGES = [
    ("alnair_cuda_memory_used_bytes", "Device memory the process has allocated and not freed."),
    ("alnair_cuda_memory_peak_bytes", "High-water mark of memory_used_bytes."),
    ("alnair_cuda_compute_quota_ratio", "Share of each scheduling period the process may launch in now."),
]


def write_one_process() -> None:
    """One writer's series. Counters are summed across processes, so they carry pid
    themselves; gauges in mode 'all' get the pid label from the collector."""
    pid = str(os.getpid())
    for name, text in COUNTERS:
        Counter(name, text, DEVICE_LABELS, registry=None).labels(pid, "0", UUID).inc()
    for name, text in DEVICE_GAUGES:
        Gauge(name, text, ["gpu", "uuid"], registry=None, multiprocess_mode="all").labels("0", UUID).set(0)
    info = Gauge(
        "alnair_cuda_process_info",
        "Identity of a process publishing CUDA counters; join on pid.",
        ["comm", "pod_uid", "container_id", "pid_namespace"],
        registry=None,
        multiprocess_mode="all",
    )
    info.labels("python", "", "", "4026531836").set(1)
    Gauge(
        "alnair_cuda_process_start_time_seconds",
        "Start time of the process, seconds since the epoch.",
        registry=None,
        multiprocess_mode="all",
    ).set(time.time())
    Gauge(
        "alnair_cuda_last_update_timestamp_seconds",
        "When the process last published its counters.",
        registry=None,
        multiprocess_mode="all",
    ).set(time.time())


def fork_writer() -> int:
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            write_one_process()
            status = 0
        finally:
            os._exit(status)
    return pid


def write(count: int) -> None:
    for start in range(0, count, BATCH):
        children = [fork_writer() for _ in range(min(BATCH, count - start))]
        for pid in children:
            _, status = os.waitpid(pid, 0)
            if status != 0:
                sys.exit(f"writer {pid} failed with status {status}")


def serve(port: int) -> None:
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    start_http_server(port, addr="127.0.0.1", registry=registry)
    print("ready", flush=True)
    sys.stdin.read()  # serve until the benchmark closes our stdin


def main() -> None:
    command, number = sys.argv[1], int(sys.argv[2])
    {"write": write, "serve": serve}[command](number)


if __name__ == "__main__":
    main()
