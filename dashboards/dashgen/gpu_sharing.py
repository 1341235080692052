"""GPU sharing: which pods share each GPU and each one's share of its time, and per pod and process what NVML and the
CUDA intercept see: SM utilization, memory against its limit (allocations, pool caches and contexts, as the GPU holds
them), the compute cap and share and the time launches waited for them, denied allocations, launch rates, copies,
and which processes are starting up or idle."""

from __future__ import annotations

from . import variables as v
from .model import Dashboard, Query, row, state_timeline, table, timeseries
from .promql import DASHBOARD as S, GPU, NODE, by, gpu_time_share, memory_of_limit, rate, selector, with_node, with_pod

PROCESS = "{{namespace}}/{{pod}} pid {{pid}} GPU {{gpu}}"
KERNEL_NAMED = 'kernel!="(other)"'  # the named rows; (other) sums the rest of a device's launches
# Every process holding memory on a GPU has this series (0 when it ran nothing), intercepted or not.
ON_GPU = with_node(S, with_pod(S, selector(S, "alnair_nvml_process_sm_utilization_ratio", GPU), "nvml"))
POD_ON_GPU = by(["node", "gpu", "uuid", "namespace", "pod"], "count", ON_GPU)


def cuda(metric: str, legend: str = PROCESS) -> Query:
    return Query(with_pod(S, selector(S, metric, GPU), "cuda"), legend)


def cuda_rate(metric: str, legend: str = PROCESS) -> Query:
    return Query(with_pod(S, rate(S, metric, GPU), "cuda"), legend)


SHARING = row(
    "Who shares a GPU",
    table(
        "Pods on each GPU",
        "Each pod with processes on a GPU, and how many (Value), from NVML: every process "
        "holding device memory, under the intercept or not.",
        "none",
        Query(POD_ON_GPU),
        hidden_columns=("Time",),
    ),
    timeseries(
        "Pods per GPU",
        "Distinct pods with processes on each GPU: above 1, the GPU is shared.",
        "none",
        Query(by(["node", "gpu", "uuid"], "count", POD_ON_GPU), "{{node}} GPU {{gpu}}"),
        min=0,
    ),
    timeseries(
        "GPU time share by pod",
        "Per GPU, each pod's share of the GPU's time: the GPU time of its processes "
        "under the intercept, each moment of the GPU divided among the processes busy on it then. On a "
        "time-sliced GPU the pods' shares add up to the share of the time it was busy (at most 100%), which "
        "NVML's per-process utilization cannot divide. Absent for processes outside the intercept and writers "
        "older than GPU time.",
        "percentunit",
        Query(gpu_time_share(S), "{{namespace}}/{{pod}} GPU {{uuid}}"),
        min=0,
        max=1,
        width=24,
    ),
)

COMPUTE = row(
    "Compute",
    timeseries(
        "SM utilization per process",
        "NVML's per-process SM utilization (mean of its samples since the last "
        "one). NVML samples one process at a time and does not divide a time-sliced GPU fairly: for each pod's "
        "share of a GPU read GPU time share by pod, and the compute cap, share and throttled share beside it.",
        "percentunit",
        Query(with_pod(S, selector(S, "alnair_nvml_process_sm_utilization_ratio", GPU), "nvml"), PROCESS),
        min=0,
        max=1,
    ),
    timeseries(
        "Compute cap, share and throttled share",
        "The process's compute cap (ALNAIR_COMPUTE_LIMIT: never more "
        "than this share of the GPU's time) and share (ALNAIR_COMPUTE_SHARE: at least this while others want "
        "the GPU, idle time lent), each absent where not set; and the share of the time its launches waited "
        "while it owed GPU time past either (both are debts on its GPU time, docs/intercept.md, Limits).",
        "percentunit",
        cuda("alnair_cuda_compute_limit_ratio", f"{PROCESS} cap"),
        cuda("alnair_cuda_compute_share_ratio", f"{PROCESS} share"),
        cuda_rate("alnair_cuda_throttled_seconds_total", f"{PROCESS} throttled"),
        min=0,
    ),
    timeseries(
        "Kernel and graph launches",
        "Kernel and CUDA graph launches per second through the intercept. A pod "
        "whose launches fall while its data stall rises is starved by its input (Training dashboard).",
        "ops",
        cuda_rate("alnair_cuda_kernel_launches_total", f"{PROCESS} kernels"),
        cuda_rate("alnair_cuda_graph_launches_total", f"{PROCESS} graphs"),
        min=0,
        width=24,
    ),
    table(
        "Kernels launched most",
        "The 20 kernels launched most often per second over the window, by process and "
        "GPU: each process publishes its most launched kernels by name (ALNAIR_KERNEL_NAMES_TOP, default 20; "
        "demangled where it has a C++ runtime) and the rest as (other), left out here (docs/metrics.md, Kernels by "
        "name). CUDA graphs' kernels are not seen.",
        "ops",
        Query(
            f"topk(20, {with_pod(S, rate(S, 'alnair_cuda_kernel_launches_by_name_total', GPU, KERNEL_NAMED), 'cuda')})"
        ),
        hidden_columns=("Time", "instance", "job", "uuid"),
        width=24,
    ),
)

