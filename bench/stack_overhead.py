"""What the whole Alnair stack costs a real training job, on a GPU machine: ResNet-50 bare against the same
job under the CUDA and Python intercepts, with the exporter sampling every second and scraped every second.

    python3 bench/stack_overhead.py [--model resnet50|mlp] [--pairs 20] [--steps N] [--warmup N] [--batch N]
                                    [--limits] [--json PATH] [--resume PATH] [--budget-seconds S]
    python3 bench/stack_overhead.py --report bench/results/stack-h200.json

Run from the repository root; nothing needs installing (the intercept is built with make, the package is a
shim of symlinks, as tests/gpu does). Each run is its own process training on synthetic data, timing --steps
steps after --warmup with the GPU synchronised; it prints samples per second. The models: ResNet-50
(torchvision, batch 128, bf16 autocast, channels_last, SGD; 120 steps after 15, about 3.5 s of training on an
H200: a run's 11 s of start-up is paid whatever its length, so longer runs narrow the interval more cheaply),
GPU-bound; and a small MLP (1024-4096-1024, batch 256, SGD; 3000 steps after 200) whose launches bound it. Runs
alternate in ABBA order (bare, stack, stack, bare, ...), so drift in clocks or temperature falls on both sides; each
adjacent pair gives a ratio, and the cost is the mean ratio's distance from 1 with a 95% confidence interval (Student's
t over the pairs), and beside it the median ratio with a distribution-free 95% interval (sign test), which one slow run
moves by one place at most: now and then a run on the H200 is 5-28% slow with the GPU clock and the CPUs as usual, in
bare runs more than in the others, and drags the mean by itself. --report PATH prints a --json file's figures and runs
nothing. With --limits a third variant runs the stack with ALNAIR_MEMORY_LIMIT=120Gi, ALNAIR_COMPUTE_LIMIT=100 and
ALNAIR_COMPUTE_SHARE=50, so the limit and share paths run (GPU time kept, the share table read every tick, every launch
checks for a debt) without limiting anything: A B C C B A. The figures are written to --json after every pair, and
--resume PATH goes on from the pairs such a file holds (same variants and settings), so the pairs can span several GPU
sessions. --settle-seconds (90) of runs come first, untimed for the result, every variant in turn: on a freshly started
GPU machine the first minutes' bare runs were up to 9% slow in two calls of three (2026-12-01); their figures are kept
in the JSON under "settling". Each run is pinned to --run-cpus (4-7) and the exporter with its scraper to
--exporter-cpus (0-1), with taskset, so neither waits for the other or for the scheduler's moves ("none" leaves either
unpinned). --budget-seconds S starts no pair that would end after S seconds (the pairs so far say how long one takes),
so a GPU call's time limit never cuts one off. Each run also reports the conditions it ran in, kept in the JSON beside
its figure: its timed part's CPU time and context switches, its CPUs, and the GPU's SM clock, temperature and clock
event reasons as it ended (NVML), to tell a slow run's cause.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "gpu"))
from check_python_and_cuda_records import free_port, shim  # noqa: E402

# Student's t, two-sided 95%
T_975 = {
    1: 12.71,
    2: 4.30,
    3: 3.18,
    4: 2.78,
    5: 2.57,
    6: 2.45,
    7: 2.36,
    8: 2.31,
    9: 2.26,
    10: 2.23,
    12: 2.18,
    15: 2.13,
    20: 2.09,
    25: 2.06,
    30: 2.04,
    40: 2.02,
    60: 2.00,
}
RESNET = """
try:
    from torchvision.models import resnet50
except ImportError:
    sys.exit("torchvision is missing: pip install the torchvision that matches this torch")
model = resnet50().cuda().to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
y = torch.randint(0, 1000, (batch,), device="cuda")

def step():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
"""
MLP = """
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(batch, 1024, device="cuda"), torch.randn(batch, 1024, device="cuda")

def step():  # a few microseconds of GPU work per kernel: the launches bound it
    optimizer.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""
