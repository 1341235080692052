"""GPU time per process on a real GPU (the GPU sharing issue, item 1, what it must show (c)): the intercept's
published GPU time against the profiler's GPU time alone, and in a pair against the device's busy time.

    python3 tests/gpu/check_gpu_time.py [--loops resnet18:32,...] [--seconds 8] [--profile-steps 30]
                                        [--baseline-library PATH]

For each loop (tests/gpu/training_loops.py: ResNet-18 and a transformer, a sync every step):
  alone: GPU time per step from the record over the measured seconds, beside the profiler's GPU time per step
    (kernels and copies, torch.profiler, the same process right after) and the busy time per step;
  pair: two copies of the loop together: each one's GPU time share and throughput share of its solo rate, and
    their sum beside NVML's device utilization (nvmlDeviceGetUtilizationRates, sampled every 50 ms meanwhile).
Each GPU time share is the growth from a reading 1.5 s after the warm-up (the processes idle, NVML's samples of
the warm-up in: read right after it, the warm-up's late samples corrected its tail inside the spell, 2.5-4.2% over
NVML with NVML read every 500 ms) to two readings: right at the spell's end, as a scrape then would (its last ~0.3 s
at the recent scale; ~0.7 s with NVML read every 500 ms), and `settled`, 1.5 s later with the processes idle, once
NVML's samples of the whole spell are in.
Results in a table and $OUT/gpu_time.json; the targets: alone within 5% of the profiler, the pair's sum within 5
points of NVML's busy time. --baseline-library: each loop is measured again right after under another build of the
library (lines marked `baseline`, entries naming it in `library`), so two builds meet on one warm GPU.
"""

from __future__ import annotations

import argparse
import sys
import time

from device_watch import DeviceWatch
from training_loops import finish, loops, new_shm_dir, prepare, published_all, read_rate, save, start, tell, wait_ready

SETTLE_S = 1.5  # longer than NVML's samples take to reach the record (on an H100 up to 0.3 s; 0.7 s read every 500 ms)


def measure(
    members: list[tuple[str, int, int]], seconds: float, watch: DeviceWatch, library: str | None = None
) -> dict:
    """Processes stepping together for `seconds`, one per (model, batch, profile steps), under `library` if given:
    each one's published figures over those seconds, NVML's busy part meanwhile, and then, where asked, the
    profiler's kernel time per step and the seconds its profiled steps took (the processes profile at once)."""
    shm = new_shm_dir()
    env = {"LD_PRELOAD": library} if library else None
    children = [start(model, batch, seconds, shm, env, profile_steps=steps) for model, batch, steps in members]
    wait_ready(children)
    pids = [c.pid for c in children]
    time.sleep(SETTLE_S)  # the children idle: the samples of their warm-up's last steps come in
    before = published_all(shm, pids)
    with watch:
        tell(children)
        rates = [read_rate(child)[0] for child in children]
    after = published_all(shm, pids)
    time.sleep(SETTLE_S)  # the children idle: the samples of their last steps come in
    settled = published_all(shm, pids)
    runs = []
    for child, rate, b, a, s in zip(children, rates, before, after, settled):
        steps, per_s = int(rate[3]), float(rate[1])
        wall = steps / per_s
        runs.append(
            {
                "pid": child.pid,
                "steps_per_s": per_s,
                "step_ms": float(rate[2]),
                "steps": steps,
                "gpu_ms_per_step": (a["gpu_time_s"] - b["gpu_time_s"]) * 1000 / steps,
                "busy_ms_per_step": (a["busy_s"] - b["busy_s"]) * 1000 / steps,
                "gpu_share": (a["gpu_time_s"] - b["gpu_time_s"]) / wall,
                "gpu_share_settled": (s["gpu_time_s"] - b["gpu_time_s"]) / wall,
                "measured": a["gpu_time_measured"],
            }
        )
    if any(steps for _, _, steps in members):
        tell(children)
        for child, run, (_, _, steps) in zip(children, runs, members):
            if steps:
                line = child.stdout.readline().split()
                run["profiler_ms_per_step"], run["profiled_s"] = float(line[1]), float(line[2])
                run["profiled_steps"] = steps
    finish(children)
    device = watch.summary()
    return {"runs": runs, "nvml_busy": device["busy"], "device": device}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--loops", default="resnet18:32,resnet18:128,resnet18:384,transformer:8,transformer:32,transformer:96"
    )
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--profile-steps", type=int, default=30)
    parser.add_argument("--baseline-library", help="a libalnair.so each loop is measured under again, right after")
    args = parser.parse_args()
    prepare()
    watch = DeviceWatch()
    report = []
    libraries = [None, args.baseline_library] if args.baseline_library else [None]
    for (loop, model, batch), library in [(each, lib) for each in loops(args.loops) for lib in libraries]:
        alone = measure([(model, batch, args.profile_steps)], args.seconds, watch, library)
        pair = measure([(model, batch, 0)] * 2, args.seconds, watch, library)
        report.append({"loop": loop, "library": library, "alone": alone, "pair": pair})
        a = alone["runs"][0]
        for r in pair["runs"]:
            r["share_of_solo"] = r["steps_per_s"] / a["steps_per_s"]
        print(
            f"{loop:16s} {'baseline ' if library else ''}alone {a['step_ms']:6.2f} ms/step: GPU time"
            f" {a['gpu_ms_per_step']:6.2f} ms/step, profiler "
            f"{a['profiler_ms_per_step']:6.2f} "
            f"({100 * (a['gpu_ms_per_step'] / a['profiler_ms_per_step'] - 1):+5.1f}%), "
            f"NVML busy {100 * alone['nvml_busy']:5.1f}% GPU time share {100 * a['gpu_share']:5.1f}%"
            f" (settled {100 * a['gpu_share_settled']:5.1f}%) | pair: "
            + " ".join(
                f"{100 * r['gpu_share']:5.1f}% (solo rate {100 * r['share_of_solo']:5.1f}%)" for r in pair["runs"]
            )
            + f" sum {100 * sum(r['gpu_share'] for r in pair['runs']):5.1f}%"
            f" (settled {100 * sum(r['gpu_share_settled'] for r in pair['runs']):5.1f}%)"
            f" NVML {100 * pair['nvml_busy']:5.1f}%",
            flush=True,
        )
    save(report, "gpu_time.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
