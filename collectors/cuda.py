"""The cuda collector: per-process, per-device counters the CUDA intercept publishes in shared memory."""
from __future__ import annotations

from alnair.abi import layout
from alnair.abi.records import CudaProcess, device_uuid, kernel_key
from alnair.abi.segments import ParsedSegment
from alnair.exporter.plugin import ExpositionBuilder

from .shm.collector import SegmentCollector

# (metric, kind, help, field, scale): one row per exported device field.
DEVICE_FIELDS = [
    ("alnair_cuda_kernel_launches", "counter", "Kernel launches, every launch path.", "kernel_launches", 1),
    ("alnair_cuda_graph_launches", "counter", "CUDA graph launches.", "graph_launches", 1),
    ("alnair_cuda_memory_used_bytes", "gauge", "Device memory the process has allocated and not freed.", "bytes_in_use", 1),
    ("alnair_cuda_memory_peak_bytes", "gauge", "High-water mark of memory_used_bytes.", "peak_bytes", 1),
    ("alnair_cuda_allocations", "counter", "Successful device memory allocations.", "allocations", 1),
    ("alnair_cuda_allocation_failures", "counter", "Allocations the driver refused.", "failed_allocations", 1),
    ("alnair_cuda_allocations_denied", "counter", "Allocations refused by the memory limit.", "limit_denied_allocations", 1),
    ("alnair_cuda_throttled_seconds", "counter",
     "Time launches waited for a compute limit (a cap's or share's debt of GPU time; older writers: their window).",
     "throttled_ns", 1e-9),
]


def _seconds(ns: int) -> float:
    return ns / 1e9  # divided, not multiplied by 1e-9: a Unix time in ns keeps its last digits


# (metric, help, field, unit): per device and direction, from the record's per-device extensions.
COPY_FIELDS = [
    ("alnair_cuda_copies", "Memory copies the driver accepted, by direction (a batch counts each copy).", "copies", int),
    ("alnair_cuda_copy_bytes", "Bytes of those copies, by direction.", "bytes", int),
    ("alnair_cuda_sync_copy_seconds",
     "Time the program spent inside synchronous copy calls, by direction (asynchronous copies are not timed).",
     "sync_ns", _seconds),
]
# (metric, help, field): per process, in seconds, absent until the event.
ACTIVITY_FIELDS = [
    ("alnair_cuda_time_to_first_launch_seconds", "From process start to its first kernel or graph launch.",
     "first_launch_ns"),
    ("alnair_cuda_time_to_first_allocation_seconds", "From process start to its first device memory allocation.",
     "first_allocation_ns"),
    ("alnair_cuda_last_launch_timestamp_seconds",
     "When the process last launched a kernel or graph, to within its publish period (10 ms by default).",
     "last_launch_time_ns"),
]

# Per device, from writers that measure them (the GPU's share table tells each process who else is busy on the GPU).
GPU_TIME_HELP = ("GPU time the process got on the GPU: its busy time, each moment divided among the processes busy on "
                 "the GPU then.")
GPU_BUSY_HELP = "Time the process had work queued or running on the GPU, shared or not."

# (metric, help, field): per device, from the record's per-device memory fields (absent for older writers).
MEMORY_FIELDS = [
    ("alnair_cuda_pool_reserved_bytes",
     "Device memory the stream-ordered pools the process allocates from hold reserved (handed out or cached).",
     "pool_reserved_bytes"),
    ("alnair_cuda_pool_used_bytes", "Of the pools' reservation, what is handed out to allocations.", "pool_used_bytes"),
    ("alnair_cuda_memory_charged_bytes",
     "What the memory limit is checked against: allocations plus the pools' cached memory, plus the context "
     "memory when the limit includes it.", "charged_bytes"),
]


