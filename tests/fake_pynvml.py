"""A test double of the pynvml module: GPUs described in Python, answering with pynvml's own constants,
structures' field names and NVMLError subclasses (so the collector's error handling is the real one)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

XID = pynvml.nvmlEventTypeXidCriticalError
# The GPM metrics a Hopper GPU measures here, by pynvml's ids: percentages, and MiB/s for those ending _PER_SEC.
GPM_METRIC_NAMES = (
    "GRAPHICS_UTIL",
    "SM_UTIL",
    "SM_OCCUPANCY",
    "ANY_TENSOR_UTIL",
    "FP64_UTIL",
    "FP32_UTIL",
    "FP16_UTIL",
    "DRAM_BW_UTIL",
    "PCIE_TX_PER_SEC",
    "PCIE_RX_PER_SEC",
    "NVLINK_TOTAL_TX_PER_SEC",
    "NVLINK_TOTAL_RX_PER_SEC",
)
GPM_IDS = {name: getattr(pynvml, f"NVML_GPM_METRIC_{name}") for name in GPM_METRIC_NAMES}
GPM_METRICS = list(GPM_IDS.values())


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H200"
    memory_total: int = 150_000 * 2**20
    memory_used: int = 0
    utilization: tuple[int, int] = (0, 0)  # SM %, memory %
    temperature: int = 40
    power_mw: int = 100_000
    energy_mj: int = 5_000_000
    clocks_mhz: tuple[int, int] = (1980, 2619)  # SM, memory
    pcie_kb_per_s: tuple[int, int] = (0, 0)  # tx, rx
    throttle: int = 0
    ecc: tuple[int, int] = (0, 0)  # corrected, uncorrected
    retired_pages: tuple[int, int] = (0, 0)  # single-bit, double-bit
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)
    processes: dict[int, int | None] = field(default_factory=dict)  # pid -> used bytes (None: hidden)
    utilization_samples: list[tuple[int, int, int, int]] = field(default_factory=list)  # pid, µs, SM %, memory %
    mig: list[FakeGpu] | None = None  # None: MIG off; a list of slots (None entries are empty slots)
    unsupported: set[str] = field(default_factory=set)  # pynvml function names this GPU refuses
    lost: bool = False  # fallen off the bus: every call fails
    supported_events: int = (
        XID | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError | pynvml.nvmlEventTypePState
    )
    register_error: int | None = None  # the NVML code nvmlDeviceRegisterEvents fails with (NO_PERMISSION: not root)
    # nvmlGpmQueryDeviceSupport's answer (Hopper and later); False: GPM samples NOT_SUPPORTED
    gpm_supported: bool = True
    # GPM metric id -> what the GPU does from now on (percent, or MiB/s); ids left out it does not measure
    gpm_rates: dict[int, float] = field(default_factory=lambda: dict.fromkeys(GPM_METRICS, 0.0))
    # NVML codes the next GPM samples of this GPU fail with, one each
    gpm_errors: list[int] = field(default_factory=list)
    gpu_instance_id: int = 0  # a MIG instance's GPU instance id, which nvmlGpmMigSampleGet takes
    gpm_counters: dict[int, float] = field(default_factory=dict)  # the hardware's: each rate integrated over time
    gpm_counted_ns: int = 0  # when the counters were last brought up to date

    def gpm_read(self) -> tuple[int, dict[int, float]]:
        """The GPU's clock and counters now: every rate has held since the last read."""
        now = time.monotonic_ns()
        seconds = (now - self.gpm_counted_ns) / 1e9 if self.gpm_counted_ns else 0.0
        for metric, rate in self.gpm_rates.items():
            self.gpm_counters[metric] = self.gpm_counters.get(metric, 0.0) + rate * seconds
        self.gpm_counted_ns = now
        return now, {metric: self.gpm_counters[metric] for metric in self.gpm_rates}

    @property
    def _as_parameter_(self) -> int:
        """The handle's address as ctypes sees it: NVML's handles are pointers, one per device."""
        return id(self)


