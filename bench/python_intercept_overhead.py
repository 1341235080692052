"""Cost of the Python intercept per training step, against the same loop without it.

    python bench/python_intercept_overhead.py [--rounds 31] [--instructions]

Timing runs in one process, one CPU thread for torch: each round runs the loop
plain and hooked, in random order (hooked: the DataLoader iterator's __next__ and
the optimizer hook as `import alnair.auto` installs them, swapped in per round; the
publisher thread running as it does from the first step). Medians of per-round
ns/step are compared, in wall-clock time and in the training thread's CPU time
(which other processes on a shared machine do not inflate). Separate processes
per mode were tried and rejected: their ns/step differed by 20-40% from one process
to the next, far more than the intercept costs. Two loops:
  - bare: a DataLoader of ready-made one-item batches and an optimizer step on one
    scalar, so the intercept's own cost is not lost in the step;
  - realistic: an MLP step (forward, backward, SGD) on batches of 64 from a DataLoader.

--instructions also counts instructions with valgrind's callgrind, immune to machine
noise: the bare loop of STEPS and of 0 steps, hooked and plain, each in its own
process without the publisher thread (its cost is timed per publish); the added
instructions per step are ((hooked STEPS - hooked 0) - (plain STEPS - plain 0)) / STEPS.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

CALLGRIND_STEPS = 10000
LOOPS = {"bare": 5000, "realistic": 200}  # loop -> steps per round


def bare_loop(steps: int):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(steps, 4)), batch_size=1)
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1)

    def run() -> None:
        for (x,) in loader:
            optimizer.step()

    return run


def realistic_loop(steps: int, batch: int = 64):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * batch, 256), torch.randint(0, 10, (steps * batch,)))
    loader = DataLoader(data, batch_size=batch, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def run() -> None:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return run


def counted_steps(hooked: bool, steps: int) -> None:
    """The --instructions child: `steps` bare steps, without the publisher thread."""
    import torch

    from alnair.intercept import torch_hooks
    from alnair.intercept.recorder import RECORDER

    torch.set_num_threads(1)
    RECORDER.idle = False  # nothing starts the publisher thread
    if hooked:
        torch_hooks.install()
    if steps:
        bare_loop(steps)()


class Switch:
    """Plain or hooked per round: the hooks are installed once, then swapped in and out."""

    def __init__(self):
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        from alnair.intercept import torch_hooks
        from alnair.intercept.recorder import RECORDER

        self.iterator = _BaseDataLoaderIter
        self.plain_next = _BaseDataLoaderIter.__next__
        torch_hooks.install()
        self.hooked_next = _BaseDataLoaderIter.__next__
        self.hooked = True
        count = RECORDER.optimizer_stepped
        RECORDER.optimizer_stepped = lambda: count() if self.hooked else None  # the global hook cannot be removed

    def set(self, hooked: bool) -> None:
        self.iterator.__next__ = self.hooked_next if hooked else self.plain_next
        self.hooked = hooked


def timed(run, steps: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    run()
    return (time.perf_counter_ns() - wall) / steps, (time.thread_time_ns() - cpu) / steps


def compare(switch: Switch, loop: str, rounds: int) -> dict[str, tuple[float, float, float]]:
    """Per clock: (plain median ns/step, hooked median - plain median, plain IQR % of its median)."""
    steps = LOOPS[loop]
    run = (bare_loop if loop == "bare" else realistic_loop)(steps)
    results: dict[bool, list] = {False: [], True: []}
    for i in range(rounds + 2):
        for hooked in random.sample((False, True), 2):
            switch.set(hooked)
            result = timed(run, steps)
            if i >= 2:  # two warm-up rounds
                results[hooked].append(result)
    summary = {}
    for index, clock in enumerate(("wall", "cpu")):
        plain = [r[index] for r in results[False]]
        hooked = [r[index] for r in results[True]]
        q = statistics.quantiles(plain, n=4)
        median = statistics.median(plain)
        summary[clock] = (median, statistics.median(hooked) - median, 100 * (q[2] - q[0]) / median)
    return summary


def publish_microseconds(times: int = 20000) -> float:
    """One publish with something new, timed on this thread (the publisher thread stopped first)."""
    from alnair.intercept.publisher import PUBLISHER
    from alnair.intercept.recorder import RECORDER

    RECORDER.optimizer_stepped()  # the first event (already seen in the timed loops) starts the thread
    PUBLISHER._stop.set()
    PUBLISHER._thread.join()
    start = time.thread_time_ns()
    for _ in range(times):
        RECORDER.steps += 1
        PUBLISHER.publish()
    return (time.thread_time_ns() - start) / times / 1000


def instructions(hooked: bool, steps: int) -> int:
    command = ["env", "OMP_NUM_THREADS=1", "PYTHONHASHSEED=0", "valgrind", "--tool=callgrind",
               "--callgrind-out-file=/dev/null", sys.executable, __file__,
               "--child", "hooked" if hooked else "plain", str(steps)]
    err = subprocess.run(command, capture_output=True, text=True, check=True).stderr
    return int(re.search(r"Collected : (\d+)", err).group(1))


def instructions_per_step() -> tuple[float, float]:
    runs = [(h, s) for h in (False, True) for s in (0, CALLGRIND_STEPS)]
    with ThreadPoolExecutor(2) as pool:
        counts = dict(zip(runs, pool.map(lambda run: instructions(*run), runs)))
    hooked = counts[True, CALLGRIND_STEPS] - counts[True, 0]
    plain = counts[False, CALLGRIND_STEPS] - counts[False, 0]
    return plain / CALLGRIND_STEPS, (hooked - plain) / CALLGRIND_STEPS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=31, help="timed rounds per loop")
    parser.add_argument("--instructions", action="store_true", help="also count instructions with callgrind (minutes)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("ALNAIR_SHM_DIR", tempfile.mkdtemp(prefix="alnair-bench-"))
    if args.child:
        return counted_steps(args.child[0] == "hooked", int(args.child[1]))
    import torch

    torch.set_num_threads(1)
    switch = Switch()
    print(f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cpus, "
          f"{args.rounds} rounds, plain and hooked in random order")
    print(f"{'loop':<10} {'clock':<5} {'plain ns/step':>14} {'added ns/step':>14} {'added %':>8} {'plain IQR %':>12}")
    for loop in LOOPS:
        for clock, (plain, added, spread) in compare(switch, loop, args.rounds).items():
            print(f"{loop:<10} {clock:<5} {plain:>14.0f} {added:>14.0f} {100 * added / plain:>8.2f} {spread:>12.1f}")
    publish = publish_microseconds()
    print(f"publisher: {publish:.1f} µs per publish, at most 100 publishes/s: {publish / 100:.2f}% of one core")
    if args.instructions:
        plain, added = instructions_per_step()
        print(f"bare loop, callgrind: {plain:.0f} instructions per plain step, {added:.0f} added by the intercept "
              f"({100 * added / plain:.2f}%)")


if __name__ == "__main__":
    main()
