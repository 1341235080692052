"""Added cost of the CUDA intercept per memory copy, on the CPU, against a driver whose copies return at once
(the fake libcuda.so.1 of the tests, FAKE_CUDA_BARE=1), in one run: each kind of copy with and without the
library, alternating, and its instructions per call.

    python bench/copy_overhead.py [--calls 2000000] [--rounds 10] [--alternations 6]

Kinds (bench/launch_overhead.c): cuMemcpyHtoDAsync_v2 (direction in the name, the device end looked up in the
address map), cuMemcpyAsync (both ends looked up), cuMemcpyHtoD_v2 (synchronous: also timed, two clock reads).
Each copies 4 KiB to an interior pointer of a cuMemAlloc'd buffer, obtained through cuGetProcAddress_v2 as the
CUDA runtime obtains it. Wall time and instructions are measured as in bench/launch_overhead.py (medians of
rounds pinned to one CPU; callgrind's instructions for N and 2N calls, difference / N).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from launch_overhead import arguments, build, per_call_instructions, wall_ns

MODES = [
    ("cuMemcpyHtoDAsync_v2", "copy-htod-async"),
    ("cuMemcpyAsync", "copy-unified-async"),
    ("cuMemcpyHtoD_v2 (sync)", "copy-htod"),
]


def main() -> None:
    args = arguments()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        program = build(work)
        for label, mode in MODES:
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.alternations):
                for preload in (False, True):
                    times[preload] += wall_ns(program, work, preload, args.calls, args.rounds, mode)
            per_call = {p: per_call_instructions(program, work, p, mode) for p in (False, True)}
            results.append((label, times, per_call))
    print(
        f"{'':24}{'without ns':>12}{'with ns':>10}{'added ns':>10}{'instr without':>15}{'instr with':>12}{'added':>8}"
    )
    for label, times, per_call in results:
        without, with_ = statistics.median(times[False]), statistics.median(times[True])
        print(
            f"{label:24}{without:12.2f}{with_:10.2f}{with_ - without:10.2f}"
            f"{per_call[False]:15.1f}{per_call[True]:12.1f}"
            f"{per_call[True] - per_call[False]:8.1f}"
        )


if __name__ == "__main__":
    main()