MODELS = {"resnet50": (RESNET, 120, 15, 128), "mlp": (MLP, 3000, 200, 256)}  # code, steps, warmup, batch
PRELUDE = """
import os, sys, time
import torch
steps, warmup, batch = (int(a) for a in sys.argv[1:4])
torch.manual_seed(0)
"""
TIMED = """

import json, resource
for _ in range(warmup):
    step()
torch.cuda.synchronize()
usage, cpu, began = resource.getrusage(resource.RUSAGE_SELF), time.process_time(), time.perf_counter()
for _ in range(steps):
    step()
torch.cuda.synchronize()
seconds, cpu, after = time.perf_counter() - began, time.process_time() - cpu, resource.getrusage(resource.RUSAGE_SELF)
print(f"samples_per_second {steps * batch / seconds:.3f}", flush=True)
conditions = {"cpu_seconds": round(cpu, 4), "voluntary_switches": after.ru_nvcsw - usage.ru_nvcsw,
              "involuntary_switches": after.ru_nivcsw - usage.ru_nivcsw, "cpus": sorted(os.sched_getaffinity(0))}
try:  # the GPU as the timed part ended: its SM clock and why it was held back (NVML's event reasons bitmask)
    import pynvml
    pynvml.nvmlInit()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)  # the older name
    conditions.update(sm_mhz=pynvml.nvmlDeviceGetClockInfo(gpu, pynvml.NVML_CLOCK_SM),
                      temperature_c=pynvml.nvmlDeviceGetTemperature(gpu, pynvml.NVML_TEMPERATURE_GPU),
                      clock_event_reasons=reasons(gpu))
except Exception as e:  # no pynvml here: the CPU side alone
    conditions["nvml"] = repr(e)[:200]
print("conditions " + json.dumps(conditions), flush=True)
"""


class Stack:
    """The exporter over the runs' segment directory, scraped once a second as Prometheus would."""

    def __init__(self, work: Path, env: dict[str, str]):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alnair.exporter",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--shm.dir={env['ALNAIR_SHM_DIR']}",
                "--collector.cuda.interval=1s",
                "--collector.python.interval=1s",
                "--collector.nvml.interval=1s",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(work / "exporter.log", "w"),
        )
        self.scrapes, self.failures = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._scrape_every_second, daemon=True)
        self._thread.start()

    def _scrape_every_second(self) -> None:
        while not self._stop.wait(1.0):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
                    response.read()
                self.scrapes += 1
            except OSError:
                self.failures += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.proc.terminate()
        self.proc.wait(30)


def pinned(cpus: str, command: list[str]) -> list[str]:
    """`command` under taskset on the CPUs listed (taskset's syntax, e.g. 4-7), or as it is for "none"."""
    return command if cpus == "none" else ["taskset", "-c", cpus, *command]


def run(variant: str, args, env: dict[str, str]) -> tuple[float, dict]:
    """One run's samples per second and the conditions it ran in (CPU time and context switches of its timed part,
    the GPU's SM clock, temperature and clock event reasons at its end), which tell a slow run's cause."""
    limits = (
        {"ALNAIR_MEMORY_LIMIT": "120Gi", "ALNAIR_COMPUTE_LIMIT": "100", "ALNAIR_COMPUTE_SHARE": "50"}
        if variant == "limits"
        else {}
    )
    command = [
        sys.executable,
        "-c",
        PRELUDE + MODELS[args.model][0] + TIMED,
        str(args.steps),
        str(args.warmup),
        str(args.batch),
    ]
    if variant != "bare":
        command = [sys.executable, "-m", "alnair.intercept.launcher", *command]
    out = subprocess.run(
        pinned(args.run_cpus, command), env={**env, **limits}, capture_output=True, text=True, timeout=600
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("samples_per_second")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"{variant} run failed: {out.stderr[-2000:]}")
    conditions = next(
        (json.loads(x.split(" ", 1)[1]) for x in out.stdout.splitlines() if x.startswith("conditions ")), {}
    )
    return float(line.split()[1]), conditions


def next_pair_fits(budget: float, started: float, began_pairs: float, done: int) -> bool:
    """Whether one more pair, as long as the mean of the `done` ones so far plus 10%, ends within `budget` seconds
    of `started` (always, with no budget or no pair done yet)."""
    now = time.monotonic()
    return not budget or not done or now - started + 1.1 * (now - began_pairs) / done <= budget


