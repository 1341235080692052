"""The nvml collector: per-GPU (MIG instances included) and per-process GPU metrics from NVML,
initialised once; processes carry pod identity through an _info series; XID errors counted on a watcher thread;
GPM's profiling metrics over each interval (nvml_gpm)."""

from __future__ import annotations

import ctypes
import logging
import math
import threading
import time
from dataclasses import dataclass, field, replace

from alnair.exporter.plugin import CollectorUnavailable, ExpositionBuilder, LabelSets

from . import nvml_gpm
from .pods.identity import pod_identity

log = logging.getLogger(__name__)

# fmt: off
# (metric, kind, help, field of GpuSample): per-GPU values, absent when the GPU does not support them.
GPU_FIELDS = [
    ("alnair_nvml_sm_utilization_ratio", "gauge", "Share of the last sample period a kernel ran on the GPU.",
     "sm_util"),
    ("alnair_nvml_memory_utilization_ratio", "gauge",
     "Share of the last sample period device memory was read or written.", "mem_util"),
    ("alnair_nvml_memory_used_bytes", "gauge", "Device memory in use.", "memory_used"),
    ("alnair_nvml_memory_total_bytes", "gauge", "Device memory installed.", "memory_total"),
    ("alnair_nvml_temperature_celsius", "gauge", "GPU core temperature.", "temperature"),
    ("alnair_nvml_power_watts", "gauge", "Power draw.", "power"),
    ("alnair_nvml_energy_joules", "counter", "Energy used since the driver loaded.", "energy"),
    ("alnair_nvml_sm_clock_hertz", "gauge", "SM clock.", "sm_clock"),
    ("alnair_nvml_memory_clock_hertz", "gauge", "Memory clock.", "mem_clock"),
    ("alnair_nvml_pcie_transmit_bytes_per_second", "gauge", "PCIe transmit throughput (20 ms window).", "pcie_tx"),
    ("alnair_nvml_pcie_receive_bytes_per_second", "gauge", "PCIe receive throughput (20 ms window).", "pcie_rx"),
    ("alnair_nvml_remapped_rows_pending", "gauge", "1 while a row remapping waits for a GPU reset.", "remap_pending"),
    ("alnair_nvml_remapped_rows_failed", "gauge", "1 if a row remapping failed.", "remap_failed"),
]
# (metric, kind, help, label name, field of GpuSample holding {label value: number}).
GPU_LABELLED_FIELDS = [
    ("alnair_nvml_throttle_reason_active", "gauge", "1 while the reason holds the clocks down.", "reason", "throttle"),
    ("alnair_nvml_ecc_errors", "counter", "ECC errors since the GPU's manufacture.", "type", "ecc"),
    ("alnair_nvml_retired_pages", "gauge", "Pages retired for ECC errors.", "cause", "retired"),
    ("alnair_nvml_remapped_rows", "gauge", "Rows remapped for ECC errors.", "type", "remapped"),
]
# fmt: on
THROTTLE_REASONS = {  # pynvml constant -> label value
    "nvmlClocksThrottleReasonGpuIdle": "gpu_idle",
    "nvmlClocksThrottleReasonApplicationsClocksSetting": "applications_clocks_setting",
    "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
    "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
    "nvmlClocksThrottleReasonSyncBoost": "sync_boost",
    "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal_slowdown",
    "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal_slowdown",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "hw_power_brake_slowdown",
    "nvmlClocksThrottleReasonDisplayClockSetting": "display_clock_setting",
}
XID_WAIT_MS = 1000  # one wait's timeout: how soon the watcher sees it should stop (an event ends a wait at once)
XID_RETRY_SECONDS = (1, 2, 5, 10, 30)  # back-off after NVML errors, by failures in a row; the last one repeats
XID_STOP_SECONDS = 3.0  # how long close() waits for the watcher to leave NVML's wait
MAX_XID_CODES = 32  # xid label values per GPU; later codes are counted under xid="other"


@dataclass
class Device:
    """A GPU, or a MIG instance of one (`parent_uuid` set), with what its samples keep between them."""

    handle: object
    index: str  # the NVML index (nvidia-smi's); a MIG instance has its parent's
    uuid: str
    name: str
    parent_uuid: str = ""
    last_seen_us: int = 0  # newest process-utilization sample already read
    unsupported: set[str] = field(default_factory=set)  # optional queries this device refused
    instances: list[Device] = field(default_factory=list)  # MIG instances last seen, with their timestamps


