"""Do CUPTI's kernel records (torch.profiler) give each process's part of a time-sliced GPU, or do NVML's per-process
samples? A probe for dividing GPU time by what the GPU ran for each process instead of by presence
(docs/intercept.md, GPU time, error 3).

    python3 tests/gpu/probe_kernel_time_shared.py [--pairs resnet18:128+resnet18:32,...] [--seconds 5]
                                                  [--profile-seconds 3]

For each pair of training loops (tests/gpu/training_loops.py): each loop alone, profiled (its kernel and copy time
per step); the two together (the intercept's published GPU time of each, presence-divided and scaled to NVML's
busy time; NVML's busy part; NVML's per-process SM utilization samples); then the two together again, both
profiled at once for about the same seconds. If a record's time excludes the other context's slices, a loop's
kernel time per step together stays near its time alone and the two kernel shares sum to no more than NVML's busy
part: the records then divide the GPU, and the published shares can be compared with them. If it includes them,
the kernel time per step grows by the other's slices and the shares sum past 1. It measures; it asserts nothing.
Results in a table and $OUT/kernel_time_shared.json.
"""

from __future__ import annotations

import argparse
import sys
import threading

from check_gpu_time import DeviceBusy, measure
from training_loops import loops, prepare, save


class ProcessUtilization(threading.Thread):
    """NVML's per-process SM utilization samples (nvmlDeviceGetProcessUtilization, via pynvml) while it runs: the
    other candidate for dividing the GPU. Each process's share: its samples' sum over the distinct sample times."""

    def __init__(self):
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.pynvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples: dict[tuple[int, int], int] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            try:
                for s in self.pynvml.nvmlDeviceGetProcessUtilization(self.handle, 0):
                    self.samples[(s.pid, s.timeStamp)] = s.smUtil
            except self.pynvml.NVMLError:
                pass

    def shares(self) -> dict[int, float]:
        times = {t for _, t in self.samples}
        pids = {pid for pid, _ in self.samples}
        return {pid: sum(u for (p, _), u in self.samples.items() if p == pid) / 100 / len(times) for pid in pids}


def profiled_share(run: dict) -> float:
    """The profiled kernel and copy time over the seconds the profiled steps took."""
    return run["profiler_ms_per_step"] * run["profiled_steps"] / 1000 / run["profiled_s"]


def probe(members: list[tuple[str, str, int]], seconds: float, profile_seconds: float, busy: DeviceBusy) -> dict:
    alone = [measure([(model, batch, 30)], 2, busy)["runs"][0] for _, model, batch in members]
    utilization = ProcessUtilization()
    utilization.start()
    together = measure([(model, batch, 0) for _, model, batch in members], seconds, busy)
    utilization.done.set()
    utilization.join()
    shares = utilization.shares()
    for run in together["runs"]:
        run["nvml_process_share"] = shares.get(run["pid"], 0.0)
    steps = [max(10, round(r["steps_per_s"] * profile_seconds)) for r in together["runs"]]
    profiled = measure([(m, b, n) for (_, m, b), n in zip(members, steps)], 1, busy)
    return {"loops": [loop for loop, _, _ in members], "alone": alone, "together": together, "profiled": profiled}


def describe(result: dict) -> str:
    parts = []
    for loop, alone, together, profiled in zip(
        result["loops"], result["alone"], result["together"]["runs"], result["profiled"]["runs"]
    ):
        rate = together["steps_per_s"] / alone["steps_per_s"]
        parts.append(
            f"{loop}: kernels {alone['profiler_ms_per_step']:.2f} ms/step alone, "
            f"{profiled['profiler_ms_per_step']:.2f} together; kernel share {100 * profiled_share(profiled):.1f}%,"
            f" published {100 * together['gpu_share']:.1f}%,"
            f" NVML's per-process {100 * together['nvml_process_share']:.1f}%,"
            f" rate {100 * rate:.1f}% of alone"
        )
    total = sum(profiled_share(r) for r in result["profiled"]["runs"])
    return (
        " | ".join(parts)
        + f" | kernel shares sum {100 * total:.1f}%, NVML busy {100 * result['together']['nvml_busy']:.1f}%"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--pairs", default="resnet18:128+resnet18:128,resnet18:128+resnet18:32,resnet18:128+transformer:6"
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--profile-seconds", type=float, default=3.0)
    args = parser.parse_args()
    prepare()
    busy = DeviceBusy()
    report = []
    for pair in args.pairs.split(","):
        result = probe(loops(pair.replace("+", ",")), args.seconds, args.profile_seconds, busy)
        report.append(result)
        print(describe(result), flush=True)
    save(report, "kernel_time_shared.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
