"""The cuda collector: per-process, per-device counters the CUDA intercept publishes in shared memory."""

from __future__ import annotations

from alnair.abi import fields
from alnair.abi.layout import COPY_DIRECTION_NAMES, KIND_CUDA, CudaDevice
from alnair.abi.records import CudaProcess, device_uuid, kernel_key
from alnair.abi.segments import ParsedSegment
from alnair.exporter.plugin import ExpositionBuilder

from .shm.collector import SegmentCollector


class CudaCollector(SegmentCollector):
    help = "Per-process CUDA counters (launches, memory, copies, limits, GPU time) from the intercept's shared memory."
    kind = KIND_CUDA

    def record_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[CudaProcess]]) -> None:
        """Every field the ABI's field table serves, from each struct of the records that have it: a writer older than
        an appended struct has none of its series, not zeros."""
        device, ext, memory = self._device_rows(processes)
        rows = {
            "alnair_cuda_device": device,
            "alnair_cuda_device_ext": ext,
            "alnair_cuda_device_memory": memory,
            "alnair_cuda_copy": self._copy_rows(processes),
            "alnair_cuda_activity": self._activity_rows(processes),
            "alnair_cuda_kernel": self._kernel_rows(processes),
        }
        for family in fields.families(rows):
            out.family(*family)

    def _device_rows(self, processes: list[ParsedSegment[CudaProcess]]) -> tuple[list[fields.Row], ...]:
        """The rows of each device entry, and of its extension and memory entries where the writer has them."""
        device: list[fields.Row] = []
        ext: list[fields.Row] = []
        memory: list[fields.Row] = []
        for p in processes:
            r = p.record
            for i, d in enumerate(r.devices):
                labels = self._device_labels(p, d)
                device.append((labels, d, d))
                if r.devices_ext:
                    ext.append((labels, r.devices_ext[i], d))
                if r.devices_memory:
                    memory.append((labels, r.devices_memory[i], d))
        return device, ext, memory

    def _device_labels(self, p: ParsedSegment[CudaProcess], d: CudaDevice) -> str:
        """The label set of the process's series for device `d`, the same in every per-device family."""
        pid, uuid = p.segment.pid_label, device_uuid(d)
        key = (p.segment.name, pid, d.device_index, uuid)
        return self.labels.get(key, {"pid": pid, "gpu": str(d.device_index), "uuid": uuid})

    def _copy_rows(self, processes: list[ParsedSegment[CudaProcess]]) -> list[fields.Row]:
        """Every direction of every device, 0 until it copies; none for a writer older than the counters."""
        rows = []
        for p in processes:
            pid = p.segment.pid_label
            for d, ext in zip(p.record.devices, p.record.devices_ext or ()):
                uuid = device_uuid(d)
                for direction, name in enumerate(COPY_DIRECTION_NAMES):
                    key = (p.segment.name, pid, d.device_index, uuid, name)
                    labels = {"pid": pid, "gpu": str(d.device_index), "uuid": uuid, "direction": name}
                    rows.append((self.labels.get(key, labels), ext.copies[direction], d))
        return rows

    def _activity_rows(self, processes: list[ParsedSegment[CudaProcess]]) -> list[fields.Row]:
        rows = []
        for p in processes:
            if p.record.activity is not None:
                pid = p.segment.pid_label
                rows.append((self.labels.get((p.segment.name, pid), {"pid": pid}), p.record.activity, None))
        return rows

    def _kernel_rows(self, processes: list[ParsedSegment[CudaProcess]]) -> list[fields.Row]:
        """The kernel table's rows: at most 32 named kernels a process (ALNAIR_KERNEL_NAMES_TOP, default 20) and one
        OTHER row per device, so the series stay bounded whatever a job launches; none for a writer older than it."""
        rows = []
        for p in processes:
            pid, devices = p.segment.pid_label, {d.device_index: d for d in p.record.devices}
            for k in p.record.kernels or ():
                gpu, name = kernel_key(k)
                uuid = device_uuid(devices[gpu])
                labels = self.labels.get(
                    (p.segment.name, pid, gpu, uuid, "kernel", name),
                    {"pid": pid, "gpu": str(gpu), "uuid": uuid, "kernel": name},
                )
                rows.append((labels, k, devices[gpu]))
        return rows