class CudaCollector(SegmentCollector):
    help = "Per-process CUDA counters (launches, memory, copies, limits, GPU time) from the intercept's shared memory."
    kind = layout.KIND_CUDA

    def record_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[CudaProcess]]) -> None:
        rows = [(self._device_labels(p, d), d) for p in processes for d in p.record.devices]
        for metric, kind, text, field, scale in DEVICE_FIELDS:
            out.family(metric, kind, text, ((labels, getattr(d, field) * scale) for labels, d in rows))
        out.family("alnair_cuda_memory_limit_bytes", "gauge", "Memory limit set for the process (absent: none).",
                   ((labels, d.memory_limit_bytes) for labels, d in rows if d.memory_limit_bytes))
        out.family("alnair_cuda_compute_limit_ratio", "gauge",
                   "The process's compute cap: the most of the GPU's time it may use (absent: none).",
                   ((labels, d.compute_limit_percent / 100) for labels, d in rows if d.compute_limit_percent))
        out.family("alnair_cuda_compute_share_ratio", "gauge",
                   "The process's compute share: the least of the GPU's time it gets while others want the GPU, idle "
                   "time lent (absent: none).",
                   ((labels, d.compute_share_percent / 100) for labels, d in rows if d.compute_share_percent))
        out.family("alnair_cuda_compute_quota_ratio", "gauge",
                   "Only from writers before the GPU-time limits: the share of each scheduling period the process may "
                   "launch in now (its turns' window).",
                   ((labels, d.compute_quota_ns / d.compute_period_ns) for labels, d in rows if d.compute_period_ns))
        self._gpu_time_families(out, processes)
        self._copy_families(out, processes)
        self._memory_families(out, processes)
        self._activity_families(out, processes)
        self._kernel_families(out, processes)

    def _device_labels(self, p: ParsedSegment[CudaProcess], d: layout.CudaDevice) -> str:
        """The label set of the process's series for device `d`, the same in every per-device family."""
        pid, uuid = p.segment.pid_label, device_uuid(d)
        key = (p.segment.name, pid, d.device_index, uuid)
        return self.labels.get(key, {"pid": pid, "gpu": str(d.device_index), "uuid": uuid})

    def _gpu_time_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[CudaProcess]]) -> None:
        """GPU time and busy time of the devices whose writer measures them (flag CUDA_DEVICE_GPU_TIME, set only by
        writers that publish the extensions too); none for the others, whose zeros would be claims never made."""
        rows = [(self._device_labels(p, d), d, ext) for p in processes
                for d, ext in zip(p.record.devices, p.record.devices_ext or ()) if d.flags & layout.CUDA_DEVICE_GPU_TIME]
        out.family("alnair_cuda_gpu_time_seconds", "counter", GPU_TIME_HELP,
                   ((labels, _seconds(d.gpu_time_ns)) for labels, d, _ in rows))
        out.family("alnair_cuda_gpu_busy_seconds", "counter", GPU_BUSY_HELP,
                   ((labels, _seconds(ext.busy_ns)) for labels, _, ext in rows))

    def _memory_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[CudaProcess]]) -> None:
        """Pools, what the limit charges, and the contexts' own memory (absent until measured); none for a
        writer older than these fields."""
        rows = [(self._device_labels(p, d), d, m) for p in processes
                for d, m in zip(p.record.devices, p.record.devices_memory or ())]
        out.family("alnair_cuda_context_memory_bytes", "gauge",
                   "Device memory the process's contexts hold themselves (no allocation shows it), as measured when "
                   "each was created (absent: not measured).",
                   ((labels, m.context_bytes) for labels, _, m in rows if m.context_bytes))
        for metric, text, field in MEMORY_FIELDS:
            out.family(metric, "gauge", text, ((labels, getattr(m, field)) for labels, _, m in rows))
        out.family("alnair_cuda_memory_limit_includes_context", "gauge",
                   "1 if the memory limit charges the context memory too (ALNAIR_MEMORY_LIMIT_INCLUDES_CONTEXT), "
                   "else 0 (absent: no memory limit).",
                   ((labels, m.flags & layout.CUDA_LIMIT_INCLUDES_CONTEXT) for labels, d, m in rows
                    if d.memory_limit_bytes))

    def _copy_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[CudaProcess]]) -> None:
        """Every direction of every device, 0 until it copies; none for a writer older than the counters."""
        rows = []
        for p in processes:
            pid = p.segment.pid_label
            for d, ext in zip(p.record.devices, p.record.devices_ext or ()):
                uuid = device_uuid(d)
                for direction, name in enumerate(layout.COPY_DIRECTION_NAMES):
                    key = (p.segment.name, pid, d.device_index, uuid, name)
                    labels = {"pid": pid, "gpu": str(d.device_index), "uuid": uuid, "direction": name}
                    rows.append((self.labels.get(key, labels), ext.copies[direction]))
        for metric, text, field, unit in COPY_FIELDS:
            out.family(metric, "counter", text, ((labels, unit(getattr(c, field))) for labels, c in rows))

    def _activity_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[CudaProcess]]) -> None:
        """Each time once its event has happened (0 in the record: not yet); none for a writer older than them."""
        rows = [(self.labels.get((p.segment.name, p.segment.pid_label), {"pid": p.segment.pid_label}), p.record.activity)
                for p in processes if p.record.activity is not None]
        for metric, text, field in ACTIVITY_FIELDS:
            out.family(metric, "gauge", text, ((labels, _seconds(getattr(a, field))) for labels, a in rows if getattr(a, field)))

    def _kernel_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[CudaProcess]]) -> None:
        """The kernel table's rows: at most 32 named kernels a process (ALNAIR_KERNEL_NAMES_TOP, default 20) and one
        OTHER row per device, so the series stay bounded whatever a job launches; none for a writer older than it."""
        rows = []
        for p in processes:
            pid, devices = p.segment.pid_label, {d.device_index: d for d in p.record.devices}
            for k in p.record.kernels or ():
                gpu, name = kernel_key(k)
                uuid = device_uuid(devices[gpu])
                labels = {"pid": pid, "gpu": str(gpu), "uuid": uuid, "kernel": name}
                rows.append((self.labels.get((p.segment.name, pid, gpu, uuid, "kernel", name), labels), k.launches))
        out.family("alnair_cuda_kernel_launches_by_name", "counter",
                   'Kernel launches by kernel name (demangled where the process has a C++ runtime): the process\'s most '
                   'launched kernels, and each device\'s other kernels as kernel="(other)". CUDA graphs\' kernels are '
                   'not in it.', rows)
