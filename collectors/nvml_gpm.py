"""GPM (GPU Performance Monitoring, Hopper and later) for the nvml collector: DCGM's profiling fields from NVML, each
device's computed between its GPM sample of the collector's previous collect and this one's."""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

MIB = 2**20
# fmt: off
# (family, its other labels, pynvml's metric id, scale): GPM gives percentages, served as ratios, and MiB/s, as bytes/s.
SERIES = [
    ("alnair_nvml_graphics_engine_active_ratio", {}, "NVML_GPM_METRIC_GRAPHICS_UTIL", 0.01),
    ("alnair_nvml_sm_active_ratio", {}, "NVML_GPM_METRIC_SM_UTIL", 0.01),
    ("alnair_nvml_sm_occupancy_ratio", {}, "NVML_GPM_METRIC_SM_OCCUPANCY", 0.01),
    ("alnair_nvml_pipe_active_ratio", {"pipe": "tensor"}, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 0.01),
    ("alnair_nvml_pipe_active_ratio", {"pipe": "fp64"}, "NVML_GPM_METRIC_FP64_UTIL", 0.01),
    ("alnair_nvml_pipe_active_ratio", {"pipe": "fp32"}, "NVML_GPM_METRIC_FP32_UTIL", 0.01),
    ("alnair_nvml_pipe_active_ratio", {"pipe": "fp16"}, "NVML_GPM_METRIC_FP16_UTIL", 0.01),
    ("alnair_nvml_dram_active_ratio", {}, "NVML_GPM_METRIC_DRAM_BW_UTIL", 0.01),
    ("alnair_nvml_link_bytes_per_second", {"link": "pcie", "direction": "transmit"},
     "NVML_GPM_METRIC_PCIE_TX_PER_SEC", MIB),
    ("alnair_nvml_link_bytes_per_second", {"link": "pcie", "direction": "receive"},
     "NVML_GPM_METRIC_PCIE_RX_PER_SEC", MIB),
    ("alnair_nvml_link_bytes_per_second", {"link": "nvlink", "direction": "transmit"},
     "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", MIB),
    ("alnair_nvml_link_bytes_per_second", {"link": "nvlink", "direction": "receive"},
     "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", MIB),
]
FAMILIES = {
    "alnair_nvml_graphics_engine_active_ratio":
        "Share of the collector's interval the graphics or compute engine was busy "
        "(GPM; DCGM_FI_PROF_GR_ENGINE_ACTIVE).",
    "alnair_nvml_sm_active_ratio":
        "Share of the collector's interval the SMs had a warp resident, averaged over SMs "
        "(GPM; DCGM_FI_PROF_SM_ACTIVE).",
    "alnair_nvml_sm_occupancy_ratio":
        "Resident warps over the SMs' maximum, averaged over the collector's interval "
        "(GPM; DCGM_FI_PROF_SM_OCCUPANCY).",
    "alnair_nvml_pipe_active_ratio":
        "Share of the collector's interval the pipe was busy, averaged over SMs (GPM; DCGM_FI_PROF_PIPE_*_ACTIVE).",
    "alnair_nvml_dram_active_ratio":
        "Device memory bandwidth used over its peak, over the collector's interval (GPM; DCGM_FI_PROF_DRAM_ACTIVE).",
    "alnair_nvml_link_bytes_per_second":
        "PCIe or NVLink (all links) throughput over the collector's interval "
        "(GPM; DCGM_FI_PROF_PCIE_*_BYTES, NVLINK_*_BYTES).",
}
# fmt: on


class NoGpm(Exception):
    """The GPU has no GPM: an older GPU, or a driver before GPM."""


@dataclass
class GpmDevice:
    """A device's two sample buffers: `older` holds the previous collect's sample once `primed`; `newer` takes this
    one's."""

    older: object
    newer: object
    gpu_instance_id: int | None  # a MIG instance's, which nvmlGpmMigSampleGet takes with its parent's handle
    primed: bool = False


