"""The optional dcgm-exporter names group: the DCGM_FI_* names that dcgm-exporter's default dashboard and counters
use, recorded from the nvml collector's series in DCGM's units and with dcgm-exporter's labels (gpu, UUID, device,
modelName, Hostname, DCGM_FI_DRIVER_VERSION, and namespace, pod, container of the pods using the GPU), so dashboards
and alerts built for dcgm-exporter keep working. docs/dcgm-migration.md says what differs and what is not served."""

from __future__ import annotations

from dataclasses import dataclass

from .promql import RULES, atom, by, renamed, selector, with_node, with_pod
from .recording import Recorded

# The labels every recorded series has: dcgm-exporter's, as its metrics template writes them (pci_bus_id aside:
# Alnair does not read it), and Prometheus's own instance and job.
DCGM_LABELS = (
    "instance",
    "job",
    "gpu",
    "UUID",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "namespace",
    "pod",
    "container",
)
LABELS = "uuid_pod:alnair_nvml_gpu_info:dcgm_labels"  # recorded first; every DCGM name takes its labels from it

# Whole GPUs only: dcgm-exporter labels a MIG instance with its parent's UUID and GPU_I_ID, which Alnair lacks.
GPUS = selector(RULES, "alnair_nvml_gpu_info", (), 'parent_uuid=""')


def processes_in_pods(collector: str, series: str) -> str:
    """Per GPU (`uuid`) and process, its pod's names. Processes outside pods (`<none>`) are left out, as dcgm-exporter
    (which asks the kubelet which pod holds each GPU) never sees them, and so are pods whose names the exporter could
    not learn (`<unknown>`): neither is a name dashboards could select."""
    return with_pod(RULES, by(["instance", "uuid", "pid"], "group", series), collector, 'pod!~"<none>|<unknown>"')


# Pods using each GPU: a process NVML lists on it (with memory or utilization; NVML hides one or the other on some
# GPUs), or one whose CUDA intercept used it (its pod is known even where the exporter cannot see its pid).
PODS = by(
    ["instance", "uuid", "namespace", "pod", "container"],
    "group",
    f"{processes_in_pods('nvml', 'alnair_nvml_process_memory_used_bytes or alnair_nvml_process_sm_utilization_ratio')}"
    f" or {processes_in_pods('cuda', 'alnair_cuda_memory_used_bytes')}",
)


def gpu_labels() -> str:
    """One series per GPU and pod using it, or one per GPU no pod uses, labelled as dcgm-exporter labels its series
    with Kubernetes GPUs shared among pods (one series per pod): the GPU's identity and node renamed to its labels."""
    used = f"{atom(PODS)} * on (instance, uuid) group_left (gpu, job, name, driver_version) {GPUS}"
    joined = f"{used} or on (instance, uuid) {GPUS}"
    labelled = with_node(RULES, joined)
    for label, source, value in (
        ("UUID", "uuid", "$1"),
        ("device", "gpu", "nvidia$1"),
        ("modelName", "name", "$1"),
        ("Hostname", "node", "$1"),
        ("DCGM_FI_DRIVER_VERSION", "driver_version", "$1"),
    ):
        labelled = renamed(labelled, label, source, value)
    return by(DCGM_LABELS, "group", labelled)


@dataclass(frozen=True)
class DcgmName:
    name: str
    what: str  # dcgm-exporter's help, shortened
    unit: str  # DCGM's
    source: str  # Alnair's series, a selector
    conversion: str = "{}"  # the source into DCGM's unit
    differs: str = ""  # what a user of dcgm-exporter would notice

    @property
    def expr(self) -> str:
        """The converted source on each label set of LABELS for its GPU (several: one per pod using it)."""
        return (
            f"{renamed(self.conversion.format(self.source), 'UUID', 'uuid')} * on (instance, UUID) group_right {LABELS}"
        )


GPM = "NVML's GPM: Hopper and later only"
VOLATILE = "the volatile counts (`_VOL_TOTAL`) are not served"

