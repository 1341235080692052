"""Scrape latency of /metrics with the nvml collector on a pynvml stub of 8 GPUs x 64 processes.

    python bench/nvml_scrape.py [--gpus 8] [--processes 64] [--scrapes 300]

In the same run, alternately (A B A B ...), with the same http.client code:

- Alnair: the exporter's HTTP server, the nvml collector sampled in the background every 0.5 s
  (CollectorRunner) and each scrape served from the latest snapshot.
- Baseline: NVML sampled inside each request (what the original exporter and exporters without
  background sampling do): the same collector's collect() in the request handler.

The stub (tests/fake_pynvml.py) answers at Python speed; real NVML calls are slower (on an H200 one
GPU's sample takes ~50 ms, mostly the two 20 ms PCIe throughput windows), which the baseline would pay
per scrape and Alnair pays off the scrape path. The collector's own sample time is reported too.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from alnair.collectors.nvml import NvmlCollector  # noqa: E402
from alnair.exporter.plugin import render
from alnair.exporter.registry import CollectorSpec  # noqa: E402
from alnair.exporter.sampler import CollectorRunner  # noqa: E402
from alnair.exporter.scrape import ScrapeAssembler  # noqa: E402
from alnair.exporter.server import ExporterServer  # noqa: E402
from alnair.exporter.webconfig import load_web_config  # noqa: E402
from fake_pynvml import FakeGpu, FakeNvml  # noqa: E402


class BusyNvml(FakeNvml):
    """Each process has a fresh utilization sample at every read, as on a busy node."""

    def nvmlDeviceGetProcessUtilization(self, gpu, last_seen_us):
        now_us = time.time_ns() // 1000
        gpu.utilization_samples = [(pid, now_us, 90, 30) for pid in gpu.processes]
        return super().nvmlDeviceGetProcessUtilization(gpu, last_seen_us)


def busy_node(gpus: int, processes: int) -> FakeNvml:
    """Every GPU with `processes` processes, each with memory and utilization samples."""
    node = []
    for g in range(gpus):
        pids = range(10_000 + g * processes, 10_000 + (g + 1) * processes)
        node.append(
            FakeGpu(
                f"GPU-{g:08x}-0000-4000-8000-000000000000",
                memory_used=60 * 2**30,
                utilization=(93, 40),
                processes={pid: 2**30 for pid in pids},
            )
        )
    return BusyNvml(node)


class Stub(NvmlCollector):
    """The nvml collector on the stub, as the exporter constructs it (options only)."""

    node: FakeNvml

    def __init__(self, options):
        super().__init__(options, nvml=self.node)


def sample_in_request_server(collector: NvmlCollector) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = render(collector.collect())
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def scrape(port: int) -> tuple[float, int]:
    connection = http.client.HTTPConnection("127.0.0.1", port)
    started = time.perf_counter()
    connection.request("GET", "/metrics")
    body = connection.getresponse().read()
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed, len(body)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=300)
    args = parser.parse_args()
    options = argparse.Namespace(procfs="/proc", node_name=None)
    Stub.node = busy_node(args.gpus, args.processes)
    runner = CollectorRunner(CollectorSpec.of("nvml", Stub), options, interval=0.5)
    runner.start()
    while runner.snapshot.state != "ok":
        time.sleep(0.05)
    alnair = ExporterServer(
        ("127.0.0.1", 0), load_web_config(""), ScrapeAssembler([runner], "bench"), [runner], ["nvml"], "/metrics", 0
    )
    baseline = sample_in_request_server(NvmlCollector(options, nvml=busy_node(args.gpus, args.processes)))
    for server in (alnair, baseline):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    times: dict[str, list[float]] = {"alnair": [], "baseline": []}
    sizes = {}
    sample_times = []
    for _ in range(args.scrapes):
        for name, server in (("alnair", alnair), ("baseline", baseline)):
            elapsed, sizes[name] = scrape(server.server_address[1])
            times[name].append(elapsed)
        sample_times.append(runner.snapshot.duration_seconds)
    runner.stop()
    a, b = statistics.median(times["alnair"]), statistics.median(times["baseline"])
    print(f"{args.gpus} GPUs x {args.processes} processes, {args.scrapes} scrapes each, alternating")
    print(f"{'':<34}{'median ms':>10}{'p90 ms':>10}{'bytes':>10}")
    for name, label in (("alnair", "alnair (background sample)"), ("baseline", "baseline (sample in request)")):
        ordered = sorted(times[name])
        print(
            f"{label:<34}{statistics.median(ordered) * 1e3:>10.2f}"
            f"{ordered[int(0.9 * len(ordered))] * 1e3:>10.2f}{sizes[name]:>10}"
        )
    print(
        f"baseline / alnair median: {b / a:.1f}x; alnair's background sample (median): "
        f"{statistics.median(sample_times) * 1e3:.1f} ms; target: alnair median < 50 ms: "
        f"{'met' if a < 0.050 else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
