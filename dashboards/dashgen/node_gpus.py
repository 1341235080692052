"""Node GPUs: every GPU of the chosen nodes from NVML, its utilization, memory, power, clocks, throttling and
errors, and the host's CPU and memory beside them."""

from __future__ import annotations

from . import variables as v
from .model import Dashboard, Query, row, stat, states, table, timeseries
from .promql import (
    DASHBOARD as S,
    GPU,
    NODE,
    gpu_memory_used_share,
    gpus_answering,
    increase,
    rate,
    selector,
    with_node,
)

ON_GPU = "{{node}} GPU {{gpu}}"


def per_gpu(metric: str, legend: str = ON_GPU, *matchers: str) -> Query:
    return Query(with_node(S, selector(S, metric, GPU, *matchers)), legend)


INVENTORY = row(
    "GPUs",
    table(
        "GPUs",
        "One row per GPU and MIG instance: its node, NVML index (as nvidia-smi numbers GPUs), model, driver "
        "and UUID, and its memory installed (Value). MIG instances name their GPU in parent_uuid.",
        "bytes",
        Query(
            with_node(
                S,
                f"{selector(S, 'alnair_nvml_memory_total_bytes', GPU)} * on (instance, gpu, uuid) "
                f"group_left (name, driver_version, parent_uuid) {selector(S, 'alnair_nvml_gpu_info', GPU)}",
            )
        ),
        width=16,
        height=6,
        hidden_columns=("Time", "job"),
    ),
    stat(
        "GPUs answering NVML",
        "GPUs (not MIG instances) that answered NVML in the exporter's last sample, per node. "
        "Fewer than the node has means a GPU fell off the bus or errors on every query (the AlnairGpuMissing alert).",
        "none",
        Query(with_node(S, gpus_answering(S)), "{{node}}"),
        width=8,
        height=6,
    ),
)

UTILIZATION = row(
    "Utilization and memory",
    timeseries(
        "SM utilization",
        "Share of the last sample period in which a kernel ran on the GPU (NVML's "
        "utilization.gpu). 100% means a kernel was always running, not that every SM was busy.",
        "percentunit",
        per_gpu("alnair_nvml_sm_utilization_ratio"),
        min=0,
        max=1,
    ),
    timeseries(
        "Memory bandwidth utilization",
        "Share of the last sample period in which device memory was read or written (NVML's utilization.memory).",
        "percentunit",
        per_gpu("alnair_nvml_memory_utilization_ratio"),
        min=0,
        max=1,
    ),
    timeseries(
        "Memory used and installed",
        "Device memory in use (without the driver's reserved memory, as nvidia-smi "
        "shows it) and installed, in bytes: used and free add up to installed.",
        "bytes",
        per_gpu("alnair_nvml_memory_used_bytes", f"{ON_GPU} used"),
        per_gpu("alnair_nvml_memory_total_bytes", f"{ON_GPU} installed"),
        min=0,
    ),
    timeseries(
        "Memory used share",
        "Device memory in use over installed.",
        "percentunit",
        Query(with_node(S, gpu_memory_used_share(S)), ON_GPU),
        min=0,
        max=1,
    ),
)

POWER = row(
    "Power, temperature and clocks",
    timeseries(
        "Temperature",
        "GPU core temperature. Hardware slowdown starts near 90 °C on data-centre GPUs; the "
        "AlnairGpuTemperatureHigh alert fires above its threshold.",
        "celsius",
        per_gpu("alnair_nvml_temperature_celsius"),
        width=8,
    ),
    timeseries(
        "Power",
        "Power draw as NVML sampled it, and the mean power over each interval from the energy counter "
        "(which also sees the peaks between samples).",
        "watt",
        per_gpu("alnair_nvml_power_watts", f"{ON_GPU} sampled"),
        Query(with_node(S, rate(S, "alnair_nvml_energy_joules_total", GPU)), f"{ON_GPU} mean"),
        min=0,
        width=8,
    ),
    timeseries(
        "Energy since the driver loaded",
        "The GPU's energy counter: its slope is the power; it starts again from 0 when the driver reloads.",
        "joule",
        per_gpu("alnair_nvml_energy_joules_total"),
        min=0,
        width=8,
    ),
    timeseries(
        "Clocks",
        "SM and memory clocks. SM clocks below their usual value while busy mean throttling (see the "
        "throttle reasons).",
        "hertz",
        per_gpu("alnair_nvml_sm_clock_hertz", f"{ON_GPU} SM"),
        per_gpu("alnair_nvml_memory_clock_hertz", f"{ON_GPU} memory"),
        min=0,
    ),
    timeseries(
        "PCIe throughput",
        "Bytes per second over PCIe, as NVML measured in a 20 ms window of each sample.",
        "binBps",
        per_gpu("alnair_nvml_pcie_transmit_bytes_per_second", f"{ON_GPU} transmit"),
        per_gpu("alnair_nvml_pcie_receive_bytes_per_second", f"{ON_GPU} receive"),
        min=0,
    ),
)