DEVICE_MEMORY = ("instance", "pid", "gpu", "uuid")  # one series per process and device in every cuda memory family
USED = selector(S, "alnair_cuda_memory_used_bytes", GPU)
# reserved by pools, handed out to no allocation
POOL_CACHE = (
    f"{selector(S, 'alnair_cuda_pool_reserved_bytes', GPU)} - {selector(S, 'alnair_cuda_pool_used_bytes', GPU)}"
)
WITH_POOLS = f"{USED} + {POOL_CACHE}"
# The contexts' memory, 0 where it was not measured (a writer with the memory fields always has the pool series).
CONTEXT = (
    f"({selector(S, 'alnair_cuda_context_memory_bytes', GPU)} or 0 * "
    f"{selector(S, 'alnair_cuda_pool_reserved_bytes', GPU)})"
)
INCLUDES_CONTEXT = selector(S, "alnair_cuda_memory_limit_includes_context", GPU)
# The limit with a `context` label saying whether it charges the contexts' memory
# (ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT).
CONTEXT_CHARGED = (
    f'label_replace({INCLUDES_CONTEXT} == 1, "context", "charged", "", "") or '
    f'label_replace({INCLUDES_CONTEXT} == 0, "context", "not charged", "", "") + 1'
)
LIMIT = (
    f"{selector(S, 'alnair_cuda_memory_limit_bytes', GPU)} * on ({', '.join(DEVICE_MEMORY)}) "
    f"group_left (context) ({CONTEXT_CHARGED})"
)

MEMORY = row(
    "Memory",
    timeseries(
        "Device memory as the GPU holds it, beside its limit",
        "Each line adds one part to the line below it: "
        "the process's allocations; + what its stream-ordered pools (cudaMallocAsync, custom pools) hold cached "
        "for no allocation; + the memory its contexts hold themselves, which no allocation shows (what the GPU "
        "holds for it, as nvidia-smi shows it apart from a context's growth after creation). Dashed: what the "
        "memory limit is checked against (charged) and the limit, whose legend says whether it charges the "
        "contexts (ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT): charged meets the top line when it does, the pool "
        "line when not, and then the GPU may hold the limit plus the contexts.",
        "bytes",
        Query(with_pod(S, USED, "cuda"), f"{PROCESS} allocations"),
        Query(with_pod(S, WITH_POOLS, "cuda"), f"{PROCESS} + pool cache"),
        Query(with_pod(S, f"{WITH_POOLS} + {CONTEXT}", "cuda"), f"{PROCESS} + contexts"),
        Query(
            with_pod(S, selector(S, "alnair_cuda_memory_charged_bytes", GPU), "cuda"), f"{PROCESS} charged", line=True
        ),
        Query(with_pod(S, LIMIT, "cuda"), f"{PROCESS} limit, contexts {{{{context}}}}", line=True),
        min=0,
        fill_opacity=10,
        width=24,
    ),
    timeseries(
        "Memory used against its limit",
        "Device memory the process's allocations hold through the intercept, "
        "beside its ALNAIR_MEMORY_LIMIT (absent without a limit).",
        "bytes",
        cuda("alnair_cuda_memory_used_bytes", f"{PROCESS} used"),
        cuda("alnair_cuda_memory_limit_bytes", f"{PROCESS} limit"),
        min=0,
    ),
    timeseries(
        "Share of its memory limit in use",
        "Memory in use over ALNAIR_MEMORY_LIMIT; allocations past 100% are "
        "denied. The AlnairProcessNearMemoryLimit alert fires above its threshold.",
        "percentunit",
        Query(memory_of_limit(S), PROCESS),
        min=0,
        max=1,
    ),
    timeseries(
        "Allocations denied and failed",
        "Allocations per second the intercept denied because they would pass "
        "the memory limit, and those the driver failed (out of memory).",
        "ops",
        cuda_rate("alnair_cuda_allocations_denied_total", f"{PROCESS} denied"),
        cuda_rate("alnair_cuda_allocation_failures_total", f"{PROCESS} failed"),
        min=0,
    ),
    timeseries(
        "GPU memory per process (NVML)",
        "Device memory NVML reports each process holds, intercepted or not "
        "(absent where NVML hides it: MIG without privileges).",
        "bytes",
        Query(with_pod(S, selector(S, "alnair_nvml_process_memory_used_bytes", GPU), "nvml"), PROCESS),
        min=0,
    ),
)

