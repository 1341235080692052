"""The Python mirror of abi/alnair_shm.h, built from the header at import (c_header.py), so it cannot drift from it;
tests/abi still compiles a probe against the header and checks every size and offset byte for byte."""

from __future__ import annotations

import ctypes as C
from collections.abc import Callable
from typing import Any

from . import HEADER, c_header

DECLARATIONS = c_header.read(HEADER)  # what the header declares: its constants, enums and structs
_CTYPES = {"uint8_t": C.c_uint8, "int32_t": C.c_int32, "uint32_t": C.c_uint32, "uint64_t": C.c_uint64, "char": C.c_char}

# The header's constants that Python uses, under the names it has always used.
SHM_MAGIC = DECLARATIONS.integers["ALNAIR_SHM_MAGIC"]  # b"ALNAIRSH"
ABI_VERSION = DECLARATIONS.integers["ALNAIR_SHM_ABI_VERSION"]
MAX_RECORD_SIZE = DECLARATIONS.integers["ALNAIR_MAX_RECORD_SIZE"]
SHM_DEFAULT_DIR = DECLARATIONS.strings["ALNAIR_SHM_DEFAULT_DIR"]
SHM_NAME_PREFIX = DECLARATIONS.strings["ALNAIR_SHM_NAME_PREFIX"]
READER_MARKER = DECLARATIONS.strings["ALNAIR_READER_MARKER"]

KIND_CUDA = DECLARATIONS.integers["ALNAIR_KIND_CUDA"]
KIND_PYTHON = DECLARATIONS.integers["ALNAIR_KIND_PYTHON"]
KIND_NAMES = {
    value: name.removeprefix("ALNAIR_KIND_").lower()  # 1: "cuda", as segment names and metrics say it
    for name, value in DECLARATIONS.enums["alnair_record_kind"].items()
}

CUDA_MAX_DEVICES = DECLARATIONS.integers["ALNAIR_CUDA_MAX_DEVICES"]
CUDA_DEVICE_MIG = DECLARATIONS.integers["ALNAIR_CUDA_DEVICE_MIG"]
CUDA_DEVICE_GPU_TIME = DECLARATIONS.integers["ALNAIR_CUDA_DEVICE_GPU_TIME"]  # gpu_time_ns and busy_ns are measured
CUDA_LIMIT_INCLUDES_CONTEXT = DECLARATIONS.integers["ALNAIR_CUDA_LIMIT_INCLUDES_CONTEXT"]  # CudaDeviceMemory.flags
CUDA_KERNEL_NAME_LEN = DECLARATIONS.integers["ALNAIR_CUDA_KERNEL_NAME_LEN"]
CUDA_MAX_KERNELS = DECLARATIONS.integers["ALNAIR_CUDA_MAX_KERNELS"]
CUDA_KERNEL_OTHER = DECLARATIONS.integers["ALNAIR_CUDA_KERNEL_OTHER"]  # CudaKernel.flags

COPY_HOST_TO_DEVICE = DECLARATIONS.integers["ALNAIR_COPY_HOST_TO_DEVICE"]
COPY_DEVICE_TO_HOST = DECLARATIONS.integers["ALNAIR_COPY_DEVICE_TO_HOST"]
COPY_DEVICE_TO_DEVICE = DECLARATIONS.integers["ALNAIR_COPY_DEVICE_TO_DEVICE"]
COPY_DIRECTIONS = DECLARATIONS.integers["ALNAIR_COPY_DIRECTIONS"]
COPY_DIRECTION_NAMES = tuple(  # by index, as the direction label says it: "host_to_device", ...
    name.removeprefix("ALNAIR_COPY_").lower()
    for name, _ in sorted(DECLARATIONS.enums["alnair_copy_direction"].items(), key=lambda item: item[1])
    if name != "ALNAIR_COPY_DIRECTIONS"
)

