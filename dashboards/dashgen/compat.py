"""The optional v0.4.0 compatibility group: the metric names the original Alnair exporter served
(CentaurusInfra/alnair, alnair-profiler/alnair-exporter at tag v0.4.0), recorded from today's series in the
original units and labels (pid, gpu_uuid or pod_name and namespace, and the constant nodeName), so dashboards
built for it keep working. dashboards/README.md says where the values differ and what cannot be recreated."""

from __future__ import annotations

from .promql import RULES, atom, by, renamed, selector
from .recording import Recorded

# v0.4.0 labelled every series with its node as nodeName (from MY_NODE_NAME).
NODE_NAME = renamed("alnair_node_info", "nodeName", "node")
# Its cuda metrics named the pod pod_name; its cpu metrics named CPUs cpu0, cpu1...
POD_NAME = renamed("alnair_cuda_process_info", "pod_name", "pod")
USER_HZ = 100  # /proc/stat's tick: fixed at 100 by the kernel's ABI whatever CONFIG_HZ is (sysconf(_SC_CLK_TCK))


def with_node_name(expr: str) -> str:
    return f"{atom(expr)} * on (instance) group_left (nodeName) {NODE_NAME}"


def per_gpu_process(metric: str) -> str:
    """A per-process NVML ratio as v0.4.0's percentage (0-100), labelled by gpu_uuid instead of gpu and uuid."""
    percent = renamed(f"100 * {selector(RULES, metric)}", "gpu_uuid", "uuid")
    return with_node_name(f"max without (gpu, uuid) ({percent})")


def per_process(metric: str) -> str:
    """A per-device cuda series summed over the process's devices (v0.4.0 counted per process), with its pod."""
    summed = by(["instance", "job", "pid"], "sum", selector(RULES, metric))
    return with_node_name(f"{summed} * on (instance, pid) group_left (pod_name, namespace) {POD_NAME}")


CPU_TICKS = with_node_name(
    renamed(f'round({USER_HZ} * alnair_host_cpu_seconds_total{{mode=~"user|system|idle"}})', "cpu", "cpu", "cpu$1")
)

V04 = [
    Recorded(
        "alnair_gpu_util",
        per_gpu_process("alnair_nvml_process_sm_utilization_ratio"),
        "per process and GPU: SM utilization in percent (NVML's smUtil), labels pid, gpu_uuid, nodeName",
    ),
    Recorded(
        "alnair_gpu_mem_used",
        per_gpu_process("alnair_nvml_process_memory_utilization_ratio"),
        "per process and GPU: memory-controller utilization in percent (NVML's memUtil: what v0.4.0 served under "
        "this name, despite its help text), labels pid, gpu_uuid, nodeName",
    ),
    Recorded(
        "alnair_cuda_launch_kernel_cnt",
        per_process("alnair_cuda_kernel_launches_total"),
        "per process: kernel launches since it started (a counter), labels pid, pod_name, namespace, nodeName",
    ),
    Recorded(
        "alnair_cuda_mem_used",
        per_process("alnair_cuda_memory_used_bytes"),
        "per process: bytes of device memory its allocations hold, labels pid, pod_name, namespace, nodeName",
    ),
    Recorded(
        "alnair_cpustat_time_user_hertz_total",
        CPU_TICKS,
        "per CPU (cpu0, cpu1...) and mode (user, system, idle): time in USER_HZ ticks (1/100 s), a counter, label "
        "nodeName",
    ),
]

GROUPS = {"alnair-v04-compat": V04}
