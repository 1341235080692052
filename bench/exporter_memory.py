"""Exporter resident memory over 10,000 scrapes with 100 GPU processes that come and go.

    python bench/exporter_memory.py [--scrapes 10000] [--processes 100]

Two servers, each its own process, scraped alternately with the same http.client code:

- Alnair: the real exporter (exporter.main, nvml collector only, sampling every 50 ms) on the pynvml
  stub (tests/fake_pynvml.py), 100 processes over 4 GPUs, a tenth of them replaced by new pids at every
  sample (so per-pid label caches must forget the dead).
- Baseline: prometheus_client's default registry with labelled Gauges fed from the same stub at the same
  rate (removing gone pids' children), served by start_http_server: a typical Python exporter.

Resident memory (VmRSS) is read after a warm-up of a tenth of the scrapes and at the end; growth over 5%
fails the target.
"""

from __future__ import annotations

import argparse
import http.client
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_pynvml import FakeGpu, FakeNvml  # noqa: E402
from support import free_port  # noqa: E402

GPUS = 4


class ChurningNvml(FakeNvml):
    """`processes` processes over the GPUs; every device-count call (once per sample) replaces a tenth."""

    def __init__(self, processes: int):
        super().__init__([FakeGpu(f"GPU-{g:08x}-0000-4000-8000-000000000000") for g in range(GPUS)])
        self.next_pid = 100_000
        for _ in range(processes):
            self.spawn()

    def spawn(self) -> None:
        self.gpus[self.next_pid % GPUS].processes[self.next_pid] = 2**30
        self.next_pid += 1

    def churn(self) -> None:
        for gpu in self.gpus:
            for pid in list(gpu.processes)[: max(1, len(gpu.processes) // 10)]:
                del gpu.processes[pid]
                self.spawn()

    def nvmlDeviceGetComputeRunningProcesses(self, gpu):
        if gpu is self.gpus[0]:
            self.churn()
        return super().nvmlDeviceGetComputeRunningProcesses(gpu)

    def nvmlDeviceGetProcessUtilization(self, gpu, last_seen_us):
        now_us = time.time_ns() // 1000
        gpu.utilization_samples = [(pid, now_us, 90, 30) for pid in gpu.processes]
        return super().nvmlDeviceGetProcessUtilization(gpu, last_seen_us)


def serve_alnair(port: int, processes: int) -> None:
    sys.modules["pynvml"] = ChurningNvml(processes)  # `import pynvml` in the collector gets the stub
    from alnair.exporter.main import main

    main(
        [
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.nvml",
            "--collector.nvml.interval",
            "0.05",
            "--log.level",
            "warning",
        ]
    )


def serve_baseline(port: int, processes: int) -> None:
    from prometheus_client import Gauge, start_http_server

    nvml = ChurningNvml(processes)
    sm = Gauge("gpu_process_sm_utilization_ratio", "", ["gpu", "uuid", "pid"])
    memory = Gauge("gpu_process_memory_used_bytes", "", ["gpu", "uuid", "pid"])
    start_http_server(port, addr="127.0.0.1")
    shown: set[tuple[str, str, str]] = set()
    while True:
        seen = set()
        for index, gpu in enumerate(nvml.gpus):
            running = nvml.nvmlDeviceGetComputeRunningProcesses(gpu)
            for s in nvml.nvmlDeviceGetProcessUtilization(gpu, 0):
                seen.add(key := (str(index), gpu.uuid, str(s.pid)))
                sm.labels(*key).set(s.smUtil / 100)
            for p in running:
                memory.labels(str(index), gpu.uuid, str(p.pid)).set(p.usedGpuMemory)
        for key in shown - seen:  # processes gone: drop their children, or the registry grows
            sm.remove(*key)
            memory.remove(*key)
        shown = seen
        time.sleep(0.05)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def scrape(port: int) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/metrics")
    response = connection.getresponse()
    response.read()
    connection.close()
    if response.status != 200:
        raise RuntimeError(f"scrape answered {response.status}")


def wait_serving(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            return scrape(port)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("server did not start") from None
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scrapes", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=100)
    parser.add_argument("--serve", choices=["alnair", "baseline"])
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    if args.serve:
        return (serve_alnair if args.serve == "alnair" else serve_baseline)(args.port, args.processes)
    servers = {}
    try:
        for name in ("alnair", "baseline"):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, __file__, "--serve", name, "--port", str(port), "--processes", str(args.processes)]
            )
            servers[name] = (port, proc)
        for port, proc in servers.values():
            wait_serving(port, proc)
        warm_up = args.scrapes // 10
        rss = {name: [] for name in servers}
        started = time.monotonic()
        for done in range(1, args.scrapes + 1):
            for name, (port, proc) in servers.items():
                scrape(port)
                if done in (warm_up, args.scrapes):
                    rss[name].append(rss_kib(proc.pid))
        elapsed = time.monotonic() - started
    finally:
        for _, proc in servers.values():
            proc.terminate()
            proc.wait()
    print(
        f"{args.scrapes} scrapes each ({elapsed:.0f} s), {args.processes} processes, a tenth replaced every 50 ms "
        "sample"
    )
    print(f"{'':<12}{f'RSS@{warm_up} KiB':>16}{f'RSS@{args.scrapes} KiB':>18}{'growth':>9}")
    for name, (first, last) in rss.items():
        print(f"{name:<12}{first:>16}{last:>18}{(last - first) / first:>9.1%}")
    first, last = rss["alnair"]
    print(f"target: alnair growth < 5%: {'met' if (last - first) / first < 0.05 else 'NOT met'}")


if __name__ == "__main__":
    main()
