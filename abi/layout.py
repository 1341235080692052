"""The Python mirror of abi/alnair_shm.h; tests/abi proves it matches byte for byte."""
from __future__ import annotations

import ctypes as C

SHM_MAGIC = 0x48535249414E4C41  # b"ALNAIRSH"
ABI_VERSION = 2
MAX_RECORD_SIZE = 65536

KIND_CUDA = 1
KIND_PYTHON = 2
KIND_NAMES = {KIND_CUDA: "cuda", KIND_PYTHON: "python"}

CUDA_MAX_DEVICES = 64
CUDA_DEVICE_MIG = 0x1
CUDA_DEVICE_GPU_TIME = 0x2  # CudaDevice.flags: gpu_time_ns and CudaDeviceExt.busy_ns are measured
CUDA_LIMIT_INCLUDES_CONTEXT = 0x1  # CudaDeviceMemory.flags
CUDA_KERNEL_NAME_LEN = 256
CUDA_MAX_KERNELS = 96
CUDA_KERNEL_OTHER = 0x1  # CudaKernel.flags

COPY_HOST_TO_DEVICE = 0
COPY_DEVICE_TO_HOST = 1
COPY_DEVICE_TO_DEVICE = 2
COPY_DIRECTIONS = 3
COPY_DIRECTION_NAMES = ("host_to_device", "device_to_host", "device_to_device")  # by index

PYTHON_NAME_LEN = 48
PYTHON_MAX_COUNTERS = 32
PYTHON_MAX_PHASES = 32
PYTHON_TORCH = 0x1
PYTHON_DATALOADER_WORKER = 0x2

SHARE_SLOTS = 64
SHARE_PERIOD_NS = 100_000_000
SHARE_UNLIMITED = 0xFFFFFFFF
SHARE_REST_FLOOR_PPM = 50_000
SHARE_BUSY_MS = 48
SHARE_BUSY_FULL = 250


class ShmHeader(C.LittleEndianStructure):
    _fields_ = [
        ("magic", C.c_uint64),
        ("abi_version", C.c_uint32),
        ("header_size", C.c_uint32),
        ("record_kind", C.c_uint32),
        ("record_size", C.c_uint32),
        ("writer_pid", C.c_int32),
        ("flags", C.c_uint32),
        ("pid_namespace_inode", C.c_uint64),
        ("start_time_ticks", C.c_uint64),
        ("seq", C.c_uint64),
        ("update_time_ns", C.c_uint64),
        ("pod_uid", C.c_char * 48),
        ("container_id", C.c_char * 80),
        ("comm", C.c_char * 16),
        ("reserved", C.c_uint8 * 48),
    ]


class CudaDevice(C.LittleEndianStructure):
    _fields_ = [
        ("device_index", C.c_uint32),
        ("flags", C.c_uint32),
        ("uuid", C.c_uint8 * 16),
        ("kernel_launches", C.c_uint64),
        ("graph_launches", C.c_uint64),
        ("bytes_in_use", C.c_uint64),
        ("peak_bytes", C.c_uint64),
        ("allocations", C.c_uint64),
        ("failed_allocations", C.c_uint64),
        ("limit_denied_allocations", C.c_uint64),
        ("memory_limit_bytes", C.c_uint64),
        ("compute_limit_percent", C.c_uint32),
        ("compute_share_percent", C.c_uint32),
        ("compute_quota_ns", C.c_uint64),
        ("throttled_ns", C.c_uint64),
        ("compute_period_ns", C.c_uint64),
        ("gpu_time_ns", C.c_uint64),
    ]


class CudaCopy(C.LittleEndianStructure):
    _fields_ = [
        ("copies", C.c_uint64),
        ("bytes", C.c_uint64),
        ("sync_ns", C.c_uint64),
    ]


class CudaDeviceExt(C.LittleEndianStructure):
    _fields_ = [
        ("copies", CudaCopy * COPY_DIRECTIONS),
        ("busy_ns", C.c_uint64),
        ("reserved", C.c_uint64 * 6),
    ]


class CudaDeviceMemory(C.LittleEndianStructure):
    _fields_ = [
        ("context_bytes", C.c_uint64),
        ("pool_reserved_bytes", C.c_uint64),
        ("pool_used_bytes", C.c_uint64),
        ("charged_bytes", C.c_uint64),
        ("flags", C.c_uint32),
        ("reserved0", C.c_uint32),
        ("reserved", C.c_uint64 * 3),
    ]


