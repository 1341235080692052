"""alnair top's GPU rows: every GPU of the node read through NVML with ctypes. libnvidia-ml.so.1 comes with the
driver (the NVIDIA container toolkit mounts it into GPU containers), so the training-side install needs no binding
package and the rows appear whether or not any writer runs. Utilization and memory come from the device queries;
SM active (the share of SMs busy, DCGM's SM_ACTIVE) from GPM, on Hopper and later, between two reads."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

LIBRARY = "libnvidia-ml.so.1"
SUCCESS = 0
GPM_SM_ACTIVE = 2  # NVML_GPM_METRIC_SM_UTIL
GPM_METRIC_SLOTS = 477  # NVML_GPM_METRIC_MAX in nvml.h 13.x: the length of the array nvmlGpmMetricsGet_t holds


class _Utilization(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class _GpmSupport(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("isSupportedDevice", ctypes.c_uint)]


class _GpmMetric(ctypes.Structure):
    _fields_ = [
        ("metricId", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_int),
        ("value", ctypes.c_double),
        ("shortName", ctypes.c_char_p),
        ("longName", ctypes.c_char_p),
        ("unit", ctypes.c_char_p),
    ]


class _GpmMetricsGet(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint),
        ("numMetrics", ctypes.c_uint),
        ("sample1", ctypes.c_void_p),
        ("sample2", ctypes.c_void_p),
        ("metrics", _GpmMetric * GPM_METRIC_SLOTS),
    ]


@dataclass
class GpuRow:
    index: int
    name: str
    utilization_pct: float | None  # the share of the last sample period some kernel ran (NVML's GPU utilization)
    memory_utilization_pct: float | None
    sm_active_pct: float | None  # None: no GPM on this GPU, or no earlier read yet
    memory_used: int | None
    memory_total: int | None


class _Gpm:
    """Two GPM samples of one GPU, taken in turn: SM active over the time between two reads."""

    def __init__(self, nvml, handle: ctypes.c_void_p):
        self.nvml, self.handle = nvml, handle
        self.samples = [ctypes.c_void_p(), ctypes.c_void_p()]
        self.taken = 0  # samples taken so far
        for sample in self.samples:
            if nvml.nvmlGpmSampleAlloc(ctypes.byref(sample)) != SUCCESS:
                raise OSError("nvmlGpmSampleAlloc failed")

    def sm_active(self) -> float | None:
        current, previous = self.samples[self.taken % 2], self.samples[(self.taken + 1) % 2]
        if self.nvml.nvmlGpmSampleGet(self.handle, current) != SUCCESS:
            self.taken = 0  # a gap: the next value needs two fresh samples
            return None
        self.taken += 1
        if self.taken < 2:
            return None
        get = _GpmMetricsGet(version=1, numMetrics=1, sample1=previous, sample2=current)
        get.metrics[0].metricId = GPM_SM_ACTIVE
        if self.nvml.nvmlGpmMetricsGet(ctypes.byref(get)) != SUCCESS or get.metrics[0].nvmlReturn != SUCCESS:
            return None
        return get.metrics[0].value

    def free(self) -> None:
        for sample in self.samples:
            self.nvml.nvmlGpmSampleFree(sample)


class NodeGpus:
    """The node's GPUs. Without NVML (no driver, or a driver that fails to start) there are no rows, and `problem`
    says why in a few words; a query one GPU does not answer leaves its cell empty (None)."""

    def __init__(self, library: str = LIBRARY):
        self.problem: str | None = None
        self.nvml = None
        self.handles: list[ctypes.c_void_p] = []
        self.gpm: dict[int, _Gpm] = {}
        try:
            nvml = ctypes.CDLL(library)
        except OSError:
            self.problem = f"no GPU rows: NVML ({library}) not found"
            return
        if nvml.nvmlInit_v2() != SUCCESS:
            self.problem = "no GPU rows: NVML did not start (nvmlInit_v2 failed)"
            return
        self.nvml = nvml
        self._find_gpus()

    def _find_gpus(self) -> None:
        count = ctypes.c_uint()
        if self.nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != SUCCESS:
            self.problem = "no GPU rows: NVML could not count the GPUs"
            return
        for index in range(count.value):
            handle = ctypes.c_void_p()
            self.nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
            self.handles.append(handle)
            if self._has_gpm(handle):
                try:
                    self.gpm[index] = _Gpm(self.nvml, handle)
                except OSError:
                    pass  # SM active stays empty

    def _has_gpm(self, handle: ctypes.c_void_p) -> bool:
        """GPM needs a driver that has it (R520 and later) and a GPU that supports it (Hopper and later)."""
        if not hasattr(self.nvml, "nvmlGpmQueryDeviceSupport"):
            return False
        support = _GpmSupport(version=1)
        return self.nvml.nvmlGpmQueryDeviceSupport(handle, ctypes.byref(support)) == SUCCESS and bool(
            support.isSupportedDevice
        )

    def read(self) -> list[GpuRow]:
        return [self._row(index, handle) for index, handle in enumerate(self.handles)]

    def _row(self, index: int, handle: ctypes.c_void_p) -> GpuRow:
        name = ctypes.create_string_buffer(96)
        utilization, memory = _Utilization(), _Memory()
        has_name = self.nvml.nvmlDeviceGetName(handle, name, len(name)) == SUCCESS
        has_utilization = self.nvml.nvmlDeviceGetUtilizationRates(handle, ctypes.byref(utilization)) == SUCCESS
        has_memory = self.nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) == SUCCESS
        gpm = self.gpm.get(index)
        return GpuRow(
            index=index,
            name=name.value.decode(errors="replace") if has_name else "-",
            utilization_pct=float(utilization.gpu) if has_utilization else None,
            memory_utilization_pct=float(utilization.memory) if has_utilization else None,
            sm_active_pct=gpm.sm_active() if gpm else None,
            memory_used=memory.used if has_memory else None,
            memory_total=memory.total if has_memory else None,
        )

    def close(self) -> None:
        for gpm in self.gpm.values():
            gpm.free()
        self.gpm.clear()
        if self.nvml is not None:
            self.nvml.nvmlShutdown()
            self.nvml = None
