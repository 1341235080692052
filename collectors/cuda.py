"""The cuda collector: per-process, per-device counters the CUDA intercept publishes in shared memory."""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from alnair.exporter.collector import Collector

from .shm import layout
from .shm.metrics import boot_time_seconds, directory_metrics
from .shm.segments import MalformedRecord, ParsedSegment, Segment, SegmentDirectory

DEVICE_LABELS = ["pid", "gpu", "uuid"]

# (metric suffix, help, counter?, field, scale): one row per exported device field.
DEVICE_FIELDS = [
    ("kernel_launches", "Kernel launches, every launch path.", True, "kernel_launches", 1),
    ("graph_launches", "CUDA graph launches.", True, "graph_launches", 1),
    ("memory_used_bytes", "Device memory the process has allocated and not freed.", False, "bytes_in_use", 1),
    ("memory_peak_bytes", "High-water mark of memory_used_bytes.", False, "peak_bytes", 1),
    ("allocations", "Successful device memory allocations.", True, "allocations", 1),
    ("allocation_failures", "Allocations the driver refused.", True, "failed_allocations", 1),
    ("allocations_denied", "Allocations refused by the memory limit.", True, "limit_denied_allocations", 1),
    ("compute_tokens_available", "Level of the compute-limit token bucket.", False, "tokens_available", 1),
    ("throttled_seconds", "Time launches waited for compute-limit tokens.", True, "throttled_ns", 1e-9),
]


@dataclass(frozen=True)
class CudaProcess:
    devices: list[layout.CudaDevice]


def parse_cuda_record(segment: Segment) -> CudaProcess:
    record = segment.record
    if len(record) < layout.CUDA_DEVICES_OFFSET:
        raise MalformedRecord("record shorter than its fixed part")
    count, max_devices = struct.unpack_from("<II", record)
    if count > min(max_devices, layout.CUDA_MAX_DEVICES):
        raise MalformedRecord(f"device_count {count} over max_devices {max_devices}")
    if len(record) < layout.CUDA_DEVICES_OFFSET + count * layout.CUDA_DEVICE_SIZE:
        raise MalformedRecord(f"device_count {count} does not fit the record")
    return CudaProcess(
        [
            layout.CudaDevice.from_buffer_copy(record, layout.CUDA_DEVICES_OFFSET + i * layout.CUDA_DEVICE_SIZE)
            for i in range(count)
        ]
    )


def pid_label(segment: Segment) -> str:
    """The pid as this exporter (hostPID in Kubernetes) sees it; a writer in a pid
    namespace we cannot see keeps its own pid, qualified so it cannot collide."""
    if segment.holder_pid > 0:
        return str(segment.holder_pid)
    return f"{segment.header.writer_pid}@{segment.header.pid_namespace_inode}"


class CudaCollector(Collector):
    name = "cuda"
    help = "Per-process CUDA counters (launches, memory, limits) from the intercept's shared memory."
    default_interval_seconds = 1.0

    def __init__(self, options):
        super().__init__(options)
        self.directory = SegmentDirectory(options.shm_dir, layout.KIND_CUDA)
        self.procfs = options.procfs
        self.clock_ticks = os.sysconf("SC_CLK_TCK")

    def collect(self) -> Iterator[Metric]:
        processes = self.directory.read(parse_cuda_record)
        yield from self._device_metrics(processes)
        yield from self._process_metrics(processes)
        yield from directory_metrics(self.directory, len(processes))

    def _device_metrics(self, processes: list[ParsedSegment[CudaProcess]]) -> Iterator[Metric]:
        families = [
            (CounterMetricFamily if counter else GaugeMetricFamily)(f"alnair_cuda_{suffix}", text, labels=DEVICE_LABELS)
            for suffix, text, counter, _, _ in DEVICE_FIELDS
        ]
        memory_limit = GaugeMetricFamily("alnair_cuda_memory_limit_bytes", "Memory limit set for the process (absent: none).", labels=DEVICE_LABELS)
        compute_limit = GaugeMetricFamily("alnair_cuda_compute_limit_ratio", "Share of the GPU the process may use (absent: none).", labels=DEVICE_LABELS)
        for p in processes:
            pid = pid_label(p.segment)
            for d in p.record.devices:
                labels = [pid, str(d.device_index), layout.format_uuid(bytes(d.uuid), bool(d.flags & layout.CUDA_DEVICE_MIG))]
                for family, (_, _, _, field, scale) in zip(families, DEVICE_FIELDS):
                    family.add_metric(labels, getattr(d, field) * scale)
                if d.memory_limit_bytes:
                    memory_limit.add_metric(labels, d.memory_limit_bytes)
                if d.compute_limit_percent:
                    compute_limit.add_metric(labels, d.compute_limit_percent / 100)
        yield from families
        yield memory_limit
        yield compute_limit

    def _process_metrics(self, processes: list[ParsedSegment[CudaProcess]]) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "alnair_cuda_process_info",
            "Identity of a process publishing CUDA counters; join on pid.",
            labels=["pid", "comm", "pod_uid", "container_id", "pid_namespace"],
        )
        started = GaugeMetricFamily("alnair_cuda_process_start_time_seconds", "Start time of the process, seconds since the epoch.", labels=["pid"])
        updated = GaugeMetricFamily("alnair_cuda_last_update_timestamp_seconds", "When the process last published its counters.", labels=["pid"])
        boot = boot_time_seconds(self.procfs) if processes else 0.0
        for p in processes:
            s, h = p.segment, p.segment.header
            pid = pid_label(s)
            info.add_metric([pid, s.comm, s.pod_uid, s.container_id, str(h.pid_namespace_inode)], 1)
            started.add_metric([pid], boot + h.start_time_ticks / self.clock_ticks)
            updated.add_metric([pid], h.update_time_ns / 1e9)
        yield from (info, started, updated)
