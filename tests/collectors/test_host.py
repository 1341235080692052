"""The host collector reports CPU time per CPU and mode, memory and load, in base units."""

from __future__ import annotations

import argparse
import os

from alnair.collectors.host import HostCollector
from alnair.exporter.plugin import render
from support import parse_samples


def sample() -> dict[str, float]:
    return parse_samples(render(HostCollector(argparse.Namespace(procfs="/proc")).collect()).decode())


def proc_stat_seconds(cpu: int, column: int) -> float:
    for line in open("/proc/stat"):
        if line.startswith(f"cpu{cpu} "):
            return int(line.split()[column]) / os.sysconf("SC_CLK_TCK")
    raise AssertionError("cpu not in /proc/stat")


def test_cpu_seconds_per_cpu_and_mode_match_proc_stat():
    s = sample()
    cpus = os.cpu_count()
    for mode in ("user", "system", "idle", "iowait", "irq", "softirq", "steal"):
        assert sum(1 for k in s if k.startswith("alnair_host_cpu_seconds_total{") and f'mode="{mode}"' in k) == cpus
    idle = s['alnair_host_cpu_seconds_total{cpu="0",mode="idle"}']
    assert 0 <= proc_stat_seconds(0, 4) - idle < 5.0  # column 4 is idle; a few seconds may pass


def test_memory_and_load_match_the_kernel():
    s = sample()
    meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in open("/proc/meminfo")}
    assert s["alnair_host_memory_total_bytes"] == meminfo["MemTotal"]
    assert abs(s["alnair_host_memory_available_bytes"] - meminfo["MemAvailable"]) < 256 * 2**20
    assert abs(s["alnair_host_load1"] - os.getloadavg()[0]) < 1.0
    assert s["alnair_host_cpus"] == os.cpu_count()
