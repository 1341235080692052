"""Dataset-cache loader throughput against redis-benchmark GET, a per-sample GET loader and local files.

    python bench/cache_loader.py [--samples 2000] [--size 102400] [--clients 4] [--batch 32]
                                 [--rounds 7] [--origin-ms 20] [--shards N [--seconds S]] [--json PATH]

One redis-server (no persistence) on loopback holds SAMPLES random samples of SIZE bytes twice: as
the dataset cache's content-addressed blobs and as redis-benchmark's keys (key:000000000000 ...),
the same bytes. Each round runs every method once over the whole dataset, in one order on even
rounds and the reverse on odd ones:

- redis-benchmark: `redis-benchmark -t get -d SIZE -c CLIENTS -r SAMPLES -n 3*SAMPLES` (C, pipelining off),
  the baseline of every ratio; and the same with one client
- CacheLoader: alnair.datacache's loader with its default workers, and with CLIENTS workers if that
  differs; batches of BATCH (one MGET each, the next sent before a reply is read), every value checked
  against its XXH3-128 check digest, counters written every half second; and the same pipelined
  batches read in the consumer's own thread (CachedDataset.batches), without the loader's hand-off
- torch DataLoader: the same CachedDataset in torch.utils.data.DataLoader(dataset, batch_size=BATCH,
  num_workers=CLIENTS), the default collate: its workers start with each epoch (torch's default); and the
  same with persistent_workers, started once before the rounds, their CPU counted while they live
  (both skipped, and said so, when torch is not installed)
- per-sample GET: one redis-py GET per sample in one thread, as the original loader did; and the same
  with each value checked against its check digest, as the cache's loader does
- local files: the same samples read from the origin directory (page cache) by CLIENTS threads, each
  reading its share in one task
- half-warm epoch: one epoch of the default loader over a dataset whose manifest knows every other
  sample (a fresh dataset name each time, its even samples read first), from an origin ORIGIN_MS away
  per read (a remote store's latency; 32 reads at once), with and without substitutable reads
- ceilings, to show where the loader's time goes: on one thread, the loader's pipelined MGETs, every value
  checked, with nothing else; on CLIENTS threads, the same MGET batches, one at a time, through the
  loader's reader with every value checked by its check digest (the loader's work without its bookkeeping), the
  same checked by SHA-256 (the loader's check before check digests), the MGETs alone, and the MGETs
  alone through redis-py and hiredis (the loader's reader before); on one thread, the check digest and the
  SHA-256 of every sample already in memory; from these, the most any client that checks every value
  could reach on this machine

With --shards N (N >= 1), a Redis Cluster of N primaries on loopback (no replicas, no persistence) instead,
and only: `redis-benchmark --cluster -t get` with CLIENTS clients on N threads (one node: without --cluster,
which refuses it; its keys SET first with values of SIZE bytes, 8*SAMPLES random SETs), the default loader in
one process, the pipelined loader (CachedDataset.batches, --depth batches in flight per node) in N forked
processes, each reading every N-th batch, and the torch DataLoader with N workers (started per epoch, and
persistent). The server CPU is every node's. With --seconds S, each of those runs lasts at least S seconds
(6 shards read 8000 samples in a tenth of a second, against which a process's start and redis-benchmark's
clock weigh): before the rounds, each method runs one epoch (redis-benchmark: 3*SAMPLES requests) and is then
given as many epochs (requests) as make S, scaled again until a run lasts 0.9 S. redis-benchmark's runs get
2 S: with --threads it stops only on its 250 ms tick, so its rate is requests / (its time rounded up to a
tick), low by at most 0.25 s / its run's length.

Reported: median samples/s over the rounds and its ratio to redis-benchmark's median; the CPU time
each method costs per sample, in redis-server (all its threads) and in the client (this process, or
redis-benchmark and DataLoader workers as children), medians over the rounds; and the rate those
costs allow if every CPU did nothing else, CPUs / (server + client time per sample). Load averages
before and after the run are printed: other work on the machine lowers every rate.
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import math
import multiprocessing
import os
import platform
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import redis

from alnair.abi import cache_keys as keys
from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin, content
from alnair.datacache.dataset import PIPELINE_DEPTH
from alnair.datacache.resp_client import RespClient
from alnair.datacache.store import connect


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLUSTER_ARGS = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")


def start_redis(port: int, directory: Path, *extra: str) -> subprocess.Popen:
    directory.mkdir(exist_ok=True)
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            return server
        except redis.ConnectionError as e:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("redis-server did not start") from e
            time.sleep(0.05)


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is a port too."""
    while (port := free_port()) + 10000 > 65535:
        pass
    return port


