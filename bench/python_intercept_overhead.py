"""Cost of the Python intercept per training step, against the same loop without it.

    python bench/python_intercept_overhead.py [--rounds 201] [--instructions]

Timing runs in one process, one CPU thread for torch: each round runs the loop plain
and hooked, in random order (hooked: the DataLoader iterator's __next__ and the
optimizer hook as `import alnair.auto` installs them, swapped in per round; the
publisher thread running as it does from the first step). Added per step: the median
of per-round differences hooked - plain, in wall-clock time and in the training thread's CPU time
(which other processes on a shared machine do not inflate). Separate processes
per mode were tried and rejected: their ns/step differed by 20-40% from one process
to the next, far more than the intercept costs. Two loops:
  - bare: a DataLoader of ready-made one-item batches and an optimizer step on one
    scalar, so the intercept's own cost is not lost in the step;
  - realistic: an MLP step (forward, backward, SGD) on batches of 64 from a DataLoader.

--instructions also counts instructions with valgrind's callgrind, immune to machine
noise, in one process without the publisher thread, cut into segments by
--dump-before=getppid (each os.getppid() ends one): per loop and round, the warm loop
of a short and a long number of steps (CALLGRIND_STEPS), plain then hooked, and after
each loop the publisher's fold of its batch log (the work moved off the training
thread, done under the same GIL). Per step: (long loop - short loop) / the difference
in steps, so a loop's fixed costs cancel; fold per step: the fold of the short loop's
log / its steps (linear in them: a 100 ms tick holds about 3000 bare steps). The
cyclic GC is off while counting: a collection of torch's heap lands at an arbitrary
step, and the hooks allocate no GC-tracked objects per step.
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
from pathlib import Path

CALLGRIND_STEPS = {"bare": (200, 1200), "realistic": (10, 40)}  # loop -> (short, long) loop lengths
CALLGRIND_ROUNDS = 3
LOOPS = {"bare": 1000, "realistic": 40}  # loop -> steps per round: short rounds, many pairs


def bare_loop(steps: int):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(steps, 4)), batch_size=1)
    weight = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=0.1)

    def run() -> None:
        for _ in loader:
            optimizer.step()

    return run


def realistic_loop(steps: int, batch: int = 64):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(steps * batch, 256), torch.randint(0, 10, (steps * batch,)))
    loader = DataLoader(data, batch_size=batch, shuffle=True)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def run() -> None:
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return run


LOOP_MAKERS = {"bare": bare_loop, "realistic": realistic_loop}


class Switch:
    """Plain or hooked per round: the hooks are installed once, then swapped in and out."""

    def __init__(self):
        from torch.optim import optimizer
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        from alnair.intercept import torch_hooks

        self.iterator = _BaseDataLoaderIter
        self.optimizer_hooks = optimizer._global_optimizer_post_hooks  # torch's table of global hooks (private)
        self.plain = _BaseDataLoaderIter.__next__, dict(self.optimizer_hooks)
        torch_hooks.install()
        self.hooked = _BaseDataLoaderIter.__next__, dict(self.optimizer_hooks)

    def set(self, hooked: bool) -> None:
        self.iterator.__next__, optimizer_hooks = self.hooked if hooked else self.plain
        self.optimizer_hooks.clear()
        self.optimizer_hooks.update(optimizer_hooks)


def counted_segments() -> None:
    """The --instructions child (see the module docstring); each os.getppid() ends a counted segment."""
    import gc

    import torch

    from alnair.intercept.this_process import RECORDER

    torch.set_num_threads(1)
    RECORDER.idle, RECORDER.publishing = False, True  # passes are logged; no thread: this one folds them
    switch = Switch()
    for loop, lengths in CALLGRIND_STEPS.items():
        runs = {steps: LOOP_MAKERS[loop](steps) for steps in lengths}
        for hooked in (False, True, False, True):  # warm-up: lazy imports and first-call costs stay out of the counts
            switch.set(hooked)
            runs[lengths[0]]()
            RECORDER.fold()
        gc.disable()
        os.getppid()
        for _ in range(CALLGRIND_ROUNDS):
            for hooked in (False, True):
                switch.set(hooked)
                for steps in lengths:
                    runs[steps]()
                    os.getppid()
                    RECORDER.fold()
                    os.getppid()
        gc.enable()


def instructions_per_step() -> dict[str, dict[str, float]]:
    """Per loop, medians over rounds: plain instructions per step, added on the training thread, added by the fold."""
    with tempfile.TemporaryDirectory(prefix="alnair-bench-") as out:
        command = [
            "env",
            "OMP_NUM_THREADS=1",
            "PYTHONHASHSEED=0",
            "valgrind",
            "--tool=callgrind",
            "--dump-before=getppid",
            f"--callgrind-out-file={out}/cg",
            sys.executable,
            __file__,
            "--child",
        ]
        subprocess.run(command, capture_output=True, check=True)
        # a warm-up segment, then (plain, hooked) x (short, long) x (loop, fold)
        per_loop = 1 + CALLGRIND_ROUNDS * 2 * 2 * 2
        segments = per_loop * len(CALLGRIND_STEPS)
        dumps = sorted(Path(out).glob("cg.*"), key=lambda path: int(path.suffix[1:]))
        if len(dumps) != segments:
            sys.exit(f"expected {segments} callgrind dumps, got {len(dumps)}: something else called getppid()")
        counts = [int(re.search(r"^summary: (\d+)", path.read_text(), re.M).group(1)) for path in dumps]
    summary = {}
    for index, (loop, (short, long)) in enumerate(CALLGRIND_STEPS.items()):
        loop_counts = counts[index * per_loop + 1 : (index + 1) * per_loop]
        results: dict[str, list[float]] = {"plain": [], "added": [], "fold": []}
        for r in range(CALLGRIND_ROUNDS):
            plain_short, _, plain_long, _, hooked_short, fold_short, hooked_long, _ = loop_counts[8 * r : 8 * r + 8]
            plain = (plain_long - plain_short) / (long - short)
            results["plain"].append(plain)
            results["added"].append((hooked_long - hooked_short) / (long - short) - plain)
            results["fold"].append(fold_short / short)
        summary[loop] = {name: statistics.median(values) for name, values in results.items()}
    return summary


def timed(run, steps: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
    run()
    return (time.perf_counter_ns() - wall) / steps, (time.thread_time_ns() - cpu) / steps


def compare(switch: Switch, loop: str, rounds: int) -> dict[str, tuple[float, float, float]]:
    """Per clock: (plain median ns/step, median of per-round hooked - plain, plain IQR % of its median).

    Per-round differences pair runs tens of milliseconds apart, so drift in the machine's speed over the
    minute of the run cancels; the difference of the two medians of 31 rounds of 5000 steps did not, on
    the shared VM (1.3-2.3 us for one build)."""
    steps = LOOPS[loop]
    run = LOOP_MAKERS[loop](steps)
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
        added = statistics.median(h - p for h, p in zip(hooked, plain))
        summary[clock] = (median, added, 100 * (q[2] - q[0]) / median)
    return summary


def publish_microseconds(times: int = 20000) -> float:
    """One publish with something new, timed on this thread (the publisher thread stopped first)."""
    from alnair.intercept.this_process import PUBLISHER, RECORDER

    RECORDER.optimizer_stepped()  # the first event (already seen in the timed loops) starts the thread
    PUBLISHER._stop.set()
    PUBLISHER._thread.join()
    start = time.thread_time_ns()
    for _ in range(times):
        RECORDER.steps += 1
        PUBLISHER.publish()
    return (time.thread_time_ns() - start) / times / 1000


def timings(rounds: int) -> dict[str, float]:
    """Prints the timed table; returns the bare loop's plain and added wall ns per step."""
    import torch

    from alnair.intercept.publisher import PERIOD_SECONDS
    from alnair.intercept.this_process import PUBLISHER

    torch.set_num_threads(1)
    switch = Switch()
    print(
        f"python {platform.python_version()}, torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} cpus, "
        f"{rounds} rounds, plain and hooked in random order; load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'loop':<10} {'clock':<5} {'plain ns/step':>14} {'added ns/step':>14} {'added %':>8} {'plain IQR %':>12}")
    bare = {}
    for loop in LOOPS:
        for clock, (plain, added, spread) in compare(switch, loop, rounds).items():
            print(f"{loop:<10} {clock:<5} {plain:>14.0f} {added:>14.0f} {100 * added / plain:>8.2f} {spread:>12.1f}")
            if (loop, clock) == ("bare", "wall"):
                bare = {"plain": plain, "added": added}
    publish = publish_microseconds()
    print(
        f"publisher: {publish:.1f} µs per publish, at most {1 / PERIOD_SECONDS:.0f} publishes/s: "
        f"{publish / PERIOD_SECONDS / 1e4:.3f}% of one core"
    )
    PUBLISHER.stop()
    return bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=201, help="timed rounds per loop")
    parser.add_argument("--instructions", action="store_true", help="also count instructions with callgrind (minutes)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return counted_segments()
    with tempfile.TemporaryDirectory(prefix="alnair-bench-") as shm_dir:
        os.environ.setdefault("ALNAIR_SHM_DIR", shm_dir)
        bare = timings(args.rounds)
    if args.instructions:
        per_loop = instructions_per_step()
        for loop, counts in per_loop.items():
            plain, added, fold = counts["plain"], counts["added"], counts["fold"]
            print(
                f"{loop} loop, callgrind: {plain:.0f} instructions per plain step; added by the intercept: {added:.0f} "
                f"on the training thread + {fold:.0f} folded by the publisher = {added + fold:.0f} "
                f"({100 * (added + fold) / plain:.3f}%)"
            )
        plain, added, fold = (per_loop["bare"][k] for k in ("plain", "added", "fold"))
        print(
            f"instructions per wall ns: plain loop {plain / bare['plain']:.2f}, "
            f"the intercept's {added + fold:.0f} in {bare['added']:.0f} ns: {(added + fold) / bare['added']:.2f}"
            if bare["added"] > 0
            else f"instructions per wall ns: plain loop {plain / bare['plain']:.2f}"
        )


if __name__ == "__main__":
    main()
