"""Scrape latency of Alnair's /metrics against prometheus_client's multiprocess mode.

    python bench/scrape_latency.py [--writers 10,100,1000] [--scrapes 50] [--json PATH] [--against PYTHON]

For each writer count N, in the same run:

- Alnair: N real C writers (intercept/build/alnair-shm-test-writer, republishing every
  10 ms like the intercept) and the real exporter (`python -m alnair.exporter`, cuda
  collector only, sampling every second in the background).
- Baseline: N writer Python processes in prometheus_client's multiprocess mode, each
  with the same series one Alnair segment exports, served by start_http_server with a
  MultiProcessCollector (bench/multiproc_baseline.py).

Both servers are scraped the same number of times, alternately (A B A B ...), with
the same http.client code; a scrape's time is request sent to body fully read. Alnair
serves a snapshot sampled in the background, so the cost of that sample is reported
too: the exporter's own alnair_exporter_collector_duration_seconds{collector="cuda"},
one value per distinct sample seen. Build the writer first: `make -C intercept`.

With --against PYTHON the baseline is instead a second Alnair exporter, run by an interpreter that has
another version installed (a virtual environment of an earlier commit), reading the same writers'
segments: two builds side by side in one run, scraped alternately.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WRITER = ROOT / "intercept" / "build" / "alnair-shm-test-writer"
BASELINE = ROOT / "bench" / "multiproc_baseline.py"
WARMUP_SCRAPES = 3
MIN_BACKGROUND_SAMPLES = 10
STARTUP_TIMEOUT = 60.0

SEGMENTS = re.compile(rb"^alnair_cuda_segments (\S+)$", re.M)
SAMPLE_DURATION = re.compile(rb'^alnair_exporter_collector_duration_seconds\{collector="cuda"\} (\S+)$', re.M)
SAMPLE_FINISHED = re.compile(
    rb'^alnair_exporter_collector_last_success_timestamp_seconds\{collector="cuda"\} (\S+)$', re.M
)


@dataclass
class Target:
    """One server under test: its scrape times and, for Alnair, the background
    samples its bodies report (when the sample finished -> its duration)."""

    name: str
    client: ScrapeClient
    times_ms: list[float] = field(default_factory=list)
    background_ms: dict[float, float] = field(default_factory=dict)
    last_body: bytes = b""

    def scrape(self, timed: bool) -> None:
        elapsed_ms, self.last_body = self.client.get()
        if timed:
            self.times_ms.append(elapsed_ms)
        finished, duration = SAMPLE_FINISHED.search(self.last_body), SAMPLE_DURATION.search(self.last_body)
        if finished and duration:
            self.background_ms[float(finished[1])] = float(duration[1]) * 1000


@dataclass
class Result:
    writers: int
    alnair_series: int
    baseline_series: int
    alnair_series_per_writer: float
    baseline_series_per_writer: float
    alnair_scrape_ms: list[float]
    alnair_sample_ms: list[float]
    baseline_scrape_ms: list[float]
    baseline_sample_ms: list[float]  # a second exporter's background samples (--against); none for multiproc

    def summary(self) -> dict[str, float]:
        alnair, baseline = statistics.median(self.alnair_scrape_ms), statistics.median(self.baseline_scrape_ms)
        return {
            "alnair_median_ms": alnair,
            "alnair_p90_ms": p90(self.alnair_scrape_ms),
            "alnair_sample_median_ms": statistics.median(self.alnair_sample_ms),
            "alnair_sample_p90_ms": p90(self.alnair_sample_ms),
            "baseline_median_ms": baseline,
            "baseline_p90_ms": p90(self.baseline_scrape_ms),
            "baseline_sample_median_ms": statistics.median(self.baseline_sample_ms)
            if self.baseline_sample_ms
            else None,
            "ratio": baseline / alnair,
        }


class ScrapeClient:
    """GET /metrics over a keep-alive connection; http.client reopens it when a
    server closes it after a response (prometheus_client's server is HTTP/1.0)."""

    def __init__(self, port: int):
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def get(self) -> tuple[float, bytes]:
        started = time.perf_counter()
        self.connection.request("GET", "/metrics")
        response = self.connection.getresponse()
        body = response.read()
        elapsed_ms = (time.perf_counter() - started) * 1000
        if response.status != 200:
            raise RuntimeError(f"/metrics answered {response.status}: {body[:200]!r}")
        return elapsed_ms, body

    def close(self) -> None:
        self.connection.close()


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def read_ready(process: subprocess.Popen) -> None:
    """Waits for the 'ready ...' line a child prints once it is serving or publishing."""
    poller = select.poll()  # not select(): a thousand writers' pipes are past its fd limit
    poller.register(process.stdout, select.POLLIN)
    line = process.stdout.readline() if poller.poll(STARTUP_TIMEOUT * 1000) else ""
    if not line.startswith("ready"):
        raise RuntimeError(f"{process.args[0]} did not start: {line!r}")


def stop(process: subprocess.Popen) -> None:
    if process.stdin:
        with contextlib.suppress(OSError):
            process.stdin.close()
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def raise_fd_limit() -> None:
    """Every live writer holds one pipe end open here; 1000 of them need more than 1024 fds."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@contextlib.contextmanager
def alnair_writers(count: int, shm_dir: Path) -> Iterator[None]:
    """`count` C writers publishing every 10 ms; closing their stdin ends them."""
    env = {**os.environ, "ALNAIR_SHM_DIR": str(shm_dir)}
    writers: list[subprocess.Popen] = []
    try:
        for _ in range(count):
            writers.append(
                subprocess.Popen(
                    [str(WRITER), "--devices", "1", "--period-ms", "10"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        for writer in writers:
            read_ready(writer)
            writer.stdout.close()
        yield
    finally:
        for writer in writers:  # all at once, so they exit in parallel
            with contextlib.suppress(OSError):
                writer.stdin.close()
        for writer in writers:
            stop(writer)


@contextlib.contextmanager
def alnair_exporter(count: int, shm_dir: Path, log_path: Path, python: str = sys.executable) -> Iterator[ScrapeClient]:
    """The real exporter, yielded once its background sample has seen all `count` segments."""
    port = free_port()
    command = [
        python,
        "-m",
        "alnair.exporter",
        f"--web.listen-address=127.0.0.1:{port}",
        "--shm.dir",
        str(shm_dir),
        "--no-collector.host",
        "--collector.cuda.interval",
        "1",
    ]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    client = ScrapeClient(port)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"exporter exited: {log_path.read_text()}")
        return segments_seen(client) == count

    try:
        wait_until(ready, f"the exporter to see {count} segments")
        yield client
    finally:
        client.close()
        stop(process)


def segments_seen(client: ScrapeClient) -> int:
    """alnair_cuda_segments of the latest sample; -1 before the exporter serves it."""
    try:
        body = client.get()[1]
    except (OSError, http.client.HTTPException):
        client.close()  # not listening yet: reconnect next time
        return -1
    match = SEGMENTS.search(body)
    return int(float(match[1])) if match else -1


@contextlib.contextmanager
def multiproc_server(count: int, multiproc_dir: Path) -> Iterator[ScrapeClient]:
    """prometheus_client's multiprocess mode with `count` writers' files, served over HTTP."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir)}
    subprocess.run([sys.executable, str(BASELINE), "write", str(count)], env=env, check=True)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(BASELINE), "serve", str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    client = ScrapeClient(port)
    try:
        read_ready(process)
        yield client
    finally:
        client.close()
        stop(process)


def scrape_alternately(targets: list[Target], scrapes: int) -> None:
    """A B A B ...: both servers see the same machine noise. Warm-up scrapes are not timed."""
    for round_number in range(WARMUP_SCRAPES + scrapes):
        for target in targets:
            target.scrape(timed=round_number >= WARMUP_SCRAPES)


def see_background_samples(alnair: Target) -> None:
    """Untimed scrapes until MIN_BACKGROUND_SAMPLES distinct background samples were seen."""
    while len(alnair.background_ms) < MIN_BACKGROUND_SAMPLES:
        time.sleep(0.2)
        alnair.scrape(timed=False)


def series(body: bytes) -> tuple[int, int]:
    """(sample lines, sample lines labelled with a writer's pid)."""
    lines = [line for line in body.splitlines() if line and not line.startswith(b"#")]
    return len(lines), sum(b'pid="' in line for line in lines)


def run_one(count: int, scrapes: int, against: str | None) -> Result:
    tmp_root = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="alnair-bench-", dir=tmp_root) as tmp:
        shm_dir, multiproc_dir = Path(tmp, "shm"), Path(tmp, "multiproc")
        shm_dir.mkdir()
        multiproc_dir.mkdir()
        with (
            alnair_writers(count, shm_dir),
            alnair_exporter(count, shm_dir, Path(tmp, "exporter.log")) as alnair_client,
            (
                alnair_exporter(count, shm_dir, Path(tmp, "against.log"), against)
                if against
                else multiproc_server(count, multiproc_dir)
            ) as baseline_client,
        ):
            alnair, baseline = Target("alnair", alnair_client), Target("baseline", baseline_client)
            scrape_alternately([alnair, baseline], scrapes)
            see_background_samples(alnair)
            if against:
                see_background_samples(baseline)
    (alnair_total, alnair_pid), (baseline_total, baseline_pid) = series(alnair.last_body), series(baseline.last_body)
    return Result(
        count,
        alnair_total,
        baseline_total,
        alnair_pid / count,
        baseline_pid / count,
        alnair.times_ms,
        list(alnair.background_ms.values()),
        baseline.times_ms,
        list(baseline.background_ms.values()),
    )