def create_cluster(ports: list[int]) -> str:
    """Joins the servers into one cluster of primaries; returns its redis+cluster:// URL once every node says ok."""
    addresses = [f"127.0.0.1:{port}" for port in ports]
    if len(ports) >= 3:
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
    else:  # redis-cli creates no cluster of fewer than 3 primaries: the slots shared out and the nodes met by hand
        for i, port in enumerate(ports):
            node = redis.Redis(port=port)
            node.execute_command("CLUSTER", "ADDSLOTSRANGE", 16384 * i // len(ports), 16384 * (i + 1) // len(ports) - 1)
            if i:
                node.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
    deadline = time.monotonic() + 30
    while not all(b"cluster_state:ok" in redis.Redis(port=port).execute_command("CLUSTER", "INFO") for port in ports):
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not come up")
        time.sleep(0.05)
    return "redis+cluster://" + ",".join(addresses)


def write_origin(directory: Path, samples: int, size: int) -> None:
    directory.mkdir()
    for i in range(samples):
        (directory / f"{i:08d}.bin").write_bytes(os.urandom(size))


torch_missing = "torch not installed"  # why the torch rows did not run: the ImportError, once tried
CHECK_ONE_THREAD = "ceiling: XXH3-128 check alone, 1 thread"

# A sample's manifest entry as the bench uses it: (SHA-256 address, check digest).
Entry = tuple[bytes, bytes]
# How a value is checked against its entry: as the loader does, and as it did before check digests.
CHECKS: dict[str, Callable[[bytes, Entry], bool]] = {
    "XXH3-128": lambda value, entry: content.check_digest(value, entry[0]) == entry[1],
    "SHA-256": lambda value, entry: content.address(value) == entry[0],
}


@dataclass
class Measured:
    rate: float  # samples per second
    server_us: float  # redis-server CPU time per sample
    client_us: float  # this process's and its waited-for children's CPU time per sample
    seconds: float = 0.0  # how long the run took (its samples / its rate)


def server_cpu_seconds(pid: int) -> float:
    """CPU time of every thread of `pid` (schedstat: nanoseconds, not clock ticks)."""
    tasks = Path(f"/proc/{pid}/task")
    return sum(int((tasks / task / "schedstat").read_text().split()[0]) for task in os.listdir(tasks)) / 1e9


def client_cpu_seconds(server_pids: list[int] = ()) -> float:
    """This process's CPU time, its waited-for children's and its live children's but the servers' (persistent
    DataLoader workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime + live_children_cpu_seconds(server_pids)


def live_children_cpu_seconds(server_pids: list[int]) -> float:
    total = 0.0
    for listing in Path(f"/proc/{os.getpid()}/task").glob("*/children"):
        try:
            pids = listing.read_text().split()
        except FileNotFoundError:  # a thread that just ended
            continue
        for pid in map(int, pids):
            if pid not in server_pids:
                try:
                    total += server_cpu_seconds(pid)
                except (FileNotFoundError, ProcessLookupError):  # exited meanwhile: counted once waited for
                    pass
    return total


def measured(run: Callable[[], int | tuple[int, float] | None], server_pids: list[int]) -> Measured | None:
    """Runs `run`, which returns how many samples it read (and, if it timed itself, its rate)."""

    def server_cpu() -> float:
        return sum(map(server_cpu_seconds, server_pids))

    server, client, started = server_cpu(), client_cpu_seconds(server_pids), time.perf_counter()
    result = run()
    seconds = time.perf_counter() - started
    if result is None:
        return None
    count, rate = result if isinstance(result, tuple) else (result, result / seconds)
    return Measured(
        rate,
        (server_cpu() - server) / count * 1e6,
        (client_cpu_seconds(server_pids) - client) / count * 1e6,
        count / rate,
    )


def calibrated(run: Callable[[int], int | tuple[int, float] | None], seconds: float, server_pids: list[int]) -> int:
    """How many epochs (redis-benchmark: multiples of its requests) make one run of `run` last `seconds`: one,
    then scaled by how long a run took, until one lasts 0.9 of it (4 tries at most)."""
    repeat = 1
    for _ in range(4):
        result = measured(functools.partial(run, repeat), server_pids)
        if result is None or result.seconds >= 0.9 * seconds:
            break
        repeat = max(repeat + 1, math.ceil(repeat * seconds / result.seconds * 1.1))
    return repeat


def redis_benchmark(port: int, args, clients: int) -> tuple[int, float]:
    requests = 3 * args.samples
    result = subprocess.run(
        [
            "redis-benchmark",
            "-p",
            str(port),
            "-t",
            "get",
            "-d",
            str(args.size),
            "-c",
            str(clients),
            "-r",
            str(args.samples),
            "-n",
            str(requests),
            "--csv",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    return requests, float(rows[0]["rps"])  # its own rate: the process's start is not a GET


class SlowOrigin(DirectoryOrigin):
    """The origin with a remote store's latency per read, its reads overlapping 32 at once."""

    parallel_reads = 32

    def __init__(self, root: Path, seconds: float):
        super().__init__(root)
        self.seconds = seconds

    def read(self, index: int) -> bytes:
        time.sleep(self.seconds)
        return super().read(index)


class HalfWarm:
    """Epochs of fresh datasets over one origin whose even samples were read first: half the manifest known."""

    def __init__(self, url: str, origin_dir: Path, args):
        self.url, self.origin_dir, self.args, self.runs = url, origin_dir, args, 0

    def epoch(self, substitutable: bool) -> tuple[int, float]:
        self.runs += 1
        name = f"half-warm-{self.runs}"
        warm = CachedDataset(self.url, name, DirectoryOrigin(self.origin_dir), job="bench")
        for start in range(0, len(warm), 2 * self.args.batch):
            warm.__getitems__(list(range(start, min(start + 2 * self.args.batch, len(warm)), 2)))
        warm.close()
        dataset = CachedDataset(
            self.url,
            name,
            SlowOrigin(self.origin_dir, self.args.origin_ms / 1000),
            job="bench",
            substitutable=substitutable,
        )
        started = time.perf_counter()
        count = sum(len(batch) for batch in CacheLoader(dataset, self.args.batch))
        rate = count / (time.perf_counter() - started)
        dataset.close()
        return count, rate


def loader_processes(dataset: CachedDataset, plan: list[list[int]], processes: int, depth: int) -> tuple[int, float]:
    """The pipelined loader (CachedDataset.batches, `depth` batches in flight per node) in `processes` forked
    processes, each reading every processes-th batch; timed from when every process is ready to when the last is
    done."""
    context = multiprocessing.get_context("fork")
    ready, go, counts = context.Barrier(processes + 1), context.Event(), context.Queue()

    def read(share: list[list[int]]) -> None:
        ready.wait()
        go.wait()
        counts.put(sum(len(batch) for batch in dataset.batches(share, depth)))

    children = [context.Process(target=read, args=(plan[i::processes],)) for i in range(processes)]
    for child in children:
        child.start()
    ready.wait()
    started = time.perf_counter()
    go.set()
    count = sum(counts.get() for _ in children)
    seconds = time.perf_counter() - started
    for child in children:
        child.join()
    return count, count / seconds


def redis_benchmark_cluster(port: int, args, command: str, repeat: int = 1) -> tuple[int, float]:
    # SET: 8 random keys per sample leave 1 in 3000 unset (e^-8), whose GET would be a cheap nil
    requests = (8 if command == "set" else 3) * args.samples * repeat
    # One C thread per shard, as the loader has a process per shard. One node owns every slot: plain GETs reach it
    # (redis-benchmark's --cluster refuses a cluster of one node).
    mode = ["--cluster", "--threads", str(args.shards)] if args.shards > 1 else []
    result = subprocess.run(
        [
            "redis-benchmark",
            *mode,
            "-p",
            str(port),
            "-t",
            command,
            "-d",
            str(args.size),
            "-c",
            str(args.clients),
            "-r",
            str(args.samples),
            "-n",
            str(requests),
            "--csv",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    table = result.stdout[result.stdout.index('"test"') :]  # after its description of the cluster
    return requests, float(next(csv.DictReader(io.StringIO(table)))["rps"])


def run_cluster_rounds(
    args, url: str, server_pids: list[int], origin_dir: Path
) -> tuple[dict[str, list[Measured]], float, dict[str, int]]:
    dataset = CachedDataset(url, "bench", DirectoryOrigin(origin_dir), job="bench")
    started = time.perf_counter()
    cold = sum(len(batch) for batch in CacheLoader(dataset, args.batch)) / (time.perf_counter() - started)
    port = int(url.rsplit(":", 1)[1])
    redis_benchmark_cluster(port, args, "set")  # redis-benchmark's keys, values of the same size
    plan = CacheLoader(dataset, args.batch).batch_indices(0)
    persistent = PersistentTorchLoader(dataset, args, args.shards)
    benchmark = f"redis-benchmark{' --cluster' if args.shards > 1 else ''} GET, {args.clients} clients"
    depth = f", {args.depth} in flight" if args.depth != PIPELINE_DEPTH else ""
    # Each takes how many epochs to read (redis-benchmark: multiples of 3*SAMPLES requests).
    methods: dict[str, Callable[[int], int | tuple[int, float] | None]] = {
        benchmark: lambda repeat: redis_benchmark_cluster(port, args, "get", repeat),
        f"CacheLoader, 1 process, batch {args.batch}": lambda repeat: sum(
            cache_loader(dataset, args, None) for _ in range(repeat)
        ),
        f"CachedDataset.batches, {args.shards} processes{depth}": lambda repeat: loader_processes(
            dataset, plan * repeat, args.shards, args.depth
        ),
        f"torch DataLoader, {args.shards} workers, batch {args.batch}": lambda repeat: torch_epochs(
            lambda: torch_loader(dataset, args, args.shards), repeat
        ),
        f"torch DataLoader, {args.shards} persistent workers": lambda repeat: torch_epochs(persistent.epoch, repeat),
    }
    repeats = {
        name: calibrated(run, args.seconds * (2 if name == benchmark and args.shards > 1 else 1), server_pids)
        if args.seconds
        else 1
        for name, run in methods.items()
    }
    results: dict[str, list[Measured]] = {name: [] for name in methods}
    for round_ in range(args.rounds):
        for name in list(methods) if round_ % 2 == 0 else list(reversed(methods)):
            result = measured(functools.partial(methods[name], repeats[name]), server_pids)
            if result is not None:
                results[name].append(result)
    return results, cold, repeats


def torch_epochs(epoch: Callable[[], int | None], repeat: int) -> int | None:
    counts = [epoch() for _ in range(repeat)]
    return None if None in counts else sum(counts)


def cache_loader(dataset: CachedDataset, args, workers: int | None) -> int:
    return sum(len(batch) for batch in CacheLoader(dataset, args.batch, workers=workers))


def torch_dataloader(dataset: CachedDataset, args, workers: int, persistent: bool = False):
    """torch's DataLoader as a user writes it: batch size and workers, default collate (a list of bytes stays a
    list)."""
    global torch_missing
    try:
        from torch.utils.data import DataLoader
    except ImportError as e:  # said in the report: a set-up that hides the host's torch shows here
        torch_missing = f"{e} (python {sys.executable})"
        return None
    with warnings.catch_warnings():  # more workers than CPUs is the point of the comparison
        warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)
        return DataLoader(dataset, batch_size=args.batch, num_workers=workers, persistent_workers=persistent)


def torch_loader(dataset: CachedDataset, args, workers: int | None = None) -> int | None:
    """One epoch of a DataLoader made for it: its workers start with the epoch and end with it (torch's default)."""
    loader = torch_dataloader(dataset, args, workers or args.clients)
    if loader is None:
        return None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "This DataLoader will create", UserWarning)
        return sum(len(batch) for batch in loader)


class PersistentTorchLoader:
    """A DataLoader with persistent_workers: its workers start once, before the first round (not timed), and
    serve every later epoch; their CPU is counted while they live."""

    def __init__(self, dataset: CachedDataset, args, workers: int):
        self.loader = torch_dataloader(dataset, args, workers, persistent=True)
        if self.loader is not None:
            next(iter(self.loader))  # workers started; the rest of that epoch is dropped

    def epoch(self) -> int | None:
        if self.loader is None:
            return None
        return sum(len(batch) for batch in self.loader)


def per_sample_get(client: redis.Redis, entries: list[Entry], check: str | None) -> int:
    if check is None:
        return sum(client.get(keys.blob(address)) is not None for address, _ in entries)
    checked = CHECKS[check]
    return sum(checked(client.get(keys.blob(entry[0])), entry) for entry in entries)


def in_slices(items: list, threads: int, work: Callable) -> int:
    """`work` on every item, one task per thread (ThreadPoolExecutor ignores chunksize: a task per item
    costs more thread switches than a 100 KB read or hash)."""
    with ThreadPoolExecutor(threads) as pool:
        return sum(
            pool.map(
                lambda part: sum(1 for item in part if work(item) is not None),
                [items[i::threads] for i in range(threads)],
            )
        )


def local_files(origin: DirectoryOrigin, args) -> int:
    return in_slices(list(range(len(origin))), args.clients, origin.read)


def mget_batches(mget: Callable[[list[str]], list], batches: list[list[Entry]], args, check: str | None) -> int:
    """The loader's MGETs on CLIENTS threads, each on a connection of its own, without its bookkeeping."""

    def fetch(entries: list[Entry]) -> int:
        values = mget([keys.blob(address) for address, _ in entries])
        return len(values) if check is None else sum(map(CHECKS[check], values, entries))

    with ThreadPoolExecutor(args.clients) as pool:
        return sum(pool.map(fetch, batches))


def pipelined_mgets(client: RespClient, batches: list[list[Entry]], check: str) -> int:
    """The loader's pipelined MGETs (the next one sent before a reply is read) on one thread, every value
    checked, without the loader's bookkeeping."""
    pipeline, checked = client.pipeline(), 0
    for ask, answer in zip([*batches, None], [None, *batches]):
        if ask is not None:
            pipeline.send([keys.blob(address) for address, _ in ask])
        if answer is not None:
            checked += sum(map(CHECKS[check], pipeline.receive(), answer))
    pipeline.close()
    return checked


def check_only(samples: list[bytes], entries: list[Entry], check: str) -> int:
    """Every sample already in memory checked on one thread."""
    checked = CHECKS[check]
    return in_slices(list(zip(samples, entries)), 1, lambda pair: checked(*pair) or None)


def populate(port: int, dataset: CachedDataset, origin: DirectoryOrigin) -> tuple[list[Entry], float]:
    """Fill the cache through the loader (a cold epoch, timed) and redis-benchmark's keys with the same bytes."""
    started = time.perf_counter()
    cold = sum(len(batch) for batch in CacheLoader(dataset, 32)) / (time.perf_counter() - started)
    client = redis.Redis(port=port)
    pipe = client.pipeline(transaction=False)
    for i in range(len(origin)):
        pipe.set(f"key:{i:012d}", origin.read(i))
        if len(pipe) == 64:
            pipe.execute()
    pipe.execute()
    return [(dataset.manifest.digest(i), dataset.manifest.check(i)) for i in range(len(origin))], cold


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    redis_version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()[2]
    return (
        f"{os.cpu_count()} CPUs, {model}; Python {platform.python_version()}, redis-py {redis.__version__}, "
        f"redis-server {redis_version.removeprefix('v=')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--size", type=int, default=102400)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--origin-ms", type=float, default=20.0, help="the half-warm epochs' origin latency per read")
    parser.add_argument("--shards", type=int, default=0, help="a Redis Cluster of this many primaries (0: one server)")
    parser.add_argument(
        "--depth",
        type=int,
        default=PIPELINE_DEPTH,
        help="with --shards: batches in flight per node in the N-process row",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=0.0,
        help="with --shards: epochs (requests) per run for each run to last this long (0: one epoch)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    # a timeout's TERM still stops the servers
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    for binary in ("redis-server", "redis-benchmark", *(["redis-cli"] if args.shards else [])):
        if shutil.which(binary) is None:
            sys.exit(f"{binary} is not installed (apt-get install redis-server)")

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as temp:
        origin_dir = Path(temp) / "origin"
        write_origin(origin_dir, args.samples, args.size)
        ports = [cluster_port() if args.shards else free_port() for _ in range(max(args.shards, 1))]
        servers = [start_redis(port, Path(temp) / str(port), *(CLUSTER_ARGS if args.shards else ())) for port in ports]
        try:
            repeats: dict[str, int] = {}
            if args.shards:
                results, cold, repeats = run_cluster_rounds(
                    args, create_cluster(ports), [s.pid for s in servers], origin_dir
                )
            else:
                results, cold = run_rounds(args, ports[0], servers[0].pid, origin_dir)
        finally:
            for server in servers:
                server.terminate()
                server.wait(10)
    report(args, results, cold, load_before, os.getloadavg(), repeats)


def run_rounds(args, port: int, server_pid: int, origin_dir: Path) -> tuple[dict[str, list[Measured]], float]:
    url = f"redis://127.0.0.1:{port}/0"
    origin = DirectoryOrigin(origin_dir)
    dataset = CachedDataset(url, "bench", origin, job="bench")
    entries, cold = populate(port, dataset, origin)
    samples = [origin.read(i) for i in range(len(origin))]
    default_loader = CacheLoader(dataset, args.batch)
    plan = default_loader.batch_indices(0)
    batches = [[entries[i] for i in indices] for indices in plan]
    client = redis.Redis(port=port)
    redis_py = connect(url, timeout=10)
    own_client = RespClient(url, 10, redis_py)
    reader = own_client.mget
    default_workers = default_loader.workers
    half_warm = HalfWarm(url, origin_dir, args)
    persistent = PersistentTorchLoader(dataset, args, args.clients)
    methods: dict[str, Callable[[], int | tuple[int, float] | None]] = {
        f"redis-benchmark GET, {args.clients} clients": lambda: redis_benchmark(port, args, args.clients),
        f"CacheLoader, {default_workers} worker (default), batch {args.batch}": lambda: cache_loader(
            dataset, args, None
        ),
    }
    if default_workers != args.clients:
        methods[f"CacheLoader, {args.clients} workers"] = lambda: cache_loader(dataset, args, args.clients)
    methods |= {
        "CachedDataset.batches, no thread": lambda: sum(len(batch) for batch in dataset.batches(plan)),
        "redis-benchmark GET, 1 client": lambda: redis_benchmark(port, args, 1),
        f"torch DataLoader, {args.clients} workers, batch {args.batch}": lambda: torch_loader(dataset, args),
        f"torch DataLoader, {args.clients} persistent workers": persistent.epoch,
        "per-sample GET, 1 client": lambda: per_sample_get(client, entries, None),
        "per-sample GET + XXH3-128 check, 1 client": lambda: per_sample_get(client, entries, "XXH3-128"),
        f"local files, {args.clients} threads": lambda: local_files(origin, args),
        f"half-warm epoch, origin {args.origin_ms:g} ms": lambda: half_warm.epoch(False),
        f"half-warm epoch, origin {args.origin_ms:g} ms, substitutable": lambda: half_warm.epoch(True),
        "ceiling: pipelined MGET + XXH3-128, 1 thread": lambda: pipelined_mgets(own_client, batches, "XXH3-128"),
        f"ceiling: MGET + XXH3-128 check, {args.clients} threads": lambda: mget_batches(
            reader, batches, args, "XXH3-128"
        ),
        f"ceiling: MGET + SHA-256, {args.clients} threads": lambda: mget_batches(reader, batches, args, "SHA-256"),
        f"ceiling: MGET alone, {args.clients} threads": lambda: mget_batches(reader, batches, args, None),
        f"ceiling: redis-py MGET alone, {args.clients} threads": lambda: mget_batches(
            redis_py.mget, batches, args, None
        ),
        CHECK_ONE_THREAD: lambda: check_only(samples, entries, "XXH3-128"),
        "ceiling: SHA-256 alone, 1 thread": lambda: check_only(samples, entries, "SHA-256"),
    }
    results: dict[str, list[Measured]] = {name: [] for name in methods}
    for round_ in range(args.rounds):
        order = list(methods) if round_ % 2 == 0 else list(reversed(methods))  # drift hits every method alike
        for name in order:
            result = measured(methods[name], [server_pid])
            if result is not None:
                results[name].append(result)
    return results, cold


def report(
    args, results: dict[str, list[Measured]], cold: float, load_before, load_after, repeats: dict[str, int]
) -> None:
    baseline = statistics.median(m.rate for m in next(iter(results.values())))
    cpus = os.cpu_count() or 1
    print(f"{args.samples} samples of {args.size} bytes, {args.rounds} rounds; {machine()}")
    print(
        f"load average (1, 5, 15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)}"
    )
    print(
        f"{'method':44} {'samples/s':>9} {'min':>6} {'max':>6} {'MB/s':>5} {'vs GET':>6} "
        f"{'server us':>9} {'client us':>9} {'CPU-bound/s':>11}"
    )
    summary = {}
    for name, runs in results.items():
        if not runs:
            print(f"{name:44} not run ({torch_missing})")
            continue
        rates = [m.rate for m in runs]
        median = statistics.median(rates)
        server_us, client_us = (
            statistics.median(m.server_us for m in runs),
            statistics.median(m.client_us for m in runs),
        )
        bound = cpus * 1e6 / (server_us + client_us)
        summary[name] = {
            "median": median,
            "min": min(rates),
            "max": max(rates),
            "ratio": median / baseline,
            "server_us": server_us,
            "client_us": client_us,
            "cpu_bound": bound,
        }
        print(
            f"{name:44} {median:9.0f} {min(rates):6.0f} {max(rates):6.0f} {median * args.size / 1e6:5.0f} "
            f"{median / baseline:6.2f} {server_us:9.1f} {client_us:9.1f} {bound:11.0f}"
        )
    print(
        f"{'CacheLoader, cold cache (origin + write-back)':44} {cold:9.0f} {'':6} {'':6} {cold * args.size / 1e6:5.0f} "
        f"{cold / baseline:6.2f}"
    )
    if CHECK_ONE_THREAD in summary:  # one server's run
        print_verifying_bound(summary, cpus)
    if args.seconds:
        print(
            "per run (epochs, or redis-benchmark's requests / 3*SAMPLES; median seconds): "
            + "; ".join(
                f"{name} x{repeats[name]} {statistics.median(m.seconds for m in runs):.2f} s"
                for name, runs in results.items()
                if runs
            )
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "args": vars(args) | {"json": str(args.json)},
                    "load": [load_before, load_after],
                    "summary": summary,
                    "cold": cold,
                    "repeats": repeats,
                    "runs": {name: [vars(m) for m in runs] for name, runs in results.items()},
                },
                indent=2,
            )
        )


def print_verifying_bound(summary: dict[str, dict], cpus: int) -> None:
    """The most any client that hashes every value could reach here: redis-server's CPU per GET (from
    redis-benchmark's run) plus one thread's check digest of a sample, then plus the MGETs' receive cost;
    compared with redis-benchmark's own CPU-bound rate, as both follow from CPU time, not from load."""
    benchmark = next(iter(summary.values()))
    hash_us = summary[CHECK_ONE_THREAD]["client_us"]
    receive_us = next(v["client_us"] for name, v in summary.items() if name.startswith("ceiling: MGET alone"))
    for what, us in (
        ("server GET + check digest", benchmark["server_us"] + hash_us),
        ("+ MGET receive", benchmark["server_us"] + hash_us + receive_us),
    ):
        bound = cpus * 1e6 / us
        print(
            f"bound for a verifying client, {what}: {cpus} CPUs / {us:.1f} us = {bound:.0f}/s, "
            f"{bound / benchmark['cpu_bound']:.2f} of redis-benchmark's CPU-bound {benchmark['cpu_bound']:.0f}/s"
        )


if __name__ == "__main__":
    main()
