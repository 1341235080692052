"""The recording rules, named level:metric:operations as Prometheus recommends: per-process series with their pod's
namespace, pod and container (and the node) on the series itself, as DCGM users expect, and the ratios the
dashboards show and the alerts read, over the rules' fixed window (promql.RULES)."""

from __future__ import annotations

from dataclasses import dataclass

from .promql import (
    RULES,
    cache_hit_ratio,
    cache_node_memory_of_max,
    data_stall,
    dedupe_ratio,
    gpu_memory_used_share,
    gpu_time_share,
    gpus_answering,
    memory_of_limit,
    rate,
    with_node,
    with_pod,
)


@dataclass(frozen=True)
class Recorded:
    record: str
    expr: str
    meaning: str


RATE = f"rate{RULES.window}"  # the operation's name in a recorded rate: rate5m
JOINED = "with its pod's namespace, pod and container and its node joined in"

# Per-process gauges and counters, by the collector whose _process_info names their pods.
GAUGES = {
    "nvml": (
        "alnair_nvml_process_sm_utilization_ratio",
        "alnair_nvml_process_memory_utilization_ratio",
        "alnair_nvml_process_memory_used_bytes",
    ),
    "cuda": (
        "alnair_cuda_memory_used_bytes",
        "alnair_cuda_memory_limit_bytes",
        "alnair_cuda_compute_limit_ratio",
        "alnair_cuda_compute_share_ratio",
        "alnair_cuda_compute_quota_ratio",
        "alnair_cuda_memory_charged_bytes",
        "alnair_cuda_context_memory_bytes",
    ),
}
COUNTERS = {
    "cuda": (
        "alnair_cuda_kernel_launches_total",
        "alnair_cuda_graph_launches_total",
        "alnair_cuda_allocations_denied_total",
        "alnair_cuda_allocation_failures_total",
        "alnair_cuda_throttled_seconds_total",
        "alnair_cuda_copy_bytes_total",
        "alnair_cuda_gpu_time_seconds_total",
        "alnair_cuda_gpu_busy_seconds_total",
    ),
    "python": ("alnair_python_steps_total", "alnair_python_samples_total", "alnair_python_optimizer_steps_total"),
}


def process_rate(metric: str) -> str:
    """The recorded name of a per-process counter's rate: pod_pid:<metric without _total>:rate5m."""
    return f"pod_pid:{metric.removesuffix('_total')}:{RATE}"


def _joined(collector: str, expr: str) -> str:
    return with_node(RULES, with_pod(RULES, expr, collector))


PROCESS = [
    *(
        Recorded(f"pod_pid:{metric}", _joined(collector, metric), f"{metric} {JOINED}")
        for collector, metrics in GAUGES.items()
        for metric in metrics
    ),
    *(
        Recorded(
            process_rate(metric),
            _joined(collector, rate(RULES, metric)),
            f"per-second rate of {metric} over {RULES.window}, {JOINED}",
        )
        for collector, metrics in COUNTERS.items()
        for metric in metrics
    ),
]

GPU_MEMORY_USED = "gpu:alnair_nvml_memory_used_per_total:ratio"
MEMORY_OF_LIMIT = "pod_pid:alnair_cuda_memory_used_per_limit:ratio"
POD_GPU_TIME = f"namespace_pod_gpu:alnair_cuda_gpu_time_seconds:{RATE}"
PROCESS_DATA_STALL = f"pod_pid:alnair_python_data_wait_per_step_seconds:ratio_{RATE}"
POD_DATA_STALL = f"namespace_pod:alnair_python_data_wait_per_step_seconds:ratio_{RATE}"
DATASET_HIT_RATIO = f"redis_dataset:alnair_cache_dataset_hits_per_fetches:ratio_{RATE}"
JOB_HIT_RATIO = f"redis_job_name:alnair_cache_job_hits_per_fetches:ratio_{RATE}"
DEDUPE_RATIO = "redis:alnair_cache_dataset_logical_per_physical_bytes:ratio"
CACHE_NODE_MEMORY = "redis_node:alnair_cache_node_memory_used_per_max:ratio"
GPUS = "instance:alnair_nvml_gpus:count"

RATIOS = [
    Recorded(
        GPU_MEMORY_USED,
        with_node(RULES, gpu_memory_used_share(RULES)),
        "per GPU: device memory used over installed, with its node",
    ),
    Recorded(
        MEMORY_OF_LIMIT,
        with_node(RULES, memory_of_limit(RULES)),
        f"per process and GPU: memory in use over its ALNAIR_MEMORY_LIMIT (only processes with a limit), {JOINED}",
    ),
    Recorded(
        POD_GPU_TIME,
        with_node(RULES, gpu_time_share(RULES)),
        f"per pod and GPU (`uuid`): the share of the GPU's time the pod's processes got (GPU time per second, each "
        f"moment divided among the processes busy on the GPU then) over {RULES.window}, with its node",
    ),
    Recorded(
        PROCESS_DATA_STALL,
        with_node(RULES, data_stall(RULES)),
        f"per process: the share of step time spent waiting for data (the data stall) over {RULES.window}, {JOINED}",
    ),
    Recorded(
        POD_DATA_STALL,
        data_stall(RULES, ("namespace", "pod")),
        f"per pod: the data stall of all its training processes together over {RULES.window}",
    ),
    Recorded(
        DATASET_HIT_RATIO,
        cache_hit_ratio(RULES, "dataset", ("redis", "dataset")),
        f"per Redis and dataset: samples served from the cache over all samples fetched over {RULES.window}",
    ),
    Recorded(
        JOB_HIT_RATIO,
        cache_hit_ratio(RULES, "job", ("redis", "job_name")),
        f"per Redis and job: the same hit ratio by the job name the loaders give, over {RULES.window}",
    ),
    Recorded(
        DEDUPE_RATIO,
        dedupe_ratio(RULES),
        "per Redis: bytes the datasets' manifests reference, each as if stored alone, over the distinct bytes stored",
    ),
    Recorded(
        CACHE_NODE_MEMORY,
        cache_node_memory_of_max(RULES),
        "per Redis Cluster node: memory used over its maxmemory (only nodes with a maxmemory)",
    ),
    Recorded(
        GPUS,
        with_node(RULES, gpus_answering(RULES)),
        "per exporter: GPUs (not MIG instances) that answered NVML in its last sample, 0 when none did, with its node",
    ),
]

GROUPS = {"alnair-process": PROCESS, "alnair-ratios": RATIOS}


def groups(recorded: dict[str, list[Recorded]] = GROUPS) -> list[dict]:
    """Rule groups as Prometheus's rule files hold them."""
    return [
        {"name": name, "rules": [{"record": r.record, "expr": r.expr} for r in rules]}
        for name, rules in recorded.items()
    ]