# fmt: off
NAMES = [
    DcgmName("DCGM_FI_DEV_GPU_TEMP", "GPU temperature", "°C", "alnair_nvml_temperature_celsius"),
    DcgmName("DCGM_FI_DEV_POWER_USAGE", "power draw", "W", "alnair_nvml_power_watts"),
    DcgmName("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy used since the driver loaded (a counter)", "mJ",
             "alnair_nvml_energy_joules_total", "1000 * {}"),
    DcgmName("DCGM_FI_DEV_SM_CLOCK", "SM clock", "MHz", "alnair_nvml_sm_clock_hertz", "{} / 1e6"),
    DcgmName("DCGM_FI_DEV_MEM_CLOCK", "memory clock", "MHz", "alnair_nvml_memory_clock_hertz", "{} / 1e6"),
    DcgmName("DCGM_FI_DEV_GPU_UTIL", "share of the sample period a kernel ran", "%", "alnair_nvml_sm_utilization_ratio",
             "100 * {}"),
    DcgmName("DCGM_FI_DEV_MEM_COPY_UTIL", "share of the sample period device memory was read or written", "%",
             "alnair_nvml_memory_utilization_ratio", "100 * {}"),
    DcgmName("DCGM_FI_DEV_FB_USED", "device memory used", "MiB", "alnair_nvml_memory_used_bytes", "{} / 1048576",
             "not rounded down to whole MiB"),
    DcgmName("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "rows remapped for correctable errors", "rows",
             'alnair_nvml_remapped_rows{type="correctable"}'),
    DcgmName("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "rows remapped for uncorrectable errors", "rows",
             'alnair_nvml_remapped_rows{type="uncorrectable"}'),
    DcgmName("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1 if a row remapping failed", "0 or 1",
             "alnair_nvml_remapped_rows_failed"),
    DcgmName("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "single-bit (corrected) ECC errors over the GPU's life", "errors",
             'alnair_nvml_ecc_errors_total{type="corrected"}', differs=VOLATILE),
    DcgmName("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "double-bit (uncorrected) ECC errors over the GPU's life", "errors",
             'alnair_nvml_ecc_errors_total{type="uncorrected"}', differs=VOLATILE),
    DcgmName("DCGM_FI_DEV_RETIRED_SBE", "pages retired for repeated single-bit errors", "pages",
             'alnair_nvml_retired_pages{cause="single_bit_ecc"}'),
    DcgmName("DCGM_FI_DEV_RETIRED_DBE", "pages retired for a double-bit error", "pages",
             'alnair_nvml_retired_pages{cause="double_bit_ecc"}'),
    DcgmName("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "share of time the graphics engine was active", "ratio 0-1",
             "alnair_nvml_graphics_engine_active_ratio", differs=GPM),
    DcgmName("DCGM_FI_PROF_SM_ACTIVE", "share of cycles an SM had at least one warp", "ratio 0-1",
             "alnair_nvml_sm_active_ratio", differs=GPM),
    DcgmName("DCGM_FI_PROF_SM_OCCUPANCY", "warps resident on an SM over its maximum", "ratio 0-1",
             "alnair_nvml_sm_occupancy_ratio", differs=GPM),
    *(DcgmName(f"DCGM_FI_PROF_PIPE_{pipe.upper()}_ACTIVE", f"share of cycles the {pipe} pipe was active", "ratio 0-1",
               f'alnair_nvml_pipe_active_ratio{{pipe="{pipe}"}}', differs=GPM)
      for pipe in ("tensor", "fp64", "fp32", "fp16")),
    DcgmName("DCGM_FI_PROF_DRAM_ACTIVE", "share of cycles the device memory interface was busy", "ratio 0-1",
             "alnair_nvml_dram_active_ratio", differs=GPM),
    *(DcgmName(f"DCGM_FI_PROF_{link.upper()}_{short}_BYTES", f"{link_name} {direction} throughput, headers included",
               "B/s", f'alnair_nvml_link_bytes_per_second{{link="{link}", direction="{direction}"}}', differs=GPM)
      for link, link_name in (("pcie", "PCIe"), ("nvlink", "NVLink"))
      for short, direction in (("TX", "transmit"), ("RX", "receive"))),
]
# fmt: on

DCGM = [
    Recorded(
        LABELS,
        gpu_labels(),
        "per GPU (whole GPUs, not MIG instances) and pod using it, or per GPU no pod uses: 1, with dcgm-exporter's "
        "labels (gpu, UUID, device, modelName, Hostname, DCGM_FI_DRIVER_VERSION, namespace, pod, container)",
    ),
    *(
        Recorded(n.name, n.expr, f"{n.what} ({n.unit}), from `{n.conversion.format(n.source)}` on the labels above")
        for n in NAMES
    ),
]

GROUPS = {"alnair-dcgm-names": DCGM}