PER_PROCESS = "{{namespace}}/{{pod}} pid {{pid}}"
IDLE_AFTER = 60  # seconds without a launch before a process is idle, as `alnair top --idle-after` has it
ACTIVE, STARTING, IDLE = 0, 1, 2
ACTIVITY = {ACTIVE: ("active", "green"), STARTING: ("starting up", "blue"), IDLE: ("idle", "orange")}
# Starting up: a writer that publishes its activity (those with the copy counters do: they came after it) and has
# launched nothing yet. Launched: idle once its latest launch is IDLE_AFTER old. Exited writers' records left out.
STARTING_UP = (
    f"{STARTING} * group by (instance, job, pid) ({selector(S, 'alnair_cuda_copies_total', NODE)}) "
    f"unless on (instance, pid) {selector(S, 'alnair_cuda_time_to_first_launch_seconds', NODE)}"
)
LAUNCHED = f"{IDLE} * (time() - {selector(S, 'alnair_cuda_last_launch_timestamp_seconds', NODE)} > bool {IDLE_AFTER})"
PROCESS_STATE = (
    f"({STARTING_UP} or {LAUNCHED}) "
    f"unless on (instance, pid) {selector(S, 'alnair_cuda_process_exited_timestamp_seconds', NODE)}"
)

COPIES = row(
    "Copies and activity",
    timeseries(
        "Copy throughput per pod",
        "Bytes per second all of a pod's processes copied through the intercept, by "
        "direction: host-to-device bytes are its input reaching the GPU.",
        "Bps",
        Query(
            by(
                ["namespace", "pod", "direction"],
                "sum",
                with_pod(S, rate(S, "alnair_cuda_copy_bytes_total", GPU), "cuda"),
            ),
            "{{namespace}}/{{pod}} {{direction}}",
        ),
        min=0,
    ),
    state_timeline(
        "Processes starting up or idle",
        f"Each process under the intercept: starting up until its first "
        f"kernel or graph launch, idle once it has launched nothing for {IDLE_AFTER} s, else active. A pod "
        "long in starting up is slow to reach the GPU (its start-up times are beside); one idle while "
        "holding GPU memory keeps it from others.",
        Query(with_pod(S, PROCESS_STATE, "cuda"), PER_PROCESS),
        states=ACTIVITY,
    ),
    timeseries(
        "Copy throughput per process",
        "Bytes per second each process copied through the intercept, by "
        "direction (host to device, device to host, device to device), on the destination's GPU for peer "
        "copies. Host-to-device bytes are a training job's input: compare with its data stall (Training).",
        "Bps",
        cuda_rate("alnair_cuda_copy_bytes_total", f"{PROCESS} {{{{direction}}}}"),
        min=0,
    ),
    timeseries(
        "Time in synchronous copies",
        "Share of each second a process spent in copies that block it "
        "(cuMemcpy without Async); PyTorch copies asynchronously, so 0 there is expected.",
        "percentunit",
        cuda_rate("alnair_cuda_sync_copy_seconds_total", f"{PROCESS} {{{{direction}}}}"),
        min=0,
    ),
    timeseries(
        "Since the last kernel launch",
        "Seconds since each process last launched a kernel or graph: a "
        "process holding a GPU with a growing value is idle (or stuck).",
        "s",
        Query(
            with_pod(S, f"time() - {selector(S, 'alnair_cuda_last_launch_timestamp_seconds', NODE)}", "cuda"),
            PER_PROCESS,
        ),
        min=0,
    ),
    timeseries(
        "Start-up: time to first allocation and launch",
        "Seconds from each process's start to its first "
        "device allocation and its first kernel launch: how long a job spends starting before the GPU "
        "works (absent until it has done either).",
        "s",
        Query(
            with_pod(S, selector(S, "alnair_cuda_time_to_first_allocation_seconds", NODE), "cuda"),
            f"{PER_PROCESS} first allocation",
        ),
        Query(
            with_pod(S, selector(S, "alnair_cuda_time_to_first_launch_seconds", NODE), "cuda"),
            f"{PER_PROCESS} first launch",
        ),
        min=0,
    ),
)

DASHBOARD = Dashboard(
    "alnair-gpu-sharing",
    "Alnair / GPU sharing",
    "Which pods share each GPU and the share of its time each got, and per process: utilization, memory as the GPU "
    "holds it against its limit, compute cap, share and throttling, copies, and which processes are starting up or "
    "idle.",
    (v.DATASOURCE, v.NODE, v.INSTANCE, v.namespace("cuda", "nvml"), v.pod("cuda", "nvml"), v.GPU),
    (SHARING, COMPUTE, MEMORY, COPIES),
)
