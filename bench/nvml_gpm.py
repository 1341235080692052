"""The nvml collector's sample (its collect()) with GPM on and off, on 1 and 8 GPUs of the pynvml double.

    python bench/nvml_gpm.py [--rounds 400] [--processes 8]

On: every GPU answers GPM (a Hopper GPU), so each collect takes a GPM sample per GPU and computes the 12 metrics
between it and the previous one. Off: every GPU says it has no GPM (isSupportedDevice 0, a GPU before Hopper),
which the collector learns at its first collect and never asks again. Both collectors are built and primed first;
then, per GPU count, their collect() calls alternate (on off, off on, ...) for --rounds rounds. Prints the median,
p10-p90 and minimum of each, the ratio of the medians and the difference per GPU, and what of that difference is the
double's own GPM (one sample and one metrics request timed alone), which the driver stands for on a real GPU.

The double (tests/fake_pynvml.py) answers at Python speed, so this measures Alnair's own work around GPM (the
request, the swap, the series and their text), not the driver's: on the H200 one real GPM sample took 53.5 us and
computing 11 metrics 1.75 ms per GPU (issue 37's measurement), which a real GPU adds on top.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pynvml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from alnair.collectors.nvml import NvmlCollector  # noqa: E402
from fake_pynvml import GPM_METRICS, FakeGpu, FakeNvml  # noqa: E402


def node(gpus: int, processes: int, gpm: bool) -> NvmlCollector:
    """`gpus` busy GPUs with `processes` processes each, with GPM or without."""
    devices = []
    for g in range(gpus):
        pids = range(10_000 + g * processes, 10_000 + (g + 1) * processes)
        devices.append(
            FakeGpu(
                f"GPU-{g:08x}-0000-4000-8000-000000000000",
                memory_used=60 * 2**30,
                utilization=(93, 40),
                processes={pid: 2**30 for pid in pids},
                gpm_supported=gpm,
                gpm_rates={metric: 50.0 + metric for metric in GPM_METRICS},
            )
        )
    collector = NvmlCollector(argparse.Namespace(procfs="/proc"), nvml=FakeNvml(devices))
    for _ in range(2):  # the first collect learns GPM support and takes the first sample
        collector.collect()
    return collector


def timed(collector: NvmlCollector) -> float:
    start = time.perf_counter()
    collector.collect()
    return (time.perf_counter() - start) * 1e3


def double_gpm_us(calls: int = 5000) -> float:
    """The double's own GPM per GPU and collect, median: a sample and the 12 metrics from it and the one before."""
    gpu = FakeGpu("GPU-00000000-0000-4000-8000-000000000000")
    nvml = FakeNvml([gpu])
    request = pynvml.c_nvmlGpmMetricsGet_t(version=pynvml.NVML_GPM_METRICS_GET_VERSION, numMetrics=len(GPM_METRICS))
    for metric, metric_id in zip(request.metrics, GPM_METRICS):
        metric.metricId = metric_id
    older, newer = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
    nvml.nvmlGpmSampleGet(gpu, older)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        nvml.nvmlGpmSampleGet(gpu, newer)
        request.sample1, request.sample2 = older, newer
        nvml.nvmlGpmMetricsGet(request)
        times.append(time.perf_counter() - start)
        older, newer = newer, older
    return statistics.median(times) * 1e6


def summary(times: list[float]) -> str:
    deciles = statistics.quantiles(times, n=10)
    return f"{statistics.median(times):8.3f} {deciles[0]:7.3f}-{deciles[-1]:<7.3f} {min(times):8.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--processes", type=int, default=8, help="processes per GPU")
    args = parser.parse_args()
    print(f"{args.rounds} alternating rounds, {args.processes} processes per GPU; collect() ms")
    print(f"{'GPUs':>4} {'GPM':>3} {'median':>8} {'p10-p90':>15} {'min':>8}")
    for gpus in (1, 8):
        on, off = node(gpus, args.processes, True), node(gpus, args.processes, False)
        times: dict[bool, list[float]] = {True: [], False: []}
        for round_ in range(args.rounds):
            for gpm in (True, False) if round_ % 2 == 0 else (False, True):
                times[gpm].append(timed(on if gpm else off))
        for gpm in (False, True):
            print(f"{gpus:>4} {'on' if gpm else 'off':>3} {summary(times[gpm])}")
        on_ms, off_ms = statistics.median(times[True]), statistics.median(times[False])
        print(f"{gpus:>4} on/off {on_ms / off_ms:.2f}x, +{(on_ms - off_ms) / gpus * 1e3:.0f} us per GPU")
        on.close()
        off.close()
    print(f"of which the double's own GPM (sample and metrics, no Alnair code): {double_gpm_us():.0f} us per GPU")


if __name__ == "__main__":
    main()