def machine() -> str:
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{os.cpu_count()} CPUs, {models[0] if models else 'unknown model'}"


COLUMNS = [
    ("writers", "{:>7}"),
    ("series alnair", "{:>13}"),
    ("series baseline", "{:>15}"),
    ("alnair scrape med/p90 ms", "{:>24}"),
    ("alnair sample med ms", "{:>20}"),
    ("baseline scrape med/p90 ms", "{:>26}"),
    ("baseline sample med ms", "{:>22}"),
    ("ratio", "{:>6}"),
]


def table_row(values: list) -> str:
    return "  ".join(fmt.format(value) for (_, fmt), value in zip(COLUMNS, values))


def print_result(result: Result) -> None:
    s = result.summary()
    print(
        table_row(
            [
                result.writers,
                result.alnair_series,
                result.baseline_series,
                f"{s['alnair_median_ms']:.2f} / {s['alnair_p90_ms']:.2f}",
                f"{s['alnair_sample_median_ms']:.1f}",
                f"{s['baseline_median_ms']:.2f} / {s['baseline_p90_ms']:.2f}",
                "-" if s["baseline_sample_median_ms"] is None else f"{s['baseline_sample_median_ms']:.1f}",
                f"{s['ratio']:.2f}x",
            ]
        ),
        flush=True,
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", default="10,100,1000", help="comma-separated writer counts")
    parser.add_argument("--scrapes", type=int, default=50, help="timed scrapes per server and writer count")
    parser.add_argument("--json", help="also write the results (with every timing) to this file")
    parser.add_argument(
        "--against",
        metavar="PYTHON",
        help="baseline: the exporter of the Alnair this interpreter has installed, not multiproc mode",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if not WRITER.exists():
        sys.exit(f"{WRITER} is missing: run `make -C intercept` first")
    raise_fd_limit()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so every cleanup runs
    baseline = f"the exporter under {args.against}" if args.against else "prometheus_client multiprocess mode"
    print(f"machine: {machine()}; {args.scrapes} scrapes per server, alternating; baseline: {baseline}")
    print(table_row([name for name, _ in COLUMNS]))
    results = []
    for count in (int(n) for n in args.writers.split(",")):
        results.append(run_one(count, args.scrapes, args.against))
        print_result(results[-1])
    for r in results:
        print(
            f"series per writer at {r.writers}: alnair {r.alnair_series_per_writer:g}, "
            f"baseline {r.baseline_series_per_writer:g}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine(),
                    "scrapes": args.scrapes,
                    "results": [{**asdict(r), **r.summary()} for r in results],
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
