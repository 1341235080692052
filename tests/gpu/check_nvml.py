"""The nvml collector on a real GPU, against nvidia-smi: a PyTorch matmul process's SM utilization and memory,
the per-GPU metrics, the XID watch, the scrape time and closing. Run from the repository root, no install needed:

    python3 tests/gpu/check_nvml.py

Prints each check with PASS/FAIL and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIM = Path(tempfile.mkdtemp(prefix="alnair-shim-")) / "alnair"  # `alnair.*` from the source folders
SHIM.mkdir()
for part in ("abi", "exporter", "collectors"):
    (SHIM / part).symlink_to(ROOT / part)
for module in (ROOT / "sdk").glob("*.py"):  # alnair itself: the exporter takes its command-line conventions from it
    (SHIM / module.name).symlink_to(module)
sys.path.insert(0, str(SHIM.parent))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from alnair.collectors.nvml import XID_STOP_SECONDS, XID_WAIT_MS, NvmlCollector  # noqa: E402
from alnair.exporter.registry import CollectorSpec  # noqa: E402
from alnair.exporter.sampler import CollectorRunner  # noqa: E402
from alnair.exporter.scrape import ScrapeAssembler  # noqa: E402

MATMUL = """
import sys, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16); b = torch.randn_like(a)
keep = torch.empty(4 * 2**30, dtype=torch.uint8, device="cuda")  # 4 GiB more, so memory is not trivial
print("ready", flush=True)
while True:
    for _ in range(50):
        c = a @ b
    torch.cuda.synchronize()
"""
FAILED: list[str] = []


def check(name: str, ok: bool, detail: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
    if not ok:
        FAILED.append(name)


def samples(text: bytes) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
    }


def find(metrics, metric: str, **labels) -> float | None:
    wanted = set(labels.items())
    return next((v for (n, ls), v in metrics.items() if n == metric and wanted <= ls), None)


def smi(query: str, kind: str = "gpu") -> list[list[str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-{kind}={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [[field.strip() for field in line.split(",")] for line in out.strip().splitlines()]


def check_process(metrics, pid: int) -> None:
    sm = find(metrics, "alnair_nvml_process_sm_utilization_ratio", pid=str(pid))
    check("matmul pid SM utilization > 80%", sm is not None and sm > 0.8, f"pid {pid}: {sm}")
    ours = find(metrics, "alnair_nvml_process_memory_used_bytes", pid=str(pid))
    theirs = next((float(mib) * 2**20 for p, mib in smi("pid,used_memory", "compute-apps") if int(p) == pid), None)
    close = ours is not None and theirs is not None and abs(ours - theirs) <= 0.01 * theirs
    check("matmul pid GPU memory within 1% of nvidia-smi", close, f"collector {ours} B, nvidia-smi {theirs} B")
    info = [dict(ls) for (n, ls), _ in metrics.items() if n == "alnair_nvml_process_info" and ("pid", str(pid)) in ls]
    check("matmul pid has a process_info series", len(info) == 1, str(info))


def check_gpus(metrics) -> None:
    rows = smi(
        "index,uuid,name,driver_version,memory.total,memory.used,temperature.gpu,power.draw,clocks.sm,clocks.mem"
    )
    for index, uuid, name, driver, total, used, temperature, power, sm_clock, mem_clock in rows:
        at = {"uuid": uuid}
        info = find(metrics, "alnair_nvml_gpu_info", gpu=index, uuid=uuid, name=name, driver_version=driver)
        check(f"GPU {index} info (uuid, name, driver)", info == 1, f"{uuid} {name} {driver}")
        pairs = [
            ("memory total MiB", find(metrics, "alnair_nvml_memory_total_bytes", **at), float(total) * 2**20, 0.001),
            ("memory used MiB", find(metrics, "alnair_nvml_memory_used_bytes", **at), float(used) * 2**20, 0.01),
            (
                "temperature C",
                find(metrics, "alnair_nvml_temperature_celsius", **at),
                float(temperature),
                3 / float(temperature),
            ),
            ("power W", find(metrics, "alnair_nvml_power_watts", **at), float(power), 0.15),
            ("SM clock MHz", find(metrics, "alnair_nvml_sm_clock_hertz", **at), float(sm_clock) * 1e6, 0.05),
            ("memory clock MHz", find(metrics, "alnair_nvml_memory_clock_hertz", **at), float(mem_clock) * 1e6, 0.01),
        ]
        for what, ours, theirs, tolerance in pairs:
            ok = ours is not None and abs(ours - theirs) <= tolerance * theirs + 1
            check(
                f"GPU {index} {what} matches nvidia-smi (±{tolerance:.0%})",
                ok,
                f"collector {ours}, nvidia-smi {theirs}",
            )
        for family in (
            "alnair_nvml_energy_joules_total",
            "alnair_nvml_pcie_transmit_bytes_per_second",
            "alnair_nvml_sm_utilization_ratio",
        ):
            print(f"      {family}{{uuid={uuid}}} = {find(metrics, family, **at)}")


def check_xid_watch(metrics) -> None:
    for index, uuid in smi("index,uuid"):
        up = find(metrics, "alnair_nvml_xid_watch_up", gpu=index, uuid=uuid)
        check(
            f"GPU {index} XID events watched (watch_up 1)",
            up == 1,
            f"watch_up {up}"
            + ("" if up == 1 else " (the collector logged why; some drivers let only root watch XIDs)"),
        )
        errors = find(metrics, "alnair_nvml_xid_errors_total", gpu=index, uuid=uuid)
        check(f"GPU {index} alnair_nvml_xid_errors_total exists at 0", errors == 0, f"{errors}")


def check_close(collector: NvmlCollector) -> None:
    """close() returns once the XID watcher has left NVML's wait (else it gives up after XID_STOP_SECONDS)."""
    started = time.perf_counter()
    collector.close()
    took = time.perf_counter() - started
    check(
        f"nvml collector closes, its XID watcher out of NVML's wait, < {XID_STOP_SECONDS:.0f} s",
        took < XID_STOP_SECONDS,
        f"{took:.3f} s (an XID wait lasts {XID_WAIT_MS} ms at most)",
    )


