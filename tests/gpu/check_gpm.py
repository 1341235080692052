"""GPM on a real GPU (issue 37, what it must show): the nvml collector's GPM families under three workloads, each
against what it must show.

    python3 tests/gpu/check_gpm.py [--seconds 3]

(on the device machine `export LIBCC=gcc` first: it has no ziglang to build the intercept with)

- a bf16 tensor-core matmul loop: the tensor pipe active > 0.8 of the interval;
- a memory-bound copy kernel (a 1 GiB device-to-device copy, over and over): DRAM active > 0.6;
- pinned host-to-device copies: PCIe receive within 10% of the throughput the program measures over the interval.
The collector runs in this process (NVML and GPM as the exporter uses them); it collects once when the workload is
steady (GPM's first sample) and once --seconds later, so its values cover the interval the workload reports on.
Prints each check with PASS/FAIL and every GPM value, writes $OUT/gpm.json, exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from training_loops import make_importable, save

# A workload thread and a main thread that answers: "start" begins the measured interval, "stop" prints the bytes
# per second the workload moved since "start" (the copies' own measure) and exits.
WORKLOAD = r"""
import sys, threading, time, torch
kind = sys.argv[1]
moved = 0  # bytes, counted once each batch of work has finished
if kind == "matmul":
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
    def work():
        for _ in range(20): a @ b
        torch.cuda.synchronize(); return 0
elif kind == "copy":
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda"); dst = torch.empty_like(src)
    def work():
        for _ in range(10): dst.copy_(src)
        torch.cuda.synchronize(); return 10 * 2**30
else:
    host = torch.empty(2**28, dtype=torch.uint8).pin_memory()
    dev = torch.empty(2**28, dtype=torch.uint8, device="cuda")
    def work():
        for _ in range(10): dev.copy_(host, non_blocking=True)
        torch.cuda.synchronize(); return 10 * 2**28
def loop():
    global moved
    while True: moved += work()
work()
threading.Thread(target=loop, daemon=True).start()
time.sleep(1)
print("ready", flush=True)
sys.stdin.readline(); t0, m0 = time.monotonic(), moved
sys.stdin.readline(); print("rate", (moved - m0) / (time.monotonic() - t0), flush=True)
"""
results: list[dict] = []


def check(name: str, ok: bool, detail: str) -> None:
    results.append({"check": name, "ok": ok, "detail": detail})
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def gpm_values(collector) -> dict[str, float]:
    """GPU 0's GPM series of one collect, by family and its pipe/link/direction labels."""
    from prometheus_client.parser import text_string_to_metric_families

    from alnair.exporter.plugin import render

    values = {}
    for family in text_string_to_metric_families(render(collector.collect()).decode()):
        for s in family.samples:
            if s.labels.get("gpu") == "0" and (
                "_active_ratio" in s.name or "occupancy" in s.name or "link_bytes" in s.name
            ):
                extra = ",".join(s.labels[k] for k in ("pipe", "link", "direction") if k in s.labels)
                values[f"{s.name}{{{extra}}}" if extra else s.name] = s.value
    return values


def measure(collector, kind: str, seconds: float) -> tuple[dict[str, float], float]:
    child = subprocess.Popen(
        [sys.executable, "-c", WORKLOAD, kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().split() == ["ready"]
    child.stdin.write("start\n")
    child.stdin.flush()
    gpm_values(collector)  # GPM's first sample of the interval
    time.sleep(seconds)
    values = gpm_values(collector)
    child.stdin.write("stop\n")
    child.stdin.flush()
    rate = float(child.stdout.readline().split()[1])
    child.wait(60)
    print(f"{kind}: {values}; the program moved {rate / 2**30:.2f} GiB/s", flush=True)
    return values, rate


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    make_importable()
    from alnair.collectors.nvml import NvmlCollector

    collector = NvmlCollector(argparse.Namespace(procfs="/proc", node_name=None))
    try:
        matmul, _ = measure(collector, "matmul", args.seconds)
        tensor = matmul.get("alnair_nvml_pipe_active_ratio{tensor}")
        check("tensor pipe active > 0.8 under a bf16 matmul loop", tensor is not None and tensor > 0.8, f"{tensor}")
        copy, _ = measure(collector, "copy", args.seconds)
        dram = copy.get("alnair_nvml_dram_active_ratio")
        check("DRAM active > 0.6 under a device-to-device copy loop", dram is not None and dram > 0.6, f"{dram}")
        h2d, rate = measure(collector, "h2d", args.seconds)
        pcie = h2d.get("alnair_nvml_link_bytes_per_second{pcie,receive}")
        close = pcie is not None and abs(pcie - rate) <= 0.1 * rate
        check(
            "PCIe receive within 10% of the measured host-to-device copy throughput",
            close,
            f"GPM {pcie and pcie / 2**30:.2f} GiB/s, the program {rate / 2**30:.2f} GiB/s",
        )
        results.append({"values": {"matmul": matmul, "copy": copy, "h2d": h2d, "h2d_program_bytes_per_second": rate}})
    finally:
        collector.close()
    save(results, "gpm.json")
    return 0 if all(r.get("ok", True) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
