"""The profile row's columns: name, type (str, int, float) and meaning, in output order. Ratios are 0-1 and
quantities in base units (Prometheus's conventions); the published dataset's percent columns are these x 100
(docs/dataset.md maps each)."""

from __future__ import annotations

STATS = ("min", "max", "mean", "range")

IDENTITY = [
    ("job", str, "pid@instance: one process seen by one exporter"),
    ("instance", str, "the exporter's scrape target"),
    ("pid", str, "the process id as the exporter labels it"),
    ("node", str, "alnair_node_info's node"),
    ("namespace", str, "Kubernetes namespace (<none>: not in a pod, <unknown>: not known to the exporter)"),
    ("pod", str, "pod name"),
    ("container", str, "container name"),
    ("pod_uid", str, "pod UID"),
    ("comm", str, "process name"),
    ("pod_processes", int, "profiled processes of the same pod in the range (this one included); empty outside a pod"),
    ("start_time", float, "Unix seconds: the process's start (its record) or its first sample"),
    ("end_time", float, "Unix seconds: the process's exit (its record) or its last sample"),
    ("duration_seconds", float, "end_time - start_time"),
    ("duration_source", str, "record: start and exit from the intercept's record; samples: first and last sample"),
    ("scrapes", int, "samples of the job's most sampled series in the range"),
    ("exporter_version", str, "alnair_exporter_build_info's version"),
    ("node_cpus", int, "logical CPUs of the node"),
    ("node_memory_total_bytes", float, "the node's memory"),
    ("gpu_count", int, "GPUs the process used (from its cuda and nvml series)"),
    ("gpu_uuids", str, "their UUIDs, comma-separated"),
    ("gpu_model", str, "alnair_nvml_gpu_info's name"),
    ("driver_version", str, "NVIDIA driver version"),
]

# (prefix, meaning): each gets _min, _max, _mean, _range over the samples inside the job's run
STATISTICS = [
    ("cpu_util_ratio", "node CPU busy share per scrape interval (all modes but idle and iowait)"),
    ("sys_memory_util_ratio", "node memory in use: (total - available) / total"),
    ("gpu_util_ratio", "SM utilization of the job's GPUs (device, NVML)"),
    ("gpu_memory_busy_ratio", "memory controller busy time of the job's GPUs (NVML util.memory)"),
    ("gpu_memory_used_ratio", "used / total memory of the job's GPUs"),
    ("gpu_memory_used_bytes", "used memory of the job's GPUs"),
    ("gpu_temperature_celsius", "GPU temperature"),
    ("gpu_power_watts", "GPU power draw"),
    ("gpu_process_util_ratio", "NVML's per-process SM utilization of this process"),
]

MEASURES = [
    ("gpu_energy_joules", float, "energy of the job's GPUs over its run (increase of the NVML counter, summed)"),
    ("gpu_process_memory_max_bytes", float, "NVML's largest reading of this process's GPU memory"),
    ("cuda_memory_peak_bytes", float, "the intercept's peak device memory, summed over the process's GPUs"),
    ("cuda_kernel_launches", float, "kernel launches, process total at its last sample"),
    ("cuda_graph_launches", float, "CUDA graph launches, process total"),
    ("cuda_allocations", float, "device memory allocations, process total"),
    ("cuda_allocations_denied", float, "allocations refused by ALNAIR_MEMORY_LIMIT, process total"),
    (
        "cuda_throttled_seconds",
        float,
        "time launches waited for a compute limit, process total (a cap's or a "
        "share's debt of GPU time; writers before the GPU-time limits: the cap's turns)",
    ),
    (
        "cuda_gpu_time_seconds",
        float,
        "GPU time the process got (alnair_cuda_gpu_time_seconds_total: its busy time, each moment divided among the "
        "processes busy on the GPU then), process total, summed over its GPUs (empty: not measured, as for writers "
        "before GPU time)",
    ),
    (
        "cuda_gpu_time_ratio",
        float,
        "cuda_gpu_time_seconds / (duration_seconds x the GPUs it was measured on): the "
        "mean share of its GPUs' time it got over its run (empty: not measured)",
    ),
    ("cuda_memory_limit_bytes", float, "ALNAIR_MEMORY_LIMIT (empty: none)"),
    ("cuda_compute_limit_ratio", float, "ALNAIR_COMPUTE_LIMIT / 100: the cap (empty: none)"),
    (
        "cuda_compute_share_ratio",
        float,
        "ALNAIR_COMPUTE_SHARE / 100: the share (alnair_cuda_compute_share_ratio; empty: none)",
    ),
    ("steps", float, "training steps (DataLoader batches), process total"),
    ("samples", float, "samples in those batches"),
    ("epochs", float, "DataLoader passes run to the end"),
    ("optimizer_steps", float, "optimizer steps"),
    ("samples_per_second", float, "samples / time in steps (data wait included): throughput of the training loop"),
    ("step_seconds_p50", float, "median step time: each scrape interval's mean step time, weighted by its steps"),
    ("step_seconds_p95", float, "95th percentile of the same"),
    ("data_stall_ratio", float, "time waiting for batches / time in steps"),
    ("time_to_first_step_seconds", float, "process start to its first step"),
    (
        "gpu_util_ratio_training_min",
        float,
        "min of gpu_util_ratio over the scrapes between the job's second step and its last (its step counter's): the "
        "GPU idles through start-up and exit, so gpu_util_ratio_min is 0 for most jobs",
    ),
]


def columns() -> list[tuple[str, type, str]]:
    stats = [(f"{prefix}_{stat}", float, f"{stat} of {meaning}") for prefix, meaning in STATISTICS for stat in STATS]
    return IDENTITY + stats + MEASURES


NAMES = [name for name, _, _ in columns()]
