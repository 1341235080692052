"""The dataset cache shared by four jobs of different I/O sensitivity: plain LRU, an equal static split and the space
policy (docs/datacache.md, "Space for many jobs"), side by side in one run.

    python bench/cache_policy.py [--runs 5] [--samples 400] [--size 8000] [--epochs 6] [--batch 8]
                                 [--compute-ms 0.25,1,5.5,6] [--origin-ms 5] [--origin-reads 1] [--json PATH]

Four jobs, one process each, start together; job j reads its own dataset of SAMPLES random samples of SIZE bytes for
EPOCHS shuffled epochs through CacheLoader, spending COMPUTE_MS[j] per sample after each batch (a training step: the
loader reads ahead meanwhile). Their datasets add up to twice the cache's room. The origin is a slow store: each read
takes ORIGIN_MS, ORIGIN_READS of a job's reads at once, so a miss costs ORIGIN_MS / ORIGIN_READS of reading; a job
whose step is longer than that hides its misses (insensitive to I/O), one whose step is shorter waits for them.

Each run starts one fresh redis-server (no persistence) per policy, in an order that rotates from run to run:
- lru: the policy off; Redis's allkeys-lru with maxmemory set so that the blobs fill the same room: the memory in
  use once the jobs have connected, plus what the room's worth of blobs of SIZE added to the empty server's
- split: the policy on with the room as its capacity and a job quota of a quarter of it (Fluid/Alluxio-style
  static shares)
- benefit: the policy on with the room as its capacity, no quotas, its defaults otherwise

Every epoch's samples are checked against the origin's. Reported per policy: each job's time to finish its epochs
and its hit ratio, and the total (the four times added), as medians over the runs with their range; the blobs
resident at the end (a check that LRU had the same room); and the ratios the issue's targets name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import redis
from cache_loader import free_port, start_redis, write_origin

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin

POLICIES = ("lru", "split", "benefit")
JOBS = ("a", "b", "c", "d")


class SlowOrigin(DirectoryOrigin):
    """A remote store: `seconds` per read, `parallel_reads` of a process's reads at once."""

    def __init__(self, root: Path, seconds: float, parallel_reads: int):
        super().__init__(root)
        self.seconds, self.parallel_reads = seconds, parallel_reads

    def read(self, index: int) -> bytes:
        time.sleep(self.seconds)
        return super().read(index)


def run_job(url: str, root: str, job: str, args, compute: float, start, results) -> None:
    """One job's process: its epochs after `start`, then (job, seconds, hits, misses, epochs right)."""
    origin = SlowOrigin(Path(root), args.origin_ms / 1000, args.origin_reads)
    expected = sorted(hashlib.sha256(p.read_bytes()).digest() for p in origin.paths)
    dataset = CachedDataset(url, job, origin, job=job)
    loader = CacheLoader(dataset, args.batch, shuffle=True, seed=JOBS.index(job))
    right = True
    start.wait()
    began = time.monotonic()
    for _ in range(args.epochs):
        digests = []
        for batch in loader:
            time.sleep(compute * len(batch))
            digests += [hashlib.sha256(s).digest() for s in batch]
        right &= sorted(digests) == expected
    seconds = time.monotonic() - began
    dataset.close()
    counts = redis.Redis.from_url(url).hmget(keys.job(job), keys.HITS, keys.MISSES)
    results.put((job, seconds, *(int(float(c or 0)) for c in counts), right))