class CudaActivity(C.LittleEndianStructure):
    _fields_ = [
        ("first_launch_ns", C.c_uint64),
        ("first_allocation_ns", C.c_uint64),
        ("last_launch_time_ns", C.c_uint64),
        ("reserved", C.c_uint64 * 5),
    ]


class CudaKernel(C.LittleEndianStructure):
    _fields_ = [
        ("name", C.c_char * CUDA_KERNEL_NAME_LEN),
        ("launches", C.c_uint64),
        ("device_index", C.c_uint32),
        ("flags", C.c_uint32),
    ]


class CudaKernels(C.LittleEndianStructure):
    _fields_ = [
        ("count", C.c_uint32),
        ("reserved0", C.c_uint32),
        ("reserved", C.c_uint64 * 3),
        ("kernels", CudaKernel * CUDA_MAX_KERNELS),
    ]


class CudaRecord(C.LittleEndianStructure):
    _fields_ = [
        ("device_count", C.c_uint32),
        ("max_devices", C.c_uint32),
        ("reserved", C.c_uint64 * 3),
        ("devices", CudaDevice * CUDA_MAX_DEVICES),
        ("activity", CudaActivity),  # appended: a shorter record's writer lacks it and what follows
        ("devices_ext", CudaDeviceExt * CUDA_MAX_DEVICES),
        ("devices_memory", CudaDeviceMemory * CUDA_MAX_DEVICES),  # appended: absent in a shorter record
        ("kernels", CudaKernels),  # appended: absent in a shorter record
    ]


class PythonCounter(C.LittleEndianStructure):
    _fields_ = [
        ("name", C.c_char * PYTHON_NAME_LEN),
        ("value", C.c_uint64),
        ("reserved", C.c_uint64),
    ]


class PythonPhase(C.LittleEndianStructure):
    _fields_ = [
        ("name", C.c_char * PYTHON_NAME_LEN),
        ("count", C.c_uint64),
        ("total_ns", C.c_uint64),
    ]


class PythonRecord(C.LittleEndianStructure):
    _fields_ = [
        ("flags", C.c_uint32),
        ("counter_count", C.c_uint32),
        ("phase_count", C.c_uint32),
        ("max_counters", C.c_uint32),
        ("max_phases", C.c_uint32),
        ("reserved0", C.c_uint32),
        ("steps", C.c_uint64),
        ("samples", C.c_uint64),
        ("epochs", C.c_uint64),
        ("optimizer_steps", C.c_uint64),
        ("data_wait_ns", C.c_uint64),
        ("step_ns", C.c_uint64),
        ("first_step_ns", C.c_uint64),
        ("reserved", C.c_uint64 * 6),
        ("counters", PythonCounter * PYTHON_MAX_COUNTERS),
        ("phases", PythonPhase * PYTHON_MAX_PHASES),
    ]


class ShareSlot(C.LittleEndianStructure):
    _fields_ = [
        ("quota_ppm", C.c_uint32),
        ("pid", C.c_int32),
    ]


class ShareBusy(C.LittleEndianStructure):
    _fields_ = [
        ("until_ms", C.c_uint64),
        ("share_ppm", C.c_uint32),
        ("reserved", C.c_uint32),
        ("wanting", C.c_uint64),
        ("busy", C.c_uint8 * SHARE_BUSY_MS),
    ]


class ShareTable(C.LittleEndianStructure):
    _fields_ = [
        ("slots", ShareSlot * SHARE_SLOTS),
        ("busy", ShareBusy * SHARE_SLOTS),  # appended: offset 512
    ]


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

# Every struct the header defines, by its C name: what the ABI test walks.
STRUCTS = {
    "alnair_shm_header": ShmHeader,
    "alnair_cuda_device": CudaDevice,
    "alnair_cuda_copy": CudaCopy,
    "alnair_cuda_device_ext": CudaDeviceExt,
    "alnair_cuda_device_memory": CudaDeviceMemory,
    "alnair_cuda_activity": CudaActivity,
    "alnair_cuda_kernel": CudaKernel,
    "alnair_cuda_kernels": CudaKernels,
    "alnair_cuda_record": CudaRecord,
    "alnair_python_counter": PythonCounter,
    "alnair_python_phase": PythonPhase,
    "alnair_python_record": PythonRecord,
    "alnair_share_slot": ShareSlot,
    "alnair_share_busy": ShareBusy,
    "alnair_share_table": ShareTable,
}