class GpmSampler:
    """GPM per device for the nvml collector's thread: a GPU is sampled through its handle, a MIG instance through its
    parent's handle and its GPU instance id. A device that refuses GPM is said once (INFO) and never asked again."""

    def __init__(self, nvml) -> None:
        self.nvml = nvml
        self.devices: dict[str, GpmDevice] = {}  # by uuid
        self.refused: set[str] = set()  # uuids of devices never asked again
        self.without_gpm: set[str] = set()  # uuids of GPUs without GPM at all: their MIG instances are not asked either
        # FunctionNotFound: drivers before GPM
        self.refusals = (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)
        self.request = nvml.c_nvmlGpmMetricsGet_t(version=nvml.NVML_GPM_METRICS_GET_VERSION, numMetrics=len(SERIES))
        for metric, (_, _, metric_id, _) in zip(self.request.metrics, SERIES):
            metric.metricId = getattr(nvml, metric_id)

    def measure(self, device, parent_handle=None) -> dict[int, float]:
        """{index in SERIES: value} since the device's last measure; empty on its first, after an NVML error, for the
        metrics it does not measure and without GPM. `device` has index, uuid, handle and parent_uuid (MIG
        instances)."""
        if device.uuid in self.refused or device.parent_uuid in self.without_gpm:  # the parent's line said it
            return {}
        try:
            state = self.devices.get(device.uuid) or self._open(device, parent_handle)
            return self._measure(state, device.handle, parent_handle)
        except NoGpm as e:
            self.without_gpm.add(device.uuid)
            self._refused(device, str(e))
        except self.refusals as e:  # a GPU in MIG mode may refuse whole-GPU samples and serve its instances'
            self._refused(device, str(e))
        except self.nvml.NVMLError as e:
            log.debug("GPU %s (%s): GPM sample failed: %s", device.index, device.uuid, e)
            if device.uuid in self.devices:
                self.devices[device.uuid].primed = False  # its next sample starts a new interval
        return {}

    def retain(self, uuids: set[str]) -> None:
        """Frees the samples of devices not measured in this collect (a failing GPU, a MIG instance gone)."""
        for uuid in self.devices.keys() - uuids:
            self._free(self.devices.pop(uuid))

    def close(self) -> None:
        self.retain(set())

    def _open(self, device, parent_handle) -> GpmDevice:
        if parent_handle is None:
            self._check_support(device.handle)
        instance = None if parent_handle is None else self.nvml.nvmlDeviceGetGpuInstanceId(device.handle)
        older = self.nvml.nvmlGpmSampleAlloc()
        try:
            newer = self.nvml.nvmlGpmSampleAlloc()
        except self.nvml.NVMLError:
            self.nvml.nvmlGpmSampleFree(older)
            raise
        self.devices[device.uuid] = GpmDevice(older, newer, instance)
        return self.devices[device.uuid]

    def _check_support(self, handle) -> None:
        try:
            supported = self.nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice
        except self.refusals as e:
            raise NoGpm(str(e)) from None
        if not supported:
            raise NoGpm("the GPU does not support it (Hopper or later)")

    def _measure(self, state: GpmDevice, handle, parent_handle) -> dict[int, float]:
        if parent_handle is None:
            self.nvml.nvmlGpmSampleGet(handle, state.newer)
        else:
            self.nvml.nvmlGpmMigSampleGet(parent_handle, state.gpu_instance_id, state.newer)
        state.older, state.newer = state.newer, state.older  # this sample is the next interval's start
        if not state.primed:
            state.primed = True
            return {}
        self.request.sample1, self.request.sample2 = state.newer, state.older
        self.nvml.nvmlGpmMetricsGet(self.request)
        success = self.nvml.NVML_SUCCESS
        return {
            i: metric.value * scale
            for i, (metric, (_, _, _, scale)) in enumerate(zip(self.request.metrics, SERIES))
            if metric.nvmlReturn == success
        }

    def _refused(self, device, reason: str) -> None:
        self.refused.add(device.uuid)
        if device.uuid in self.devices:
            self._free(self.devices.pop(device.uuid))
        log.info(
            "GPU %s (%s): no GPM metrics (SM active, occupancy, pipes, DRAM, link bytes): %s",
            device.index,
            device.uuid,
            reason,
        )

    def _free(self, state: GpmDevice) -> None:
        for sample in (state.older, state.newer):
            try:
                self.nvml.nvmlGpmSampleFree(sample)
            except self.nvml.NVMLError as e:
                log.debug("freeing a GPM sample failed: %s", e)


def write_families(out, measured, label_set) -> None:
    """The GPM families into `out`; `measured` is [(device, measure()'s values)], `label_set(device, index in SERIES,
    its other labels)` the escaped label set of one series."""
    for family, help_text in FAMILIES.items():
        series = [(i, labels) for i, (name, labels, _, _) in enumerate(SERIES) if name == family]
        out.family(
            family,
            "gauge",
            help_text,
            (
                (label_set(device, i, labels), values[i])
                for device, values in measured
                for i, labels in series
                if i in values
            ),
        )