def check_scrape_time(runner: CollectorRunner) -> None:
    assembler = ScrapeAssembler([runner], "gpu-check")
    times = []
    for _ in range(200):
        started = time.perf_counter()
        assembler.render(compress=False)
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    check(
        "scrape with the nvml collector < 20 ms (median of 200)",
        median < 0.020,
        f"median {median * 1e3:.3f} ms, max {max(times) * 1e3:.3f} ms; background sample took "
        f"{runner.snapshot.duration_seconds * 1e3:.1f} ms, {len(runner.snapshot.text)} bytes",
    )


def main() -> int:
    print(
        subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    worker = subprocess.Popen([sys.executable, "-c", MATMUL], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "ready", "the matmul process did not start"
        runner = CollectorRunner(
            CollectorSpec.of("nvml", NvmlCollector), argparse.Namespace(procfs="/proc", node_name=None), interval=1.0
        )
        time.sleep(3)  # the matmul loop reaches steady state; NVML's process samples cover the window
        runner.sample_once()
        time.sleep(2)
        snapshot = runner.sample_once()
        check("nvml collector sampled", snapshot.state == "ok", f"{snapshot.state} {snapshot.detail}")
        metrics = samples(snapshot.text)
        check_process(metrics, worker.pid)
        check_gpus(metrics)
        check_xid_watch(metrics)
        check_scrape_time(runner)
        check_close(runner.collector)
    finally:
        worker.kill()
        worker.wait()
    print("ALL PASS" if not FAILED else f"FAILED: {', '.join(FAILED)}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