PYTHON_NAME_LEN = DECLARATIONS.integers["ALNAIR_PYTHON_NAME_LEN"]
PYTHON_MAX_COUNTERS = DECLARATIONS.integers["ALNAIR_PYTHON_MAX_COUNTERS"]
PYTHON_MAX_PHASES = DECLARATIONS.integers["ALNAIR_PYTHON_MAX_PHASES"]
PYTHON_TORCH = DECLARATIONS.integers["ALNAIR_PYTHON_TORCH"]
PYTHON_DATALOADER_WORKER = DECLARATIONS.integers["ALNAIR_PYTHON_DATALOADER_WORKER"]

SHARE_SLOTS = DECLARATIONS.integers["ALNAIR_SHARE_SLOTS"]
SHARE_PERIOD_NS = DECLARATIONS.integers["ALNAIR_SHARE_PERIOD_NS"]
SHARE_UNLIMITED = DECLARATIONS.integers["ALNAIR_SHARE_UNLIMITED"]
SHARE_REST_FLOOR_PPM = DECLARATIONS.integers["ALNAIR_SHARE_REST_FLOOR_PPM"]
SHARE_BUSY_MS = DECLARATIONS.integers["ALNAIR_SHARE_BUSY_MS"]
SHARE_BUSY_FULL = DECLARATIONS.integers["ALNAIR_SHARE_BUSY_FULL"]

# Every struct the header defines, by its C name: what the ABI test walks.
STRUCTS: dict[str, type[C.LittleEndianStructure]] = {}


def _ctype(member: c_header.Member) -> Any:
    ctype: Any = STRUCTS[member.type] if member.is_struct else _CTYPES[member.type]
    for length in reversed(member.dims):
        ctype = ctype * length
    return ctype


def _mirror(cname: str) -> Callable[[type[C.LittleEndianStructure]], type[C.LittleEndianStructure]]:
    """The class becomes struct `cname` as the header declares it (its nested structs mirrored above it)."""

    def define(cls):
        cls._fields_ = [(member.name, _ctype(member)) for member in DECLARATIONS.structs[cname]]
        STRUCTS[cname] = cls
        return cls

    return define


@_mirror("alnair_shm_header")
class ShmHeader(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_device")
class CudaDevice(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_copy")
class CudaCopy(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_device_ext")
class CudaDeviceExt(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_device_memory")
class CudaDeviceMemory(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_activity")
class CudaActivity(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_kernel")
class CudaKernel(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_kernels")
class CudaKernels(C.LittleEndianStructure): ...


@_mirror("alnair_cuda_record")
class CudaRecord(C.LittleEndianStructure): ...


@_mirror("alnair_python_counter")
class PythonCounter(C.LittleEndianStructure): ...


@_mirror("alnair_python_phase")
class PythonPhase(C.LittleEndianStructure): ...


@_mirror("alnair_python_record")
class PythonRecord(C.LittleEndianStructure): ...


@_mirror("alnair_share_slot")
class ShareSlot(C.LittleEndianStructure): ...


@_mirror("alnair_share_busy")
class ShareBusy(C.LittleEndianStructure): ...


@_mirror("alnair_share_table")
class ShareTable(C.LittleEndianStructure): ...


HEADER_SIZE = C.sizeof(ShmHeader)
SEQ_OFFSET = ShmHeader.seq.offset
CUDA_DEVICES_OFFSET = CudaRecord.devices.offset
CUDA_DEVICE_SIZE = C.sizeof(CudaDevice)
PYTHON_RECORD_SIZE = C.sizeof(PythonRecord)
CUDA_RECORD_SIZE = C.sizeof(CudaRecord)
CUDA_ACTIVITY_OFFSET = CudaRecord.activity.offset  # also the size of records written before it was appended
CUDA_DEVICES_EXT_OFFSET = CudaRecord.devices_ext.offset
CUDA_DEVICE_EXT_SIZE = C.sizeof(CudaDeviceExt)
CUDA_DEVICES_MEMORY_OFFSET = CudaRecord.devices_memory.offset  # also the size of records written before it
CUDA_DEVICE_MEMORY_SIZE = C.sizeof(CudaDeviceMemory)
CUDA_KERNELS_OFFSET = CudaRecord.kernels.offset  # also the size of records written before it
