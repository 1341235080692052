"""The exporter under a connection flood: what Prometheus sees while 64 clients hammer /metrics.

    python bench/web_flood.py [--python PYTHON] [--seconds 60] [--flood 64] [--writers 100] [--json PATH]

100 live C writers (republishing every 10 ms) feed the exporter run by PYTHON (default: this one; give a
venv of an earlier commit for a before/after). For --seconds, --flood keep-alive connections send GET
/metrics back to back (a bounded asyncio client: every response's status and time recorded), while a
scraper like Prometheus's scrapes once a second from 127.0.0.2, listed in --web.priority-sources when
the exporter has that flag. Then 128 connections are opened at once and each one's connect time is taken
(a full listen backlog drops SYNs, and the client waits a second to retry). The exporter's RSS is read
a tenth into the flood and at its end. Expected here: only 200 and 503 to the flood, p99 of its 200s under
250 ms, the scraper 60 of 60, every connect within 100 ms, RSS growth under 5%.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scrape_latency import alnair_writers, free_port, machine, raise_fd_limit, stop, wait_until

PRIORITY_SOURCE = "127.0.0.2"
BURST = 128


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


async def get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> int:
    """One GET /metrics on a keep-alive connection; its status (the body is read and dropped)."""
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed by the server")
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(status_line.split()[1])


async def flood_connection(port: int, until: float, results: list[tuple[int, float]]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                status = await get(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                results.append((-1, time.perf_counter() - started))  # refused or dropped: reconnect
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            results.append((status, time.perf_counter() - started))
    finally:
        writer.close()


async def scraper(port: int, until: float, results: list[tuple[int, float]]) -> None:
    """Once a second from the priority source, on one keep-alive connection, as Prometheus scrapes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(PRIORITY_SOURCE, 0))
    try:
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                results.append((await asyncio.wait_for(get(reader, writer), 10), time.perf_counter() - started))
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError):
                results.append((-1, time.perf_counter() - started))
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(PRIORITY_SOURCE, 0))
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - started)))
    finally:
        writer.close()


async def timed_connect(port: int) -> float:
    started = time.perf_counter()
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


async def rss_under_load(pid: int, seconds: float, rss: list[int]) -> None:
    """The RSS once the flood's connections are all open (a tenth in), and at its end."""
    await asyncio.sleep(seconds / 10)
    rss.append(rss_bytes(pid))
    await asyncio.sleep(seconds * 9 / 10 - 0.5)
    rss.append(rss_bytes(pid))


async def run_load(pid: int, port: int, seconds: float, connections: int) -> tuple[list, list, list, list]:
    until = time.monotonic() + seconds
    flood, scrapes, rss = [], [], []
    await asyncio.gather(scraper(port, until, scrapes), rss_under_load(pid, seconds, rss),
                         *(flood_connection(port, until, flood) for _ in range(connections)))
    burst = await asyncio.gather(*(timed_connect(port) for _ in range(BURST)))
    return flood, scrapes, list(burst), rss


@contextlib.contextmanager
def exporter(python: str, shm_dir: Path, log_path: Path):
    port = free_port()
    supported = subprocess.run([python, "-m", "alnair.exporter", "--help"], capture_output=True, text=True).stdout
    priority = [f"--web.priority-sources={PRIORITY_SOURCE}"] if "--web.priority-sources" in supported else []
    command = [python, "-m", "alnair.exporter", f"--web.listen-address=127.0.0.1:{port}", "--shm.dir", str(shm_dir),
               "--no-collector.host", "--no-collector.nvml", "--collector.cuda.interval", "1", *priority]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, cwd=tempfile.gettempdir())
    try:
        wait_until(lambda: "listening on" in log_path.read_text(), "the exporter to listen")
        yield process, port, bool(priority)
    finally:
        stop(process)


def p(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose Alnair runs the exporter")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--flood", type=int, default=64)
    parser.add_argument("--writers", type=int, default=100)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="alnair-flood-", dir="/dev/shm") as tmp:
        shm_dir = Path(tmp, "shm")
        shm_dir.mkdir()
        with alnair_writers(args.writers, shm_dir), exporter(args.python, shm_dir, Path(tmp, "exporter.log")) as (proc, port, priority):
            time.sleep(3)  # a few background samples before the flood
            flood, scrapes, burst, (rss_before, rss_after) = asyncio.run(run_load(proc.pid, port, args.seconds, args.flood))
    statuses = {status: sum(1 for s, _ in flood if s == status) for status in sorted({s for s, _ in flood})}
    admitted = [t * 1000 for s, t in flood if s == 200]
    figures = {
        "machine": machine(), "python": args.python, "priority_sources_flag": priority,
        "flood_statuses": statuses, "flood_200_p50_ms": p(admitted, 50), "flood_200_p99_ms": p(admitted, 99),
        "flood_200_max_ms": max(admitted), "scraper_ok": sum(1 for s, _ in scrapes if s == 200), "scraper_total": len(scrapes),
        "scraper_p99_ms": p([t * 1000 for _, t in scrapes], 99), "burst_connect_max_ms": max(burst) * 1000,
        "burst_connect_p50_ms": statistics.median(burst) * 1000, "rss_before_mib": rss_before / 2**20,
        "rss_after_mib": rss_after / 2**20, "rss_growth": rss_after / rss_before - 1,
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    ok = (set(statuses) <= {200, 503} and figures["flood_200_p99_ms"] < 250 and figures["scraper_ok"] == figures["scraper_total"]
          and figures["burst_connect_max_ms"] < 100 and figures["rss_growth"] < 0.05)
    print("all targets met" if ok else "targets NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