@dataclass
class GpuSample:
    values: dict[str, float] = field(default_factory=dict)
    labelled: dict[str, dict[str, float]] = field(default_factory=dict)
    # pid -> sm, mem, bytes
    processes: dict[int, tuple[float | None, float | None, int | None]] = field(default_factory=dict)
    gpm: dict[int, float] = field(default_factory=dict)  # nvml_gpm.SERIES index -> value


class NvmlCollector:
    help = "Per-GPU and per-process GPU utilization, memory, power, clocks and errors from NVML."
    default_interval_seconds = 2.0

    def __init__(self, options, nvml=None):
        self.nvml = nvml or import_pynvml()
        try:
            self.nvml.nvmlInit()
            self.driver_version = text(self.nvml.nvmlSystemGetDriverVersion())
            count = self.nvml.nvmlDeviceGetCount()
        except self.nvml.NVMLError as e:
            raise CollectorUnavailable(f"NVML: {e}") from None
        if count == 0:
            self.nvml.nvmlShutdown()
            raise CollectorUnavailable("NVML sees no GPU")
        self.gpus = [self._gpu(i) for i in range(count)]
        self.identity = pod_identity(options)
        self.labels = LabelSets()
        self.gpm = nvml_gpm.GpmSampler(self.nvml)
        self.xids = XidWatcher(self.nvml, [gpu for gpu in self.gpus if gpu is not None]).start()

    def _gpu(self, index: int) -> Device | None:
        """None for a GPU NVML lists but cannot open (it stays down: its uuid is unknown)."""
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            return Device(
                handle, str(index), text(self.nvml.nvmlDeviceGetUUID(handle)), text(self.nvml.nvmlDeviceGetName(handle))
            )
        except self.nvml.NVMLError as e:
            log.warning("GPU %d cannot be opened: %s", index, e)
            return None

    def close(self) -> None:
        self.gpm.close()
        if self.xids.stop():
            self.nvml.nvmlShutdown()
        else:  # shutting NVML down under a thread inside it is not safe; the process is ending anyway
            log.warning("the XID watcher is still inside NVML after %.0f s: NVML left initialised", XID_STOP_SECONDS)

    def collect(self) -> bytes:
        self.labels.new_sample()
        up, samples = [], []
        for gpu in self.gpus:
            if gpu is None:
                continue
            try:
                devices = [gpu, *self._mig_instances(gpu)]
                sampled = [(d, self._sample(d)) for d in devices]
            except self.nvml.NVMLError as e:
                log.debug("GPU %s failed: %s", gpu.uuid, e)
                up.append((self._labels(gpu), 0))
                continue
            for d, s in sampled:  # GPM errors leave out only the device's GPM series
                s.gpm = self.gpm.measure(d, None if d is gpu else gpu.handle)
            up.extend((self._labels(d), 1) for d, _ in sampled)
            samples.extend(sampled)
        self.gpm.retain({d.uuid for d, _ in samples})
        out = ExpositionBuilder()
        out.family(
            "alnair_nvml_up",
            "gauge",
            "1 if NVML answered for the GPU this sample; 0 and none of its sampled series otherwise "
            "(its XID series stay).",
            up,
        )
        self._gpu_families(out, samples)
        nvml_gpm.write_families(
            out,
            [(d, s.gpm) for d, s in samples],
            lambda d, i, labels: self.labels.get(
                (d.uuid, "gpm", i), dict(sorted({"gpu": d.index, "uuid": d.uuid, **labels}.items()))
            ),
        )
        self._process_families(out, samples)
        self._xid_families(out)
        return out.text()

    def _mig_instances(self, gpu: Device) -> list[Device]:
        mode = self._optional(gpu, "mig", self.nvml.nvmlDeviceGetMigMode, gpu.handle)
        if mode is None or mode[0] != self.nvml.NVML_DEVICE_MIG_ENABLE:  # (current, pending)
            return []
        instances = []
        for slot in range(self.nvml.nvmlDeviceGetMaxMigDeviceCount(gpu.handle)):
            try:
                handle = self.nvml.nvmlDeviceGetMigDeviceHandleByIndex(gpu.handle, slot)
            except self.nvml.NVMLError_NotFound:
                continue
            uuid = text(self.nvml.nvmlDeviceGetUUID(handle))
            known = next((d for d in gpu.instances if d.uuid == uuid), None)
            instances.append(
                known or Device(handle, gpu.index, uuid, text(self.nvml.nvmlDeviceGetName(handle)), gpu.uuid)
            )
        gpu.instances = instances
        return instances

    def _optional(self, device: Device, query: str, function, *args):
        """function(*args), or None when the device does not support it (remembered: not asked again)."""
        if query in device.unsupported:
            return None
        try:
            return function(*args)
        except (
            self.nvml.NVMLError_NotSupported,
            self.nvml.NVMLError_NoPermission,
            self.nvml.NVMLError_FunctionNotFound,
        ):
            device.unsupported.add(query)
            return None

    def _sample(self, d: Device) -> GpuSample:
        nvml, h, s = self.nvml, d.handle, GpuSample()
        memory = self._memory(d)  # every device answers this; an error means the GPU is in trouble
        s.values["memory_used"], s.values["memory_total"] = memory.used, memory.total
        if (rates := self._optional(d, "utilization", nvml.nvmlDeviceGetUtilizationRates, h)) is not None:
            s.values["sm_util"], s.values["mem_util"] = rates.gpu / 100, rates.memory / 100
        scaled = [
            ("temperature", 1, nvml.nvmlDeviceGetTemperature, (h, nvml.NVML_TEMPERATURE_GPU)),
            ("power", 1e-3, nvml.nvmlDeviceGetPowerUsage, (h,)),
            ("energy", 1e-3, nvml.nvmlDeviceGetTotalEnergyConsumption, (h,)),
            ("sm_clock", 1e6, nvml.nvmlDeviceGetClockInfo, (h, nvml.NVML_CLOCK_SM)),
            ("mem_clock", 1e6, nvml.nvmlDeviceGetClockInfo, (h, nvml.NVML_CLOCK_MEM)),
            ("pcie_tx", 1024, nvml.nvmlDeviceGetPcieThroughput, (h, nvml.NVML_PCIE_UTIL_TX_BYTES)),
            ("pcie_rx", 1024, nvml.nvmlDeviceGetPcieThroughput, (h, nvml.NVML_PCIE_UTIL_RX_BYTES)),
        ]
        for key, scale, function, args in scaled:
            if (value := self._optional(d, key, function, *args)) is not None:
                s.values[key] = value * scale
        self._errors(d, s)
        s.processes = self._processes(d)
        return s

    def _memory(self, d: Device):
        """Memory info v2 where the driver has it: its `used` leaves out driver-reserved memory, as nvidia-smi does."""
        if "memory_v2" not in d.unsupported and hasattr(self.nvml, "nvmlMemory_v2"):
            try:
                return self.nvml.nvmlDeviceGetMemoryInfo(d.handle, version=self.nvml.nvmlMemory_v2)
            except (
                self.nvml.NVMLError_ArgumentVersionMismatch,
                self.nvml.NVMLError_FunctionNotFound,
                self.nvml.NVMLError_NotSupported,
            ):
                d.unsupported.add("memory_v2")
        return self.nvml.nvmlDeviceGetMemoryInfo(d.handle)

    def _errors(self, d: Device, s: GpuSample) -> None:
        nvml, h = self.nvml, d.handle
        if (reasons := self._optional(d, "throttle", nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)) is not None:
            s.labelled["throttle"] = {
                label: int(bool(reasons & getattr(nvml, constant))) for constant, label in THROTTLE_REASONS.items()
            }
        ecc = {
            kind: self._optional(d, "ecc", nvml.nvmlDeviceGetTotalEccErrors, h, error_type, nvml.NVML_AGGREGATE_ECC)
            for kind, error_type in (
                ("corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                ("uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            )
        }
        if None not in ecc.values():
            s.labelled["ecc"] = ecc
        retired = {
            cause: self._optional(d, "retired", nvml.nvmlDeviceGetRetiredPages, h, constant)
            for cause, constant in (
                ("single_bit_ecc", nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
                ("double_bit_ecc", nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            )
        }
        if None not in retired.values():
            s.labelled["retired"] = {cause: len(pages) for cause, pages in retired.items()}
        if (rows := self._optional(d, "remapped", nvml.nvmlDeviceGetRemappedRows, h)) is not None:
            corrected, uncorrected, pending, failed = rows
            s.labelled["remapped"] = {"correctable": corrected, "uncorrectable": uncorrected}
            s.values["remap_pending"], s.values["remap_failed"] = int(bool(pending)), int(bool(failed))

    def _processes(self, d: Device) -> dict[int, tuple[float | None, float | None, int | None]]:
        """pid -> (SM share, memory share, bytes): every process holding memory on the device; the shares are
        the mean of NVML's samples since the last read (0 with none: the process launched nothing meanwhile)."""
        running = self._optional(d, "processes", self.nvml.nvmlDeviceGetComputeRunningProcesses, d.handle) or []
        utilization = self._utilization(d)
        idle = (None, None) if utilization is None else (0.0, 0.0)  # None: not supported (MIG instances)
        processes = {}
        for p in running:
            memory = p.usedGpuMemory if isinstance(p.usedGpuMemory, int) else None  # None: hidden (MIG, no privilege)
            processes[p.pid] = (*(utilization or {}).get(p.pid, idle), memory)
        return processes

    def _utilization(self, d: Device) -> dict[int, tuple[float, float]] | None:
        try:
            samples = self._optional(
                d, "process_utilization", self.nvml.nvmlDeviceGetProcessUtilization, d.handle, d.last_seen_us
            )
        except self.nvml.NVMLError as e:
            if e.value not in (self.nvml.NVML_ERROR_NOT_FOUND, self.nvml.NVML_SUCCESS):
                raise
            return {}  # no sample since last_seen: nothing ran
        if samples is None:
            return None
        sums: dict[int, list[float]] = {}
        for sample in samples:
            total = sums.setdefault(sample.pid, [0.0, 0.0, 0])
            total[0] += sample.smUtil
            total[1] += sample.memUtil
            total[2] += 1
            d.last_seen_us = max(d.last_seen_us, sample.timeStamp)
        return {pid: (sm / n / 100, mem / n / 100) for pid, (sm, mem, n) in sums.items()}

    def _labels(self, d: Device, pid: int | None = None) -> str:
        labels = {"gpu": d.index, "uuid": d.uuid} if pid is None else {"gpu": d.index, "pid": str(pid), "uuid": d.uuid}
        return self.labels.get((d.uuid, pid), labels)

    def _gpu_families(self, out: ExpositionBuilder, samples: list[tuple[Device, GpuSample]]) -> None:
        out.family(
            "alnair_nvml_gpu_info",
            "gauge",
            "Identity of a GPU or MIG instance; join on uuid.",
            (
                (
                    self.labels.get(
                        (d.uuid, "info"),
                        {
                            "gpu": d.index,
                            "uuid": d.uuid,
                            "name": d.name,
                            "driver_version": self.driver_version,
                            "parent_uuid": d.parent_uuid,
                        },
                    ),
                    1,
                )
                for d, _ in samples
            ),
        )
        for metric, kind, help_text, key in GPU_FIELDS:
            out.family(
                metric, kind, help_text, ((self._labels(d), s.values[key]) for d, s in samples if key in s.values)
            )
        for metric, kind, help_text, label, key in GPU_LABELLED_FIELDS:
            out.family(
                metric,
                kind,
                help_text,
                (
                    (self.labels.get((d.uuid, key, value), {"gpu": d.index, label: value, "uuid": d.uuid}), number)
                    for d, s in samples
                    for value, number in s.labelled.get(key, {}).items()
                ),
            )

    def _process_families(self, out: ExpositionBuilder, samples: list[tuple[Device, GpuSample]]) -> None:
        rows = [(self._labels(d, pid), values) for d, s in samples for pid, values in s.processes.items()]
        for position, (metric, help_text) in enumerate(
            [
                (
                    "alnair_nvml_process_sm_utilization_ratio",
                    "Share of the sample period the process's kernels ran on the GPU.",
                ),
                (
                    "alnair_nvml_process_memory_utilization_ratio",
                    "Share of the sample period the process read or wrote device memory.",
                ),
                ("alnair_nvml_process_memory_used_bytes", "Device memory the process holds."),
            ]
        ):
            out.family(
                metric,
                "gauge",
                help_text,
                ((labels, value) for labels, values in rows if (value := values[position]) is not None),
            )
        pids = sorted({pid for _, s in samples for pid in s.processes})
        self.identity.retain((pid, 0) for pid in pids)
        out.family(
            "alnair_nvml_process_info",
            "gauge",
            "Pod identity of a process using a GPU; join on pid.",
            (
                (
                    self.labels.get(
                        (pid, "identity", who := self.identity.of_pid(pid)), {"pid": str(pid), **who.labels()}
                    ),
                    1,
                )
                for pid in pids
            ),
        )

    def _xid_families(self, out: ExpositionBuilder) -> None:
        rows = [(w, self.labels.get((w.labels["uuid"], "xid"), w.labels)) for w in self.xids.counts()]
        out.family(
            "alnair_nvml_xid_watch_up",
            "gauge",
            "1 if the GPU's XID critical errors are being watched; 0 if registering for them failed or is not "
            "supported.",
            ((labels, int(w.watched)) for w, labels in rows),
        )
        out.family(
            "alnair_nvml_xid_errors",
            "counter",
            "XID critical errors on the GPU since its watch began.",
            ((labels, w.total) for w, labels in rows if w.registered_once),
        )
        out.family(
            "alnair_nvml_xid_errors_by_code",
            "counter",
            f"XID critical errors on the GPU since its watch began, by XID code ({MAX_XID_CODES} codes at most, "
            "later ones as other).",
            (
                (self.labels.get((w.labels["uuid"], "xid", code), {**w.labels, "xid": code}), number)
                for w, _ in rows
                if w.registered_once
                for code, number in w.codes()
            ),
        )


@dataclass
class XidWatch:
    """One GPU's XID watch: whether its events are registered now, and what it counted since the first registration."""

    labels: dict[str, str]  # gpu, uuid
    handle: object
    watched: bool = False
    registered_once: bool = False  # from then on its counters are served, from 0, so increase() sees the first error
    total: int = 0
    by_code: dict[str, int] = field(default_factory=dict)  # at most MAX_XID_CODES codes
    other: int = 0  # errors with codes beyond those
    retry_at: float = 0.0  # monotonic time to register it (again); inf: watched, or refused by NVML for good
    failures: int = 0  # registrations failed in a row, for the back-off
    reason: str = ""  # why it is not watched, as last logged

    def codes(self) -> list[tuple[str, int]]:
        return [*self.by_code.items(), *([("other", self.other)] if self.other else [])]


class XidWatcher:
    """Counts the GPUs' XID critical errors from one NVML event set on its own daemon thread. NVML's wait blocks, so
    it never runs in a sample: collect() copies the counts under a lock that no NVML call is made under."""

    def __init__(self, nvml, gpus: list[Device]):
        self.nvml = nvml
        self.watches = {handle_address(g.handle): XidWatch({"gpu": g.index, "uuid": g.uuid}, g.handle) for g in gpus}
        self._lock = threading.Lock()
        self._event_set = None
        self._set_failures = 0  # event sets failed in a row, for the back-off
        self._set_reason = ""  # why the last one failed, as logged
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-xid-watcher", daemon=True)

    def start(self) -> XidWatcher:
        self._thread.start()
        return self

    def stop(self) -> bool:
        """True once the thread has ended (its event set freed); False while a wait in NVML outlives
        XID_STOP_SECONDS."""
        self._stop.set()
        self._thread.join(XID_STOP_SECONDS)
        return not self._thread.is_alive()

    def counts(self) -> list[XidWatch]:
        with self._lock:
            return [replace(w, by_code=dict(w.by_code)) for w in self.watches.values()]

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and any(w.watched or w.retry_at < math.inf for w in self.watches.values()):
                self._stop.wait(self._step_or_back_off())
        finally:
            self._discard_set()

    def _step_or_back_off(self) -> float:
        """One round; the pause before the next (0 after a wait; the back-off after an NVML error)."""
        try:
            return self._step()
        except self.nvml.NVMLError as e:
            self._discard_set()
            if str(e) != self._set_reason:
                log.warning("watching XID errors failed (%s): retrying with back-off", e)
                self._set_reason = str(e)
            self._set_failures += 1
            return back_off(self._set_failures - 1)

    def _step(self) -> float:
        """Registers the GPUs due, then waits for one event; without a GPU registered, the time to the next retry."""
        if self._event_set is None:
            self._event_set = self.nvml.nvmlEventSetCreate()
        now = time.monotonic()
        for watch in list(self.watches.values()):
            if watch.retry_at <= now:
                self._register(watch, now)
        if not any(w.watched for w in self.watches.values()):  # nothing to wait on: sleep until a retry is due
            return max(
                0.0, min((w.retry_at for w in self.watches.values() if w.retry_at < math.inf), default=now) - now
            )
        try:
            event = self.nvml.nvmlEventSetWait_v2(self._event_set, XID_WAIT_MS)
        except self.nvml.NVMLError_Timeout:
            event = None
        if self._set_reason:
            log.info("watching XID errors again")
        self._set_reason, self._set_failures = "", 0
        if event is not None:
            self._count(event)
        return 0.0

    def _register(self, watch: XidWatch, now: float) -> None:
        """A GPU NVML refuses is given up (not supported, or not root on some drivers); a lost one is retried with
        back-off. Other errors propagate: NVML leaves the set undefined after them, so it is built again."""
        nvml, xid = self.nvml, self.nvml.nvmlEventTypeXidCriticalError
        try:
            supported = nvml.nvmlDeviceGetSupportedEventTypes(watch.handle) & xid
            if supported:
                nvml.nvmlDeviceRegisterEvents(watch.handle, xid, self._event_set)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission) as e:
            self._unwatched(watch, math.inf, str(e))
            return
        except nvml.NVMLError_GpuIsLost as e:
            watch.failures += 1
            self._unwatched(watch, now + back_off(watch.failures - 1), str(e))
            return
        if not supported:
            self._unwatched(watch, math.inf, "the GPU does not report XID events")
            return
        with self._lock:
            watch.watched = watch.registered_once = True
        watch.retry_at, watch.failures = math.inf, 0
        if watch.reason:
            log.info("GPU %s (%s): watching XID errors again", watch.labels["gpu"], watch.labels["uuid"])
            watch.reason = ""

    def _unwatched(self, watch: XidWatch, retry_at: float, reason: str) -> None:
        with self._lock:
            watch.watched = False
        watch.retry_at = retry_at
        if reason != watch.reason:
            log.warning("GPU %s (%s): XID errors not watched: %s", watch.labels["gpu"], watch.labels["uuid"], reason)
            watch.reason = reason

    def _discard_set(self) -> None:
        """Frees the event set; the GPUs it watched are registered again in the next one."""
        if self._event_set is None:
            return
        with self._lock:
            for watch in self.watches.values():
                if watch.watched:
                    watch.watched, watch.retry_at = False, 0.0
        try:
            self.nvml.nvmlEventSetFree(self._event_set)
        except self.nvml.NVMLError as e:
            log.debug("freeing the XID event set failed: %s", e)
        self._event_set = None

    def _count(self, event) -> None:
        watch = self.watches.get(handle_address(event.device)) or self._named_by_nvml(event.device)
        if watch is None:
            return
        code = str(event.eventData)
        with self._lock:
            watch.total += 1
            if code in watch.by_code or len(watch.by_code) < MAX_XID_CODES:
                watch.by_code[code] = watch.by_code.get(code, 0) + 1
            else:
                watch.other += 1

    def _named_by_nvml(self, handle) -> XidWatch | None:
        """A watch for an event's device that is not among the GPUs registered, named by NVML from its handle."""
        try:
            labels = {
                "gpu": str(self.nvml.nvmlDeviceGetIndex(handle)),
                "uuid": text(self.nvml.nvmlDeviceGetUUID(handle)),
            }
        except self.nvml.NVMLError as e:
            log.warning("an XID error on a device NVML cannot name (%s) is not counted", e)
            return None
        watch = XidWatch(labels, handle, registered_once=True, retry_at=math.inf)
        with self._lock:
            self.watches[handle_address(handle)] = watch
        return watch


def back_off(failures: int) -> float:
    return XID_RETRY_SECONDS[min(failures, len(XID_RETRY_SECONDS) - 1)]


def handle_address(handle) -> int | None:
    """NVML device handles are pointers, a new ctypes object from each call: one device, one address (None: NULL)."""
    return ctypes.cast(handle, ctypes.c_void_p).value


def import_pynvml():
    try:
        import pynvml
    except ImportError:
        raise CollectorUnavailable("nvidia-ml-py is not installed") from None
    return pynvml


def text(value) -> str:
    """NVML strings: bytes in old bindings, str in new ones."""
    return value.decode() if isinstance(value, bytes) else value
