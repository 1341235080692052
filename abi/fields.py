"""What each record field is to readers: the metric family it is served as (one line each), or why it is served by
no line. The header says where a field lies; this table says what it means on /metrics, and the collectors build
their families from it. tests/abi/test_field_table.py checks it against the header field by field."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from . import layout

NS = 1e9  # a unit: nanoseconds served as seconds
PERCENT = 100  # a unit: a percentage served as a ratio

# A row of a struct's samples: its label set (escaped, label_set()), the struct, and its device's entry (cuda kinds).
Row = tuple[str, Any, Any]


def gpu_time_measured(device) -> bool:
    """The writer measures GPU time on the device; older writers leave gpu_time_ns and busy_ns 0, unflagged."""
    return bool(device.flags & layout.CUDA_DEVICE_GPU_TIME)


def memory_limited(device) -> bool:
    """The device has a memory limit: what only then means something is absent elsewhere."""
    return device.memory_limit_bytes != 0


@dataclass(frozen=True)
class Exported:
    """One field served as one family: the field's value divided by `unit` (a number, or the name of another field of
    the struct, the series then absent where that field is 0); with `bit`, 1 where the flags field has it, else 0."""

    struct: str
    field: str
    family: str  # counters without _total: ExpositionBuilder adds it
    type: str  # "counter" or "gauge"
    help: str
    unit: float | str = 1
    bit: int = 0
    absent_at_zero: bool = False  # 0 means not set, not measured or not yet
    only_where: Callable[[Any], bool] | None = None  # a test of the device's entry: elsewhere absent

    def samples(self, rows: Iterable[Row]) -> Iterator[tuple[str, float]]:
        if self.unit == 1 and not (self.bit or self.absent_at_zero or self.only_where):
            get = attrgetter(self.field)  # the common case, at the cost of one C call a row
            return ((labels, get(entry)) for labels, entry, _ in rows)
        return ((labels, value) for labels, entry, device in rows if (value := self.value(entry, device)) is not None)

    def value(self, entry, device) -> float | None:
        raw = getattr(entry, self.field)
        if (self.absent_at_zero and not raw) or (self.only_where and not self.only_where(device)):
            return None
        if self.bit:
            return int(bool(raw & self.bit))
        if isinstance(self.unit, str):
            divisor = getattr(entry, self.unit)
            return raw / divisor if divisor else None
        return raw if self.unit == 1 else raw / self.unit  # divided, not multiplied by 1e-9: correctly rounded


# The labels of each struct's series, as the collectors make them.
LABELS = {
    "alnair_cuda_device": ("pid", "gpu", "uuid"),
    "alnair_cuda_device_ext": ("pid", "gpu", "uuid"),
    "alnair_cuda_copy": ("pid", "gpu", "uuid", "direction"),
    "alnair_cuda_device_memory": ("pid", "gpu", "uuid"),
    "alnair_cuda_activity": ("pid",),
    "alnair_cuda_kernel": ("pid", "gpu", "uuid", "kernel"),
    "alnair_python_record": ("pid",),
    "alnair_python_counter": ("pid", "name"),
    "alnair_python_phase": ("pid", "name"),
}

# fmt: off
# In the order served; a struct's rows come from its collector.
EXPORTED = [
    Exported("alnair_cuda_device", "kernel_launches", "alnair_cuda_kernel_launches", "counter",
             "Kernel launches, every launch path."),
    Exported("alnair_cuda_device", "graph_launches", "alnair_cuda_graph_launches", "counter", "CUDA graph launches."),
    Exported("alnair_cuda_device", "bytes_in_use", "alnair_cuda_memory_used_bytes", "gauge",
             "Device memory the process has allocated and not freed."),
    Exported("alnair_cuda_device", "peak_bytes", "alnair_cuda_memory_peak_bytes", "gauge",
             "High-water mark of memory_used_bytes."),
    Exported("alnair_cuda_device", "allocations", "alnair_cuda_allocations", "counter",
             "Successful device memory allocations."),
    Exported("alnair_cuda_device", "failed_allocations", "alnair_cuda_allocation_failures", "counter",
             "Allocations the driver refused."),
    Exported("alnair_cuda_device", "limit_denied_allocations", "alnair_cuda_allocations_denied", "counter",
             "Allocations refused by the memory limit."),
    Exported("alnair_cuda_device", "throttled_ns", "alnair_cuda_throttled_seconds", "counter",
             "Time launches waited for a compute limit (a cap's or share's debt of GPU time; older writers: their "
             "window).", unit=NS),
    Exported("alnair_cuda_device", "memory_limit_bytes", "alnair_cuda_memory_limit_bytes", "gauge",
             "Memory limit set for the process (absent: none).", absent_at_zero=True),
    Exported("alnair_cuda_device", "compute_limit_percent", "alnair_cuda_compute_limit_ratio", "gauge",
             "The process's compute cap: the most of the GPU's time it may use (absent: none).", unit=PERCENT,
             absent_at_zero=True),
    Exported("alnair_cuda_device", "compute_share_percent", "alnair_cuda_compute_share_ratio", "gauge",
             "The process's compute share: the least of the GPU's time it gets while others want the GPU, idle time "
             "lent (absent: none).", unit=PERCENT, absent_at_zero=True),
    Exported("alnair_cuda_device", "compute_quota_ns", "alnair_cuda_compute_quota_ratio", "gauge",
             "Only from writers before the GPU-time limits: the share of each scheduling period the process may "
             "launch in now (its turns' window).", unit="compute_period_ns"),
    Exported("alnair_cuda_device", "gpu_time_ns", "alnair_cuda_gpu_time_seconds", "counter",
             "GPU time the process got on the GPU: its busy time, each moment divided among the processes busy on the "
             "GPU then, scaled to the time the GPU says it was busy.", unit=NS, only_where=gpu_time_measured),
    Exported("alnair_cuda_device_ext", "busy_ns", "alnair_cuda_gpu_busy_seconds", "counter",
             "Time the process had work queued or running on the GPU, shared or not.", unit=NS,
             only_where=gpu_time_measured),
    Exported("alnair_cuda_copy", "copies", "alnair_cuda_copies", "counter",
             "Memory copies the driver accepted, by direction (a batch counts each copy)."),
    Exported("alnair_cuda_copy", "bytes", "alnair_cuda_copy_bytes", "counter", "Bytes of those copies, by direction."),
    Exported("alnair_cuda_copy", "sync_ns", "alnair_cuda_sync_copy_seconds", "counter",
             "Time the program spent inside synchronous copy calls, by direction (asynchronous copies are not timed).",
             unit=NS),
    Exported("alnair_cuda_device_memory", "context_bytes", "alnair_cuda_context_memory_bytes", "gauge",
             "Device memory the process's contexts hold themselves (no allocation shows it), as measured when each "
             "was created (absent: not measured).", absent_at_zero=True),
    Exported("alnair_cuda_device_memory", "context_growth_bytes", "alnair_cuda_context_memory_growth_bytes", "gauge",
             "Of the contexts' memory, what they grew by after their creation (modules loaded lazily), as NVML shows "
             "it; read under a memory limit only (absent: none seen).", absent_at_zero=True),
    Exported("alnair_cuda_device_memory", "pool_reserved_bytes", "alnair_cuda_pool_reserved_bytes", "gauge",
             "Device memory the stream-ordered pools the process allocates from hold reserved (handed out or "
             "cached)."),
    Exported("alnair_cuda_device_memory", "pool_used_bytes", "alnair_cuda_pool_used_bytes", "gauge",
             "Of the pools' reservation, what is handed out to allocations."),
    Exported("alnair_cuda_device_memory", "charged_bytes", "alnair_cuda_memory_charged_bytes", "gauge",
             "What the memory limit is checked against: allocations plus the pools' cached memory, plus the context "
             "memory when the limit includes it."),
    Exported("alnair_cuda_device_memory", "flags", "alnair_cuda_memory_limit_includes_context", "gauge",
             "1 if the memory limit charges the context memory too (ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT), else 0 "
             "(absent: no memory limit).", bit=layout.CUDA_LIMIT_INCLUDES_CONTEXT, only_where=memory_limited),
    Exported("alnair_cuda_activity", "first_launch_ns", "alnair_cuda_time_to_first_launch_seconds", "gauge",
             "From process start to its first kernel or graph launch.", unit=NS, absent_at_zero=True),
    Exported("alnair_cuda_activity", "first_allocation_ns", "alnair_cuda_time_to_first_allocation_seconds", "gauge",
             "From process start to its first device memory allocation.", unit=NS, absent_at_zero=True),
    Exported("alnair_cuda_activity", "last_launch_time_ns", "alnair_cuda_last_launch_timestamp_seconds", "gauge",
             "When the process last launched a kernel or graph, to within its publish period (10 ms by default).",
             unit=NS, absent_at_zero=True),
    Exported("alnair_cuda_kernel", "launches", "alnair_cuda_kernel_launches_by_name", "counter",
             "Kernel launches by kernel name (demangled where the process has a C++ runtime): the process's most "
             "launched kernels, and each device's other kernels as kernel=\"(other)\". CUDA graphs' kernels are not "
             "in it."),
    Exported("alnair_python_record", "steps", "alnair_python_steps", "counter",
             "Training steps: batches training loops took from their DataLoaders."),
    Exported("alnair_python_record", "samples", "alnair_python_samples", "counter",
             "Items in those batches (their leading dimension)."),
    Exported("alnair_python_record", "epochs", "alnair_python_epochs", "counter",
             "Training loops that ran their DataLoader to the end."),
    Exported("alnair_python_record", "optimizer_steps", "alnair_python_optimizer_steps", "counter",
             "Completed torch.optim optimizer steps."),
    Exported("alnair_python_record", "data_wait_ns", "alnair_python_data_wait_seconds", "counter",
             "Time training loops waited for their next batch (the data stall).", unit=NS),
    Exported("alnair_python_record", "step_ns", "alnair_python_step_seconds", "counter",
             "Time in training steps, data wait included: stall fraction = data_wait / step.", unit=NS),
    Exported("alnair_python_record", "first_step_ns", "alnair_python_time_to_first_step_seconds", "gauge",
             "From process start to its first training step (absent before it).", unit=NS, absent_at_zero=True),
    Exported("alnair_python_record", "flags", "alnair_python_dataloader_worker", "gauge",
             "1 for a DataLoader worker process, 0 otherwise.", bit=layout.PYTHON_DATALOADER_WORKER),
    Exported("alnair_python_counter", "value", "alnair_python_custom", "counter",
             "Custom counts: alnair.counter(name).inc()."),
    Exported("alnair_python_phase", "total_ns", "alnair_python_phase_seconds", "counter",
             "Time inside `with alnair.phase(name)` blocks.", unit=NS),
    Exported("alnair_python_phase", "count", "alnair_python_phase_completions", "counter",
             "Completed `with alnair.phase(name)` blocks."),
]
# fmt: on

# Fields no line serves, and why. Fields named reserved or reserved<N> are space for fields to come, always 0.
NOT_EXPORTED = {
    ("alnair_shm_header", "magic"): "checked by the reader (abi/segments.py)",
    ("alnair_shm_header", "abi_version"): "checked by the reader",
    ("alnair_shm_header", "header_size"): "checked by the reader",
    ("alnair_shm_header", "record_kind"): "checked by the reader",
    ("alnair_shm_header", "record_size"): "checked by the reader: how much of the record the writer has",
    ("alnair_shm_header", "writer_pid"): "identity: the pid label where the lock's holder is not visible",
    ("alnair_shm_header", "flags"): "reserved, 0",
    ("alnair_shm_header", "pid_namespace_inode"): "identity: the pid_namespace label of process_info",
    ("alnair_shm_header", "start_time_ticks"): "identity: process_start_time_seconds, every kind alike",
    ("alnair_shm_header", "seq"): "the seqlock (abi/segments.py)",
    ("alnair_shm_header", "update_time_ns"): "last_update_timestamp_seconds, every kind alike (collectors/shm)",
    ("alnair_shm_header", "pod_uid"): "identity: a label of process_info",
    ("alnair_shm_header", "container_id"): "identity: a label of process_info",
    ("alnair_shm_header", "comm"): "identity: a label of process_info",
    ("alnair_cuda_record", "device_count"): "a count: devices[0 .. device_count) are valid",
    ("alnair_cuda_record", "max_devices"): "the table's size, checked by the parser",
    ("alnair_cuda_device", "device_index"): "the gpu label",
    ("alnair_cuda_device", "flags"): "bits: MIG makes the uuid label MIG-..., GPU_TIME gates the GPU time lines",
    ("alnair_cuda_device", "uuid"): "the uuid label",
    ("alnair_cuda_device", "compute_period_ns"): "the unit of compute_quota_ns",
    ("alnair_cuda_kernels", "count"): "a count: kernels[0 .. count) are valid",
    ("alnair_cuda_kernel", "name"): "the kernel label",
    ("alnair_cuda_kernel", "device_index"): "the gpu label",
    ("alnair_cuda_kernel", "flags"): "bit OTHER: the kernel label (other)",
    ("alnair_python_record", "counter_count"): "a count: counters[0 .. counter_count) are valid",
    ("alnair_python_record", "phase_count"): "a count: phases[0 .. phase_count) are valid",
    ("alnair_python_record", "max_counters"): "the table's size",
    ("alnair_python_record", "max_phases"): "the table's size",
    ("alnair_python_counter", "name"): "the name label",
    ("alnair_python_phase", "name"): "the name label",
}

# Structs no reader serves: the GPU share table is between writers.
WRITERS_ONLY = ("alnair_share_slot", "alnair_share_busy", "alnair_share_table")


def families(rows: Mapping[str, list[Row]]) -> Iterator[tuple[str, str, str, Iterator[tuple[str, float]]]]:
    """(name, type, help, samples) of each family served from the structs in `rows`, in the table's order: what
    ExpositionBuilder.family takes."""
    for line in EXPORTED:
        if line.struct in rows:
            yield line.family, line.type, line.help, line.samples(rows[line.struct])
