"""GPU sharing: which pods share each GPU, and per pod and process what NVML and the CUDA intercept see: SM
utilization, memory against its limit, the compute limit against its quota and throttling, denied allocations,
launch rates."""
from __future__ import annotations

from . import variables as v
from .model import Dashboard, Query, row, table, timeseries
from .promql import DASHBOARD as S
from .promql import GPU, NODE, by, memory_of_limit, rate, selector, with_node, with_pod

PROCESS = "{{namespace}}/{{pod}} pid {{pid}} GPU {{gpu}}"
# Every process holding memory on a GPU has this series (0 when it ran nothing), intercepted or not.
ON_GPU = with_node(S, with_pod(S, selector(S, "alnair_nvml_process_sm_utilization_ratio", GPU), "nvml"))
POD_ON_GPU = by(["node", "gpu", "uuid", "namespace", "pod"], "count", ON_GPU)


def cuda(metric: str, legend: str = PROCESS) -> Query:
    return Query(with_pod(S, selector(S, metric, GPU), "cuda"), legend)


def cuda_rate(metric: str, legend: str = PROCESS) -> Query:
    return Query(with_pod(S, rate(S, metric, GPU), "cuda"), legend)


SHARING = row(
    "Who shares a GPU",
    table("Pods on each GPU", "Each pod with processes on a GPU, and how many (Value), from NVML: every process "
          "holding device memory, under the intercept or not.", "none", Query(POD_ON_GPU),
          hidden_columns=("Time",)),
    timeseries("Pods per GPU", "Distinct pods with processes on each GPU: above 1, the GPU is shared.", "none",
               Query(by(["node", "gpu", "uuid"], "count", POD_ON_GPU), "{{node}} GPU {{gpu}}"), min=0),
)

COMPUTE = row(
    "Compute",
    timeseries("SM utilization per process", "NVML's per-process SM utilization (mean of its samples since the last "
               "one). NVML samples one process at a time and does not divide a time-sliced GPU fairly: for shares under "
               "a compute limit read the quota and throttled share beside it.", "percentunit",
               Query(with_pod(S, selector(S, "alnair_nvml_process_sm_utilization_ratio", GPU), "nvml"), PROCESS),
               min=0, max=1),
    timeseries("Compute limit, quota and throttled share", "ALNAIR_COMPUTE_LIMIT as a share of the GPU; the share of "
               "each period the process may launch in now (its quota); and the share of time its launches were held "
               "back to keep it within the limit.", "percentunit",
               cuda("alnair_cuda_compute_limit_ratio", f"{PROCESS} limit"),
               cuda("alnair_cuda_compute_quota_ratio", f"{PROCESS} quota"),
               cuda_rate("alnair_cuda_throttled_seconds_total", f"{PROCESS} throttled"), min=0),
    timeseries("Kernel and graph launches", "Kernel and CUDA graph launches per second through the intercept. A pod "
               "whose launches fall while its data stall rises is starved by its input (Training dashboard).", "ops",
               cuda_rate("alnair_cuda_kernel_launches_total", f"{PROCESS} kernels"),
               cuda_rate("alnair_cuda_graph_launches_total", f"{PROCESS} graphs"), min=0, width=24),
)

MEMORY = row(
    "Memory",
    timeseries("Memory used against its limit", "Device memory the process's allocations hold through the intercept, "
               "beside its ALNAIR_MEMORY_LIMIT (absent without a limit).", "bytes",
               cuda("alnair_cuda_memory_used_bytes", f"{PROCESS} used"),
               cuda("alnair_cuda_memory_limit_bytes", f"{PROCESS} limit"), min=0),
    timeseries("Share of its memory limit in use", "Memory in use over ALNAIR_MEMORY_LIMIT; allocations past 100% are "
               "denied. The AlnairProcessNearMemoryLimit alert fires above its threshold.", "percentunit",
               Query(memory_of_limit(S), PROCESS), min=0, max=1),
    timeseries("Allocations denied and failed", "Allocations per second the intercept denied because they would pass "
               "the memory limit, and those the driver failed (out of memory).", "ops",
               cuda_rate("alnair_cuda_allocations_denied_total", f"{PROCESS} denied"),
               cuda_rate("alnair_cuda_allocation_failures_total", f"{PROCESS} failed"), min=0),
    timeseries("GPU memory per process (NVML)", "Device memory NVML reports each process holds, intercepted or not "
               "(absent where NVML hides it: MIG without privileges).", "bytes",
               Query(with_pod(S, selector(S, "alnair_nvml_process_memory_used_bytes", GPU), "nvml"), PROCESS), min=0),
)

PER_PROCESS = "{{namespace}}/{{pod}} pid {{pid}}"
COPIES = row(
    "Copies and activity",
    timeseries("Copy throughput per process", "Bytes per second each process copied through the intercept, by "
               "direction (host to device, device to host, device to device), on the destination's GPU for peer "
               "copies. Host-to-device bytes are a training job's input: compare with its data stall (Training).",
               "Bps", cuda_rate("alnair_cuda_copy_bytes_total", f"{PROCESS} {{{{direction}}}}"), min=0),
    timeseries("Time in synchronous copies", "Share of each second a process spent in copies that block it "
               "(cuMemcpy without Async); PyTorch copies asynchronously, so 0 there is expected.", "percentunit",
               cuda_rate("alnair_cuda_sync_copy_seconds_total", f"{PROCESS} {{{{direction}}}}"), min=0),
    timeseries("Since the last kernel launch", "Seconds since each process last launched a kernel or graph: a "
               "process holding a GPU with a growing value is idle (or stuck).", "s",
               Query(with_pod(S, f"time() - {selector(S, 'alnair_cuda_last_launch_timestamp_seconds', NODE)}", "cuda"),
                     PER_PROCESS), min=0),
    timeseries("Start-up: time to first allocation and launch", "Seconds from each process's start to its first "
               "device allocation and its first kernel launch: how long a job spends starting before the GPU "
               "works (absent until it has done either).", "s",
               Query(with_pod(S, selector(S, "alnair_cuda_time_to_first_allocation_seconds", NODE), "cuda"),
                     f"{PER_PROCESS} first allocation"),
               Query(with_pod(S, selector(S, "alnair_cuda_time_to_first_launch_seconds", NODE), "cuda"),
                     f"{PER_PROCESS} first launch"), min=0),
)

DASHBOARD = Dashboard(
    "alnair-gpu-sharing", "Alnair / GPU sharing",
    "Which pods share each GPU, and per process: utilization, memory against its limit, compute quota and throttling.",
    (v.DATASOURCE, v.NODE, v.INSTANCE, v.namespace("cuda", "nvml"), v.pod("cuda", "nvml"), v.GPU),
    (SHARING, COMPUTE, MEMORY, COPIES),
)
