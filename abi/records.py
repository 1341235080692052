"""Parsing a segment's record, per kind: the checks every reader (exporter, alnair top) applies to a
record whose header looked valid, so a hostile or corrupt one is refused the same way everywhere."""

from __future__ import annotations

import ctypes as C
import re
import struct
from dataclasses import dataclass

from . import layout

# The sizes of the records this reader knows; a writer's record may be larger (fields appended by a newer
# writer) up to MAX_RECORD_SIZE, never more: anything larger is refused unread (ALNAIR_MAX_RECORD_SIZE).
RECORD_SIZES = {layout.KIND_CUDA: layout.CUDA_RECORD_SIZE, layout.KIND_PYTHON: layout.PYTHON_RECORD_SIZE}
MAX_RECORD_SIZE = layout.MAX_RECORD_SIZE
# What cannot stand in a label value as text: a NUL ends a C string, other controls are invisible or obeyed by
# terminals, a lone surrogate has no UTF-8. Writers map names with it before publishing, readers what they read.
_NOT_TEXT = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def as_text(value: str) -> str:
    """`value` with each code point that is not text replaced by U+FFFD."""
    return _NOT_TEXT.sub("\ufffd", value)


class MalformedRecord(ValueError):
    """A kind's parser rejects a record whose header looked valid."""


@dataclass(frozen=True)
class CudaProcess:
    """A cuda record. `activity`, `devices_ext`, `devices_memory` (devices_ext[i] belongs to devices[i]) and `kernels`
    are None when the writer's record ends before them: a writer older than those fields, whose zeros would be claims
    it never made."""

    devices: list[layout.CudaDevice]
    activity: layout.CudaActivity | None = None
    devices_ext: list[layout.CudaDeviceExt] | None = None
    devices_memory: list[layout.CudaDeviceMemory] | None = None  # devices_memory[i] belongs to devices[i]
    kernels: list[layout.CudaKernel] | None = None  # the named kernels by device, then each device's OTHER row


def _appended(record: bytes, offset: int, size: int, cls):
    """The appended struct at offset if the record holds all of it, else None."""
    return cls.from_buffer_copy(record, offset) if len(record) >= offset + size else None


def parse_cuda_record(record: bytes) -> CudaProcess:
    if len(record) < layout.CUDA_DEVICES_OFFSET:
        raise MalformedRecord("record shorter than its fixed part")
    count, max_devices = struct.unpack_from("<II", record)
    if count > min(max_devices, layout.CUDA_MAX_DEVICES):
        raise MalformedRecord(f"device_count {count} over max_devices {max_devices}")
    if len(record) < layout.CUDA_DEVICES_OFFSET + count * layout.CUDA_DEVICE_SIZE:
        raise MalformedRecord(f"device_count {count} does not fit the record")
    devices = [
        layout.CudaDevice.from_buffer_copy(record, layout.CUDA_DEVICES_OFFSET + i * layout.CUDA_DEVICE_SIZE)
        for i in range(count)
    ]
    if len({d.device_index for d in devices}) < count:  # each device is a series of its own: one record each
        raise MalformedRecord("a device_index given twice")
    activity = _appended(record, layout.CUDA_ACTIVITY_OFFSET, C.sizeof(layout.CudaActivity), layout.CudaActivity)
    extensions = [
        _appended(
            record,
            layout.CUDA_DEVICES_EXT_OFFSET + i * layout.CUDA_DEVICE_EXT_SIZE,
            layout.CUDA_DEVICE_EXT_SIZE,
            layout.CudaDeviceExt,
        )
        for i in range(count)
    ]
    memory = [
        _appended(
            record,
            layout.CUDA_DEVICES_MEMORY_OFFSET + i * layout.CUDA_DEVICE_MEMORY_SIZE,
            layout.CUDA_DEVICE_MEMORY_SIZE,
            layout.CudaDeviceMemory,
        )
        for i in range(count)
    ]
    return CudaProcess(
        devices,
        activity,
        None if None in extensions else extensions,
        None if None in memory else memory,
        _kernels(record, {d.device_index for d in devices}),
    )


def _kernels(record: bytes, device_indexes: set[int]) -> list[layout.CudaKernel] | None:
    table = _appended(record, layout.CUDA_KERNELS_OFFSET, C.sizeof(layout.CudaKernels), layout.CudaKernels)
    if table is None:
        return None
    if table.count > layout.CUDA_MAX_KERNELS:
        raise MalformedRecord(f"{table.count} kernels: over the table's size")
    rows = list(table.kernels[: table.count])
    if any(k.device_index not in device_indexes for k in rows):
        raise MalformedRecord("a kernel on a device the record does not have")
    if len({kernel_key(k) for k in rows}) < len(rows):  # as labels show them: one series each
        raise MalformedRecord("a kernel given twice on one device")
    return rows


def kernel_key(kernel: layout.CudaKernel) -> tuple[int, str]:
    """What names a kernel row's series: its device, and its name as text (OTHER: "(other)", never a name's text)."""
    if kernel.flags & layout.CUDA_KERNEL_OTHER:
        return kernel.device_index, OTHER_KERNELS
    return kernel.device_index, text(kernel.name) or UNNAMED_KERNEL


# Kernel label values no kernel name can take: no identifier, mangled or demangled name starts with "(".
OTHER_KERNELS = "(other)"
UNNAMED_KERNEL = "(unnamed)"  # what the driver could not name (cuFuncGetName came with CUDA 12.3's driver)


def parse_python_record(record: bytes) -> layout.PythonRecord:
    if len(record) < layout.PYTHON_RECORD_SIZE:
        raise MalformedRecord("record shorter than the python record")
    parsed = layout.PythonRecord.from_buffer_copy(record)
    if parsed.counter_count > layout.PYTHON_MAX_COUNTERS or parsed.phase_count > layout.PYTHON_MAX_PHASES:
        raise MalformedRecord(f"{parsed.counter_count} counters, {parsed.phase_count} phases: over the tables' size")
    for kind, table, count in (
        ("counter", parsed.counters, parsed.counter_count),
        ("phase", parsed.phases, parsed.phase_count),
    ):
        if len({text(entry.name) for entry in table[:count]}) < count:  # as labels show them: one series each
            raise MalformedRecord(f"a {kind} name given twice")
    return parsed


def device_uuid(device: layout.CudaDevice) -> str:
    """The device's CUuuid in NVML's spelling (GPU-... or MIG-...), so cuda and nvml series join on it."""
    h = bytes(device.uuid).hex()
    kind = "MIG" if device.flags & layout.CUDA_DEVICE_MIG else "GPU"
    return f"{kind}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def text(raw: bytes) -> str:
    """A fixed-size string field as text: bounded by its field, invalid UTF-8 and control characters
    (which a terminal would obey) replaced by U+FFFD."""
    return as_text(raw.decode(errors="replace"))


PARSERS = {layout.KIND_CUDA: parse_cuda_record, layout.KIND_PYTHON: parse_python_record}