@dataclass
class FakeGpmSample:
    """What an nvmlGpmSample_t holds once taken: the GPU, its clock and its counters."""

    buffer: ctypes.Array  # the memory the handle points at, kept alive while allocated
    gpu: FakeGpu | None = None
    taken_ns: int = 0
    counters: dict[int, float] = field(default_factory=dict)
    freed: bool = False


@dataclass
class FakeEventSet:
    """An nvmlEventSet_t: what was registered on it and the events queued for its waits."""

    registered: list[tuple[FakeGpu, int]] = field(default_factory=list)  # (GPU, event types)
    events: deque = field(default_factory=deque)
    created_at: float = field(default_factory=time.monotonic)
    freed: bool = False


class FakeNvml:
    """Use as `NvmlCollector(options, nvml=FakeNvml([...]))`; GPUs can be changed between samples."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        driver_loaded: bool = True,
        driver_version: str = "550.54.15",
        missing: set[str] = frozenset(),
    ):
        for name in dir(pynvml):
            if name.startswith(("NVML", "nvmlClocks", "nvmlMemory_v", "nvmlEventType", "c_nvmlGpm")):
                setattr(self, name, getattr(pynvml, name))
        self.gpus, self.driver_loaded, self.driver_version = gpus, driver_loaded, driver_version
        self.missing = missing  # functions this driver lacks: FUNCTION_NOT_FOUND, as pynvml raises for an absent symbol
        self.initialised = 0
        self.calls = 0
        self.gpm_samples: dict[int, FakeGpmSample] = {}  # by the address each handle points at
        self.event_sets: list[FakeEventSet] = []
        self.wait_errors: list[int] = []  # NVML codes the next nvmlEventSetWait_v2 calls fail with, one each
        self.waiting = 0  # calls inside nvmlEventSetWait_v2 now
        self._hung = False
        self._events = threading.Condition()  # guards the event sets; notified when an event is queued

    def _device(self, function: str, gpu: FakeGpu) -> FakeGpu:
        self.calls += 1
        if function in self.missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if function in gpu.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlInit(self):
        if not self.driver_loaded:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver_version

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self._device("nvmlDeviceGetHandleByIndex", self.gpus[index])

    def nvmlDeviceGetUUID(self, gpu):
        return self._device("nvmlDeviceGetUUID", gpu).uuid

    def nvmlDeviceGetName(self, gpu):
        return self._device("nvmlDeviceGetName", gpu).name

    def nvmlDeviceGetMemoryInfo(self, gpu, version=None):
        g = self._device("nvmlDeviceGetMemoryInfo", gpu)
        return SimpleNamespace(total=g.memory_total, used=g.memory_used, free=g.memory_total - g.memory_used)

    def nvmlDeviceGetUtilizationRates(self, gpu):
        sm, memory = self._device("nvmlDeviceGetUtilizationRates", gpu).utilization
        return SimpleNamespace(gpu=sm, memory=memory)

    def nvmlDeviceGetTemperature(self, gpu, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._device("nvmlDeviceGetTemperature", gpu).temperature

    def nvmlDeviceGetPowerUsage(self, gpu):
        return self._device("nvmlDeviceGetPowerUsage", gpu).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu):
        return self._device("nvmlDeviceGetTotalEnergyConsumption", gpu).energy_mj

    def nvmlDeviceGetClockInfo(self, gpu, clock):
        sm, memory = self._device("nvmlDeviceGetClockInfo", gpu).clocks_mhz
        return {pynvml.NVML_CLOCK_SM: sm, pynvml.NVML_CLOCK_MEM: memory}[clock]

    def nvmlDeviceGetPcieThroughput(self, gpu, counter):
        tx, rx = self._device("nvmlDeviceGetPcieThroughput", gpu).pcie_kb_per_s
        return {pynvml.NVML_PCIE_UTIL_TX_BYTES: tx, pynvml.NVML_PCIE_UTIL_RX_BYTES: rx}[counter]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu):
        return self._device("nvmlDeviceGetCurrentClocksThrottleReasons", gpu).throttle

    def nvmlDeviceGetTotalEccErrors(self, gpu, error_type, counter_type):
        corrected, uncorrected = self._device("nvmlDeviceGetTotalEccErrors", gpu).ecc
        return corrected if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else uncorrected

    def nvmlDeviceGetRetiredPages(self, gpu, cause):
        single, double = self._device("nvmlDeviceGetRetiredPages", gpu).retired_pages
        count = single if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS else double
        return [0x1000 * i for i in range(count)]

    def nvmlDeviceGetRemappedRows(self, gpu):
        return self._device("nvmlDeviceGetRemappedRows", gpu).remapped_rows

    def nvmlDeviceGetComputeRunningProcesses(self, gpu):
        g = self._device("nvmlDeviceGetComputeRunningProcesses", gpu)
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for pid, used in g.processes.items()
        ]

    def nvmlDeviceGetProcessUtilization(self, gpu, last_seen_us):
        g = self._device("nvmlDeviceGetProcessUtilization", gpu)
        newer = [
            SimpleNamespace(pid=pid, timeStamp=at, smUtil=sm, memUtil=memory, encUtil=0, decUtil=0)
            for pid, at, sm, memory in g.utilization_samples
            if at > last_seen_us
        ]
        if not newer:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return newer

    def nvmlDeviceGetMigMode(self, gpu):
        g = self._device("nvmlDeviceGetMigMode", gpu)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if g.mig is not None else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu):
        return len(self._device("nvmlDeviceGetMaxMigDeviceCount", gpu).mig or [])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu, slot):
        instance = self._device("nvmlDeviceGetMigDeviceHandleByIndex", gpu).mig[slot]
        if instance is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return instance

    def nvmlDeviceGetIndex(self, gpu):
        self._device("nvmlDeviceGetIndex", gpu)
        return next(index for index, g in enumerate(self.gpus) if g is gpu)

    def nvmlDeviceGetGpuInstanceId(self, gpu):
        return self._device("nvmlDeviceGetGpuInstanceId", gpu).gpu_instance_id

    def nvmlGpmQueryDeviceSupport(self, gpu):
        support = pynvml.c_nvmlGpmSupport_t(version=pynvml.NVML_GPM_SUPPORT_VERSION)  # as pynvml fills it in
        support.isSupportedDevice = self._device("nvmlGpmQueryDeviceSupport", gpu).gpm_supported
        return support

    def nvmlGpmSampleAlloc(self):
        buffer = ctypes.create_string_buffer(8)
        handle = ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)
        self.gpm_samples[ctypes.addressof(buffer)] = FakeGpmSample(buffer)
        return handle

    def nvmlGpmSampleFree(self, handle):
        self._gpm_sample(handle).freed = True

    def nvmlGpmSampleGet(self, gpu, handle):
        self._gpm_take(self._device("nvmlGpmSampleGet", gpu), handle)
        return handle

    def nvmlGpmMigSampleGet(self, gpu, gpu_instance_id, handle):
        """The MIG instance of `gpu` (its parent) with GPU instance id `gpu_instance_id`; INVALID_ARGUMENT if none."""
        parent = self._device("nvmlGpmMigSampleGet", gpu)
        instance = next((i for i in parent.mig or [] if i is not None and i.gpu_instance_id == gpu_instance_id), None)
        if instance is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._gpm_take(parent, handle, self._device("nvmlGpmMigSampleGet", instance))
        return handle

    def nvmlGpmMetricsGet(self, request):
        """NVML's checks: the struct's version, the metric count, two samples of one device, older first. A metric the
        device does not measure gets NOT_SUPPORTED in its own nvmlReturn; the call itself succeeds."""
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        older, newer = self._gpm_sample(request.sample1), self._gpm_sample(request.sample2)
        if (
            request.numMetrics > pynvml.NVML_GPM_METRIC_MAX
            or older.gpu is None
            or newer.gpu is not older.gpu
            or newer.taken_ns <= older.taken_ns
        ):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        seconds = (newer.taken_ns - older.taken_ns) / 1e9
        for metric in request.metrics[: request.numMetrics]:
            measured = metric.metricId in older.counters and metric.metricId in newer.counters
            metric.nvmlReturn = pynvml.NVML_SUCCESS if measured else pynvml.NVML_ERROR_NOT_SUPPORTED
            metric.value = (
                (newer.counters[metric.metricId] - older.counters[metric.metricId]) / seconds if measured else 0.0
            )
        return request

    def _gpm_sample(self, handle) -> FakeGpmSample:
        address = ctypes.cast(handle, ctypes.c_void_p).value
        if address is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        sample = self.gpm_samples[address]  # KeyError: a handle nvmlGpmSampleAlloc never gave
        assert not sample.freed, "GPM sample used or freed after it was freed"
        return sample

    def _gpm_take(self, gpu: FakeGpu, handle, measured: FakeGpu | None = None) -> None:
        """Fills the sample with `measured`'s counters (`gpu` itself, or one of its MIG instances)."""
        sample = self._gpm_sample(handle)
        if not gpu.gpm_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if gpu.gpm_errors:
            raise pynvml.NVMLError(gpu.gpm_errors.pop(0))
        sample.gpu = measured or gpu
        sample.taken_ns, sample.counters = sample.gpu.gpm_read()

    def nvmlEventSetCreate(self):
        with self._events:
            self.event_sets.append(FakeEventSet())
            return self.event_sets[-1]

    def nvmlEventSetFree(self, event_set):
        with self._events:
            assert not event_set.freed, "event set freed twice"
            event_set.freed = True

    def nvmlDeviceGetSupportedEventTypes(self, gpu):
        return self._device("nvmlDeviceGetSupportedEventTypes", gpu).supported_events

    def nvmlDeviceRegisterEvents(self, gpu, event_types, event_set):
        """NVML: NOT_SUPPORTED if the GPU lacks any of the types (none is registered then; the set stays usable)."""
        g = self._device("nvmlDeviceRegisterEvents", gpu)
        if g.register_error is not None:
            raise pynvml.NVMLError(g.register_error)
        if event_types & ~g.supported_events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        with self._events:
            assert not event_set.freed, "registering on a freed event set"
            event_set.registered.append((g, event_types))

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        """The oldest queued event, else NVMLError_Timeout after timeout_ms; GPU_IS_LOST while a GPU registered on
        the set is lost. While hung (hang_waits), a wait returns nothing, whatever its timeout, until released."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._events:
            assert not event_set.freed, "waiting on a freed event set"
            self.waiting += 1
            try:
                while self._hung or (event := self._wait_outcome(event_set, deadline)) is None:
                    self._events.wait(None if self._hung else max(0.0, deadline - time.monotonic()))
                return event
            finally:
                self.waiting -= 1

    def _wait_outcome(self, event_set: FakeEventSet, deadline: float):
        if self.wait_errors:
            raise pynvml.NVMLError(self.wait_errors.pop(0))
        if any(g.lost for g, _ in event_set.registered):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if event_set.events:
            return event_set.events.popleft()
        if time.monotonic() >= deadline:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
        return None

    def inject_xid(self, gpu: FakeGpu, xid: int, device: FakeGpu | None = None) -> None:
        """The driver reports XID `xid` on `gpu`: queued on every live set `gpu` is registered in for XID events.
        `device` is the handle the event names (NVML names the registered GPU, the parent of MIG instances)."""
        with self._events:
            for event_set in self.event_sets:
                if not event_set.freed and any(g is gpu and types & XID for g, types in event_set.registered):
                    event_set.events.append(
                        SimpleNamespace(
                            device=device or gpu,
                            eventType=XID,
                            eventData=xid,
                            gpuInstanceId=0xFFFFFFFF,
                            computeInstanceId=0xFFFFFFFF,
                        )
                    )
            self._events.notify_all()

    def hang_waits(self, hung: bool) -> None:
        """While hung, every nvmlEventSetWait_v2 blocks (a driver that never returns); False releases them."""
        with self._events:
            self._hung = hung
            self._events.notify_all()
