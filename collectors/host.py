"""The host collector: CPU time per CPU and mode, memory, swap and load (psutil)."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

MEMORY_FIELDS = ("total", "available", "used", "free", "buffers", "cached", "shared")


class HostCollector:
    help = "Host CPU time per CPU and mode, memory, swap and load average."
    default_interval_seconds = 5.0

    def __init__(self, options):
        psutil.PROCFS_PATH = options.procfs  # the host's /proc when run as a DaemonSet

    def collect(self) -> Iterator[Metric]:
        yield self._cpu_seconds()
        yield from self._memory()
        yield from self._load()

    def _cpu_seconds(self) -> Metric:
        cpu = CounterMetricFamily(
            "alnair_host_cpu_seconds", "Seconds each CPU spent in each mode.", labels=["cpu", "mode"]
        )
        for index, times in enumerate(psutil.cpu_times(percpu=True)):
            for mode, seconds in times._asdict().items():
                cpu.add_metric([str(index), mode], seconds)
        return cpu

    def _memory(self) -> Iterator[Metric]:
        memory = psutil.virtual_memory()
        for field in MEMORY_FIELDS:
            if hasattr(memory, field):
                yield GaugeMetricFamily(
                    f"alnair_host_memory_{field}_bytes", f"Host memory: {field}.", value=getattr(memory, field)
                )
        swap = psutil.swap_memory()
        yield GaugeMetricFamily("alnair_host_swap_total_bytes", "Host swap space.", value=swap.total)
        yield GaugeMetricFamily("alnair_host_swap_used_bytes", "Host swap in use.", value=swap.used)

    def _load(self) -> Iterator[Metric]:
        for window, value in zip((1, 5, 15), psutil.getloadavg()):
            yield GaugeMetricFamily(f"alnair_host_load{window}", f"{window}-minute load average.", value=value)
        yield GaugeMetricFamily("alnair_host_cpus", "Logical CPUs.", value=psutil.cpu_count())
