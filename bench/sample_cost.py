"""The exporter's own CPU per cuda sample and per scrape, in-process, for one or more Alnair installs side by
side on the same static segments: what a change costs, without the noise of live writers.

    python bench/sample_cost.py --python /path/venv-a/bin/python,/path/venv-b/bin/python [--segments 1000]

N C test writers publish once and stay idle (they hold their segments' locks). Each interpreter, in turn and
alternating for --rounds rounds, builds the cuda collector through its own exporter (sampler and scrape
assembler) and times 100 samples and 1000 cached scrapes (the text is joined once per sample, the exporter's
own metrics rendered per scrape). Prints the median and the minimum of each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from scrape_latency import WRITER, raise_fd_limit, read_ready, stop

# Run by each interpreter: the collector as the exporter builds it (CollectorSpec since the plug-in API,
# the collector class before it).
MEASURE = """
import argparse, json, sys, time
from alnair.collectors.cuda import CudaCollector
from alnair.exporter.sampler import CollectorRunner
from alnair.exporter.scrape import ScrapeAssembler
options = argparse.Namespace(shm_dir=sys.argv[1], procfs="/proc", node_name=None)
try:
    from alnair.exporter.registry import CollectorSpec
    runner = CollectorRunner(CollectorSpec.of("cuda", CudaCollector), options, 1.0)
except ImportError:
    runner = CollectorRunner(CudaCollector, options, 1.0)
assembler = ScrapeAssembler([runner], "bench")
runner.sample_once()
samples, scrapes = [], []
for _ in range(100):
    t = time.perf_counter(); runner.sample_once(); samples.append(time.perf_counter() - t)
    assembler.render(compress=False)
    for _ in range(10):
        t = time.perf_counter(); assembler.render(compress=False); scrapes.append(time.perf_counter() - t)
served = runner.snapshot.text.count(b"alnair_cuda_kernel_launches_total{")
print(json.dumps({"samples": samples, "scrapes": scrapes, "segments": served}))
"""


@contextlib.contextmanager
def idle_writers(count: int, shm_dir: Path):
    env = {**os.environ, "ALNAIR_SHM_DIR": str(shm_dir)}
    writers = [
        subprocess.Popen(
            [str(WRITER), "--devices", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        for _ in range(count)
    ]
    try:
        for writer in writers:
            read_ready(writer)
        yield
    finally:
        for writer in writers:
            stop(writer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="comma-separated interpreters, each with an Alnair installed")
    parser.add_argument("--segments", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    raise_fd_limit()
    pythons = args.python.split(",")
    results: dict[str, dict[str, list[float]]] = {p: {"samples": [], "scrapes": []} for p in pythons}
    with (
        tempfile.TemporaryDirectory(prefix="alnair-cost-", dir="/dev/shm") as shm,
        idle_writers(args.segments, Path(shm)),
    ):
        for _ in range(args.rounds):
            for python in pythons:
                out = json.loads(
                    subprocess.run(
                        [python, "-c", MEASURE, shm],
                        capture_output=True,
                        text=True,
                        check=True,
                        cwd=tempfile.gettempdir(),
                    ).stdout
                )
                assert out["segments"] == args.segments, out["segments"]
                for key in ("samples", "scrapes"):
                    results[python][key] += out[key]
    print(f"{args.segments} segments, {args.rounds} alternating rounds; ms: median (min)")
    for python, r in results.items():
        print(
            f"{python}: sample {statistics.median(r['samples']) * 1e3:.2f} ({min(r['samples']) * 1e3:.2f}), "
            f"cached scrape {statistics.median(r['scrapes']) * 1e3:.3f} ({min(r['scrapes']) * 1e3:.3f})"
        )


if __name__ == "__main__":
    main()