HEALTH = row(
    "Throttling and errors",
    states(
        "Throttle reasons",
        "Each reason NVML reports for holding the clocks down, while it holds (idle is left out). hw_thermal_slowdown "
        "and hw_power_brake_slowdown halve the clocks or worse: the AlnairGpuHardwareThrottling alert.",
        per_gpu("alnair_nvml_throttle_reason_active", f"{ON_GPU} {{{{reason}}}}", 'reason!="gpu_idle"'),
        off=("inactive", "transparent"),
        on=("active", "orange"),
        width=24,
    ),
    timeseries(
        "New ECC errors",
        "ECC errors counted in each interval, corrected and uncorrected. Any uncorrected error "
        "fires AlnairGpuEccUncorrectable.",
        "short",
        Query(with_node(S, increase(S, "alnair_nvml_ecc_errors_total", GPU)), f"{ON_GPU} {{{{type}}}}"),
        min=0,
    ),
    stat(
        "ECC errors since manufacture",
        "The GPU's aggregate ECC error counters, corrected and uncorrected.",
        "short",
        per_gpu("alnair_nvml_ecc_errors_total", f"{ON_GPU} {{{{type}}}}"),
    ),
    timeseries(
        "Retired pages and remapped rows",
        "Memory pages retired for ECC errors (GPUs before A100) and rows remapped (A100 and later), by cause.",
        "short",
        per_gpu("alnair_nvml_retired_pages", f"{ON_GPU} retired {{{{cause}}}}"),
        per_gpu("alnair_nvml_remapped_rows", f"{ON_GPU} remapped {{{{type}}}}"),
        min=0,
    ),
    states(
        "Row remapping pending or failed",
        "Pending: a remapping waits for the next GPU reset "
        "(AlnairGpuRowRemapPending). Failed: the GPU ran out of spare rows (AlnairGpuRowRemapFailed).",
        per_gpu("alnair_nvml_remapped_rows_pending", f"{ON_GPU} pending"),
        per_gpu("alnair_nvml_remapped_rows_failed", f"{ON_GPU} failed"),
        off=("no", "green"),
        on=("yes", "red"),
    ),
    timeseries(
        "XID errors",
        "XID critical errors NVML reported in each interval (AlnairGpuXidError), in all and by "
        "XID code. The code says what failed: NVIDIA's XID catalog.",
        "short",
        Query(with_node(S, increase(S, "alnair_nvml_xid_errors_total", GPU)), ON_GPU),
        Query(with_node(S, increase(S, "alnair_nvml_xid_errors_by_code_total", GPU)), f"{ON_GPU} XID {{{{xid}}}}"),
        min=0,
    ),
    table(
        "XID errors by code",
        "Each XID code seen on a GPU since the exporter began watching it, and how often.",
        "none",
        per_gpu("alnair_nvml_xid_errors_by_code_total"),
        hidden_columns=("Time", "job", "__name__"),
    ),
)

BUSY = rate(S, "alnair_host_cpu_seconds_total", NODE, 'mode!="idle"')
HOST = row(
    "Host",
    timeseries(
        "Host CPU",
        "Share of the node's CPUs busy, by mode (idle left out). High iowait or user beside a high "
        "data stall points at the input pipeline.",
        "percentunit",
        Query(
            with_node(
                S,
                f"sum by (instance, mode) ({BUSY}) / on (instance) group_left {selector(S, 'alnair_host_cpus', NODE)}",
            ),
            "{{node}} {{mode}}",
        ),
        min=0,
        max=1,
    ),
    timeseries(
        "Host memory",
        "The node's memory in use, available to new processes, and installed.",
        "bytes",
        *(
            Query(with_node(S, selector(S, f"alnair_host_memory_{kind}_bytes", NODE)), f"{{{{node}}}} {kind}")
            for kind in ("used", "available", "total")
        ),
        min=0,
    ),
)

DASHBOARD = Dashboard(
    "alnair-node-gpus",
    "Alnair / Node GPUs",
    "Every GPU of the chosen nodes from NVML: utilization, memory, power, clocks, throttling and errors.",
    (v.DATASOURCE, v.NODE, v.INSTANCE, v.GPU),
    (INVENTORY, UTILIZATION, POWER, HEALTH, HOST),
)
