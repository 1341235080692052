"""Added cost of the CUDA intercept per kernel launch, on the CPU, against a driver whose
launches return at once (the fake libcuda.so.1 of the tests, FAKE_CUDA_BARE=1).

    python bench/launch_overhead.py [--calls 2000000] [--rounds 10] [--alternations 6]

Wall time: rounds of `calls` launches, with and without LD_PRELOAD, alternating;
medians per call. Instructions: valgrind --tool=callgrind counts instructions for
N and 2N launches in each variant; the difference divided by N is the exact
instruction cost per launch, whatever else the machine is doing.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTERCEPT = ROOT / "intercept"
FAKE_DRIVER = ROOT / "tests" / "intercept" / "doubles" / "fake_libcuda.c"


def build(work: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(INTERCEPT)], check=True)
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-Wl,-Bsymbolic",
            f"-I{INTERCEPT}",
            "-o",
            str(work / "libcuda.so.1"),
            str(FAKE_DRIVER),
            "-lpthread",
        ],
        check=True,
    )
    program = work / "launch_overhead"
    subprocess.run(
        ["gcc", "-O2", f"-I{INTERCEPT}", "-o", str(program), str(ROOT / "bench" / "launch_overhead.c"), "-ldl"],
        check=True,
    )
    return program


def environment(work: Path, preload: bool) -> dict[str, str]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(work), "FAKE_CUDA_BARE": "1", "ALNAIR_SHM_DIR": str(work)}
    if preload:
        env["LD_PRELOAD"] = str(INTERCEPT / "build" / "libalnair.so")
    return env


def wall_ns(program: Path, work: Path, preload: bool, calls: int, rounds: int, mode: str = "launch") -> list[float]:
    out = subprocess.run(
        ["taskset", "-c", "1", str(program), str(calls), str(rounds), mode],
        env=environment(work, preload),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [float(x) for x in out.split()]


def instructions(program: Path, work: Path, preload: bool, calls: int, mode: str = "launch") -> int:
    """The launching thread's: the monitor's publish (every 10 ms, whatever the launches) is held off, since under
    valgrind's slowdown the 2N run would hold more of them and charge their work to the launches."""
    out_file = work / "callgrind.out"
    env = {**environment(work, preload), "ALNAIR_PUBLISH_INTERVAL_MS": "60000"}
    result = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", str(program), str(calls), "1", mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(re.search(r"Collected : (\d+)", result.stderr).group(1))


def per_call_instructions(program: Path, work: Path, preload: bool, mode: str = "launch", n: int = 200_000) -> float:
    """Instructions of 2N calls minus those of N, over N: exact, whatever the start-up costs."""
    return (instructions(program, work, preload, 2 * n, mode) - instructions(program, work, preload, n, mode)) / n


def arguments() -> argparse.Namespace:
    """The flags of every call-overhead bench: calls per round, rounds per run, alternations of without/with."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--alternations", type=int, default=6)
    return parser.parse_args()


def main() -> None:
    args = arguments()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program = build(work)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.alternations):
            for preload in (False, True):
                times[preload] += wall_ns(program, work, preload, args.calls, args.rounds)
        per_call = {p: per_call_instructions(program, work, p) for p in (False, True)}
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    print(f"{'':24}{'median ns/call':>16}{'p10-p90 ns':>16}{'instructions/call':>20}")
    for label, preload, median in (("direct to driver", False, without), ("through libalnair", True, with_)):
        deciles = statistics.quantiles(times[preload], n=10)
        print(f"{label:24}{median:16.2f}{f'{deciles[0]:.2f}-{deciles[-1]:.2f}':>16}{per_call[preload]:20.1f}")
    print(f"{'added by the intercept':24}{with_ - without:16.2f}{'':16}{per_call[True] - per_call[False]:20.1f}")


if __name__ == "__main__":
    main()