def blob_memory(port: int, room: int, size: int) -> int:
    """Bytes the server's memory grows by with `room` bytes of blobs of `size` stored (then removed)."""
    client = redis.Redis(port=port)
    before = client.info("memory")["used_memory"]
    for _ in range(room // size):
        client.set(keys.blob(os.urandom(32)), os.urandom(size))
    grown = client.info("memory")["used_memory"] - before
    client.flushall()
    return grown


def configure(policy: str, port: int, room: int, blobs_bytes: int, args) -> None:
    """The policy's caps; for lru, maxmemory: the memory in use with every job's connections open, plus the room's
    worth of blobs (`blobs_bytes`, measured before they connected)."""
    client = redis.Redis(port=port)
    if policy == "lru":
        client.config_set("maxmemory", client.info("memory")["used_memory"] + blobs_bytes)
        client.config_set("maxmemory-policy", "allkeys-lru")
        return
    caps = {keys.CAPACITY_BYTES: room}
    if policy == "split":
        caps[keys.JOB_QUOTA_BYTES] = room // len(JOBS)
    client.hset(keys.POLICY, mapping=caps)


def one_policy(policy: str, roots: dict[str, Path], room: int, args, work: Path) -> dict:
    port = free_port()
    server = start_redis(port, work / f"redis-{policy}-{port}")
    try:
        blobs_bytes = blob_memory(port, room, args.size)
        url = f"redis://127.0.0.1:{port}/0"
        context = multiprocessing.get_context("fork")
        start, results = context.Event(), context.Queue()
        processes = [
            context.Process(target=run_job, args=(url, str(roots[job]), job, args, compute / 1000, start, results))
            for job, compute in zip(JOBS, args.compute_ms)
        ]
        for process in processes:
            process.start()
        time.sleep(0.5)  # every process opened its dataset
        configure(policy, port, room, blobs_bytes, args)
        start.set()
        finished = {
            job: (seconds, hits, misses, right)
            for job, seconds, hits, misses, right in (results.get(timeout=600) for _ in processes)
        }
        for process in processes:
            process.join(60)
        resident = sum(1 for _ in redis.Redis(port=port).scan_iter(match=keys.PREFIX + "blob:*", count=1000))
    finally:
        server.kill()
        server.wait()
    if not all(right for *_, right in finished.values()):
        raise SystemExit(f"{policy}: an epoch did not serve the origin's bytes")
    return {
        "jobs": {job: {"seconds": s, "hit_ratio": h / max(h + m, 1)} for job, (s, h, m, _) in finished.items()},
        "total_seconds": sum(s for s, *_ in finished.values()),
        "resident_blobs": resident,
    }


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]"


def report(runs: list[dict], args) -> dict:
    print(
        f"{'policy':8} {'total s (median [range])':>26} "
        + " ".join(f"{'job ' + j + ' s':>22}" for j in JOBS)
        + "  hit ratios (median)   resident blobs"
    )
    summary = {}
    for policy in POLICIES:
        rows = [run[policy] for run in runs]
        totals = [r["total_seconds"] for r in rows]
        jobs = {j: [r["jobs"][j]["seconds"] for r in rows] for j in JOBS}
        hits = {j: statistics.median(r["jobs"][j]["hit_ratio"] for r in rows) for j in JOBS}
        resident = [r["resident_blobs"] for r in rows]
        summary[policy] = {
            "total": statistics.median(totals),
            "jobs": {j: statistics.median(v) for j, v in jobs.items()},
        }
        print(
            f"{policy:8} {spread(totals):>26} "
            + " ".join(f"{spread(jobs[j]):>22}" for j in JOBS)
            + "  "
            + " ".join(f"{hits[j]:.2f}" for j in JOBS)
            + f"   {min(resident)}-{max(resident)}"
        )
    lru, split, benefit = (summary[p] for p in POLICIES)
    print(
        f"\nbenefit total / lru total: {benefit['total'] / lru['total']:.3f} (target <= 0.80); "
        f"/ split total: {benefit['total'] / split['total']:.3f}"
    )
    print(
        "benefit / split per job: "
        + ", ".join(f"{j} {benefit['jobs'][j] / split['jobs'][j]:.3f}" for j in JOBS)
        + " (target: none above 1)"
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--size", type=int, default=8000)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument(
        "--compute-ms", type=lambda text: [float(x) for x in text.split(",")], default=[0.25, 1, 5.5, 6]
    )
    parser.add_argument("--origin-ms", type=float, default=5)
    parser.add_argument("--origin-reads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if len(args.compute_ms) != len(JOBS):
        parser.error(f"--compute-ms takes {len(JOBS)} numbers")
    room = len(JOBS) * args.samples * args.size // 2
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {len(JOBS)} jobs x {args.samples} "
        f"samples x {args.size} B, room {room} B (half), {args.epochs} epochs, batch {args.batch}, compute ms/sample "
        f"{args.compute_ms}, origin {args.origin_ms} ms/read x {args.origin_reads} at once",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="alnair-cache-policy-") as work:
        roots = {job: Path(work) / job for job in JOBS}
        for root in roots.values():
            write_origin(root, args.samples, args.size)
        runs = []
        for run in range(args.runs):
            order = POLICIES[run % len(POLICIES) :] + POLICIES[: run % len(POLICIES)]
            runs.append({policy: one_policy(policy, roots, room, args, Path(work)) for policy in order})
            totals = ", ".join(f"{p} {runs[-1][p]['total_seconds']:.2f} s" for p in order)
            print(f"run {run + 1}: {totals}", flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}\n")
    summary = report(runs, args)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": {k: v for k, v in vars(args).items() if k != "json"}, "runs": runs, "summary": summary},
                indent=1,
            )
        )


if __name__ == "__main__":
    sys.exit(main())
