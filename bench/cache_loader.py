"""Dataset-cache loader throughput against redis-benchmark GET, a per-sample GET loader and local files.

    python bench/cache_loader.py [--samples 2000] [--size 102400] [--clients 4] [--batch 32]
                                 [--rounds 5] [--json PATH]

One redis-server (no persistence) on loopback holds SAMPLES random samples of SIZE bytes twice: as
the dataset cache's content-addressed blobs and as redis-benchmark's keys (key:000000000000 ...),
the same bytes. Each round runs every method once, in the same order, each over the whole dataset:

- redis-benchmark: `redis-benchmark -t get -d SIZE -c CLIENTS -r SAMPLES -n 3*SAMPLES` (C, pipelining off)
- CacheLoader: alnair.datacache's loader, CLIENTS threads, batches of BATCH (one MGET each), every
  value checked against its SHA-256, counters written back per batch
- torch DataLoader: the same CachedDataset in torch.utils.data.DataLoader, CLIENTS worker processes
  (skipped, and said so, when torch is not installed)
- per-sample GET: one redis-py GET per sample in one thread, as the original loader did; and the same
  with each value checked against its SHA-256, as the cache's loader does
- local files: the same samples read from the origin directory (page cache) by CLIENTS threads
- two ceilings, to show where the loader's time goes: the same MGET batches on CLIENTS threads without
  verifying anything, and SHA-256 of every sample (already in memory) on CLIENTS threads

Reported: median samples/s over the rounds and the ratio to redis-benchmark's median.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import redis

from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin
from alnair.datacache import keys


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port: int, directory: Path) -> subprocess.Popen:
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                               "--dir", str(directory)], stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return server
        except redis.ConnectionError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)


def write_origin(directory: Path, samples: int, size: int) -> None:
    directory.mkdir()
    for i in range(samples):
        (directory / f"{i:08d}.bin").write_bytes(os.urandom(size))


def timed(run: Callable[[], int]) -> float:
    """Samples per second of one run."""
    started = time.perf_counter()
    count = run()
    return count / (time.perf_counter() - started)


def redis_benchmark(port: int, args) -> float:
    result = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "get", "-d", str(args.size), "-c", str(args.clients),
                             "-r", str(args.samples), "-n", str(3 * args.samples), "--csv"],
                            capture_output=True, text=True, check=True)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    return float(rows[0]["rps"])


def cache_loader(dataset: CachedDataset, args) -> float:
    loader = CacheLoader(dataset, args.batch, workers=args.clients)
    return timed(lambda: sum(len(batch) for batch in loader))


def torch_loader(dataset: CachedDataset, args) -> float | None:
    try:
        from torch.utils.data import DataLoader
    except ImportError:
        return None
    loader = DataLoader(dataset, batch_size=args.batch, num_workers=args.clients, collate_fn=list)
    return timed(lambda: sum(len(batch) for batch in loader))


def per_sample_get(port: int, blob_keys: list[str], verify: bool) -> float:
    client = redis.Redis(port=port)
    if not verify:
        return timed(lambda: sum(client.get(key) is not None for key in blob_keys))
    digests = [bytes.fromhex(key.rsplit(":", 1)[1]) for key in blob_keys]
    return timed(lambda: sum(hashlib.sha256(client.get(key)).digest() == digest for key, digest in zip(blob_keys, digests)))


def local_files(origin: DirectoryOrigin, args) -> float:
    with ThreadPoolExecutor(args.clients) as pool:
        return timed(lambda: sum(1 for _ in pool.map(origin.read, range(len(origin)), chunksize=args.batch)))


def mget_only(dataset: CachedDataset, args) -> float:
    store = dataset._runtime_here().store
    batches = [[dataset.manifest.digest(i) for i in indices] for indices in CacheLoader(dataset, args.batch).batch_indices(0)]
    with ThreadPoolExecutor(args.clients) as pool:
        return timed(lambda: sum(len(values) for values in pool.map(store.get_blobs, batches)))


def sha256_only(samples: list[bytes], args) -> float:
    with ThreadPoolExecutor(args.clients) as pool:
        return timed(lambda: sum(1 for _ in pool.map(lambda s: hashlib.sha256(s).digest(), samples, chunksize=args.batch)))


def populate(port: int, dataset: CachedDataset, origin: DirectoryOrigin) -> tuple[list[str], float]:
    """Fill the cache through the loader (a cold epoch, timed) and redis-benchmark's keys with the same bytes."""
    cold = timed(lambda: sum(len(batch) for batch in CacheLoader(dataset, 32, workers=4)))
    client = redis.Redis(port=port)
    pipe = client.pipeline(transaction=False)
    for i in range(len(origin)):
        pipe.set(f"key:{i:012d}", origin.read(i))
        if len(pipe) == 64:
            pipe.execute()
    pipe.execute()
    return [keys.blob(dataset.manifest.digest(i)) for i in range(len(origin))], cold


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    return (f"{os.cpu_count()} CPUs, {model}; Python {platform.python_version()}, redis-py {redis.__version__}, "
            f"redis-server {redis_version.removeprefix('v=')}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--size", type=int, default=102400)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    for binary in ("redis-server", "redis-benchmark"):
        if shutil.which(binary) is None:
            sys.exit(f"{binary} is not installed (apt-get install redis-server)")

    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as temp:
        origin_dir = Path(temp) / "origin"
        write_origin(origin_dir, args.samples, args.size)
        port = free_port()
        server = start_redis(port, Path(temp))
        try:
            origin = DirectoryOrigin(origin_dir)
            dataset = CachedDataset(f"redis://127.0.0.1:{port}/0", "bench", origin, job="bench")
            blob_keys, cold = populate(port, dataset, origin)
            samples = [origin.read(i) for i in range(len(origin))]
            methods: dict[str, Callable[[], float | None]] = {
                f"redis-benchmark GET, {args.clients} clients": lambda: redis_benchmark(port, args),
                f"CacheLoader, {args.clients} threads, batch {args.batch}": lambda: cache_loader(dataset, args),
                f"torch DataLoader, {args.clients} workers, batch {args.batch}": lambda: torch_loader(dataset, args),
                "per-sample GET, 1 client": lambda: per_sample_get(port, blob_keys, verify=False),
                "per-sample GET + SHA-256, 1 client": lambda: per_sample_get(port, blob_keys, verify=True),
                f"local files, {args.clients} threads": lambda: local_files(origin, args),
                f"ceiling: MGET alone, {args.clients} threads": lambda: mget_only(dataset, args),
                f"ceiling: SHA-256 alone, {args.clients} threads": lambda: sha256_only(samples, args),
            }
            rates: dict[str, list[float]] = {name: [] for name in methods}
            for _ in range(args.rounds):
                for name, run in methods.items():
                    rate = run()
                    if rate is not None:
                        rates[name].append(rate)
        finally:
            server.terminate()
            server.wait(10)
    report(args, rates, cold)


def report(args, rates: dict[str, list[float]], cold: float) -> None:
    baseline = statistics.median(next(iter(rates.values())))
    print(f"{args.samples} samples of {args.size} bytes, {args.rounds} rounds; {machine()}")
    print(f"{'method':46} {'samples/s':>10} {'min':>8} {'max':>8} {'MB/s':>7} {'vs GET':>7}")
    summary = {}
    for name, values in rates.items():
        if not values:
            print(f"{name:46} {'not run (torch not installed)':>30}")
            continue
        median = statistics.median(values)
        summary[name] = {"median": median, "min": min(values), "max": max(values), "ratio": median / baseline}
        print(f"{name:46} {median:10.0f} {min(values):8.0f} {max(values):8.0f} {median * args.size / 1e6:7.0f} {median / baseline:7.2f}")
    print(f"{'CacheLoader, cold cache (origin + write-back)':46} {cold:10.0f} {'':8} {'':8} {cold * args.size / 1e6:7.0f} {cold / baseline:7.2f}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "args": vars(args) | {"json": str(args.json)},
                                         "rates": rates, "summary": summary, "cold": cold}, indent=2))


if __name__ == "__main__":
    main()