def interval(ratios: list[float]) -> tuple[float, float]:
    """Mean cost (ratio - 1) and the half-width of its 95% confidence interval."""
    n = len(ratios)
    mean = statistics.fmean(ratios)
    if n < 2:
        return mean - 1, float("nan")
    t = T_975[min((k for k in T_975 if k >= n - 1), default=60)]
    return mean - 1, t * statistics.stdev(ratios) / n**0.5


def median_interval(ratios: list[float]) -> tuple[float, float, float]:
    """The median ratio and its distribution-free 95% confidence interval: the order statistics k and n+1-k, with
    k the largest for which P(Binomial(n, 1/2) < k) <= 2.5% (20 pairs: the 6th and the 15th of the sorted ratios,
    95.9% coverage). One slow run moves it by at most one place, where it moves the mean by its whole distance."""
    ordered, n = sorted(ratios), len(ratios)
    k, below = 0, 1  # below: 2^n P(Binomial(n, 1/2) <= k)
    while below <= 0.025 * 2**n:
        k += 1
        below += math.comb(n, k)
    median = statistics.median(ordered) if ordered else float("nan")
    return (median, ordered[k - 1], ordered[n - k]) if k else (median, float("nan"), float("nan"))


def estimates(results: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Each variant's cost against bare over its complete pairs: the mean ratio's (cost, its half-width) and the
    median ratio with its interval, under the keys the JSON keeps them by."""
    out = {}
    for variant in [v for v in results if v != "bare"]:
        ratios = [s / b for s, b in zip(results[variant], results["bare"])]
        cost, half = interval(ratios)
        median, low, high = median_interval(ratios)
        out[variant] = {
            "cost": -cost,
            "cost_halfwidth": half,
            "median_ratio": median,
            "median_ratio_low": low,
            "median_ratio_high": high,
            "pairs": len(ratios),
        }
    return out


def report(
    args,
    results: dict[str, list[float]],
    conditions: dict[str, list[dict]],
    settling: list,
    scrapes: int,
    failures: int,
) -> dict:
    """The runs so far and each variant's estimates (flat: stack_cost, stack_median_ratio, ...)."""
    figures = {
        "pairs": min(len(v) for v in results.values()),
        "model": args.model,
        "steps": args.steps,
        "batch": args.batch,
        "samples_per_second": results,
        "conditions": conditions,
        "settling": settling,
        "scrapes": scrapes,
        "scrape_failures": failures,
    }
    for variant, figure in estimates(results).items():
        figures.update({f"{variant}_{name}": value for name, value in figure.items() if name != "pairs"})
    return figures


def summarise(figures: dict) -> None:
    """Each variant's cost (mean ratio, Student's t) and its median ratio (sign-test interval) against bare."""
    results = figures["samples_per_second"]
    for variant, e in estimates(results).items():
        print(
            f"{variant}: throughput ratio {1 - e['cost']:.4f}, cost {e['cost'] * 100:+.2f}% +- "
            f"{e['cost_halfwidth'] * 100:.2f}% (95% CI, {e['pairs']} pairs); median ratio {e['median_ratio']:.4f} "
            f"({e['median_ratio_low']:.4f}-{e['median_ratio_high']:.4f}, 95% sign-test CI); "
            f"bare median {statistics.median(results['bare']):.1f} samples/s"
        )
    print(f"exporter scraped {figures['scrapes']} times, {figures['scrape_failures']} failures")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument(
        "--model",
        choices=sorted(MODELS),
        default="resnet50",
        help="resnet50 (GPU-bound) or mlp (a small MLP whose launches bound it)",
    )
    parser.add_argument("--steps", type=int, help="timed steps (resnet50 120, mlp 3000)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (resnet50 15, mlp 200)")
    parser.add_argument("--batch", type=int, help="resnet50 128, mlp 256")
    parser.add_argument(
        "--limits", action="store_true", help="also the stack with a memory limit, a 100%% compute cap and a 50%% share"
    )
    parser.add_argument("--json", help="also write the figures here, after every pair")
    parser.add_argument("--resume", type=Path, help="go on from the pairs in this --json file")
    parser.add_argument("--run-cpus", default="4-7", help="the CPUs each run is pinned to (taskset -c), or none")
    parser.add_argument("--exporter-cpus", default="0-1", help="the exporter's and this script's CPUs, or none")
    parser.add_argument(
        "--budget-seconds",
        type=float,
        default=0.0,
        help="start no pair that would end after this many seconds from the start (0: no budget); "
        "--resume goes on from there",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=90.0,
        help="runs before the pairs for this long, kept out of the result (a fresh machine's are slow)",
    )
    parser.add_argument("--report", type=Path, help="print the figures of this --json file and run nothing")
    args = parser.parse_args()
    if args.report:
        summarise(json.loads(args.report.read_text()))
        return 0
    started = time.monotonic()
    _, steps, warmup, batch = MODELS[args.model]
    args.steps, args.warmup, args.batch = args.steps or steps, args.warmup or warmup, args.batch or batch
    # this script's scraper thread, and the exporter it starts (taskset parses the list)
    if args.exporter_cpus != "none":
        subprocess.run(["taskset", "-pc", args.exporter_cpus, str(os.getpid())], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["make", "-s", "-C", str(REPO / "intercept")], check=True)
    work = Path(tempfile.mkdtemp(prefix="alnair-stack-"))
    (work / "shm").mkdir()
    env = {**os.environ, "PYTHONPATH": str(shim(work / "site")), "ALNAIR_SHM_DIR": str(work / "shm")}
    env.pop("ALNAIR_PYTHON_INTERCEPT", None)
    variants = ["bare", "stack", *(["limits"] if args.limits else [])]
    results: dict[str, list[float]] = {v: [] for v in variants}
    conditions: dict[str, list[dict]] = {v: [] for v in variants}  # each run's, beside its figure (none before them)
    scrapes = failures = 0
    settling: list[tuple[str, float]] = []  # (variant, samples/s) of the runs before the pairs, of every call
    if args.resume:
        earlier = json.loads(args.resume.read_text())
        settings = (earlier.get("model", "resnet50"), earlier["steps"], earlier["batch"])
        results = earlier.get("samples_per_second") or earlier["images_per_second"]  # the key before --model
        if sorted(results) != sorted(variants) or settings != (args.model, args.steps, args.batch):
            sys.exit(f"{args.resume}: other variants or settings than these runs")
        scrapes, failures = earlier["scrapes"], earlier["scrape_failures"]
        settling = earlier.get("settling", [])
        conditions = earlier.get("conditions", conditions)
    stack = Stack(work, env)

    def figures() -> dict:
        return report(args, results, conditions, settling, scrapes + stack.scrapes, failures + stack.failures)

    try:
        began, turn = time.monotonic(), 0
        while time.monotonic() - began < args.settle_seconds:
            variant, turn = variants[turn % len(variants)], turn + 1
            settling.append((variant, run(variant, args, env)[0]))
            print(f"settling {variant:6s} {settling[-1][1]:9.1f} samples/s", flush=True)
        began_pairs, first = time.monotonic(), len(results["bare"])
        for i in range(first, args.pairs):
            if not next_pair_fits(args.budget_seconds, started, began_pairs, i - first):
                print(f"stopping after {i} pairs: the next would pass --budget-seconds", flush=True)
                break
            for variant in variants if i % 2 == 0 else variants[::-1]:  # ABBA: A B, B A, A B ...
                figure, seen = run(variant, args, env)
                results[variant].append(figure)
                conditions[variant].append(seen)
                print(
                    f"pair {i + 1:2d} {variant:6s} {figure:9.1f} samples/s  SM {seen.get('sm_mhz', '?')} MHz, "
                    f"{seen.get('involuntary_switches', '?')} involuntary switches",
                    flush=True,
                )
            if args.json:
                Path(args.json).write_text(json.dumps(figures(), indent=1))
    finally:
        stack.stop()
    final = figures()
    summarise(final)
    if args.json:
        Path(args.json).write_text(json.dumps(final, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
