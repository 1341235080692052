"""alnair-injector under idle connections: the RSS it takes and the sockets it holds as connections that send
nothing are opened by the hundred, and whether a review on a new connection is still answered.

    python bench/injector_idle.py [--baseline-python PYTHON] [--counts 0,250,500,1000,1550,2000] [--tls]

The real injector (`python -m alnair.injector`, a test CA's certificate) on a loopback port. At each count, that
many connections are open and held (opened in steps, never closed until the end): plain TCP, or with --tls
each after a completed TLS handshake, which costs the server more (asyncio's TLS read buffer); then one review is
sent on a new connection (accepted after every idle one, so its answer shows they have all been taken in) and the
injector's RSS and open sockets are read. Expected: every review answered, RSS under the chart's 128Mi less the
32 MiB the review bodies being read may add. With --baseline-python (an interpreter
whose alnair is another tree, as bench/web_flood.py takes it) the same is measured against that injector first
and printed beside.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import ssl
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "injector")]

from scrape_latency import raise_fd_limit  # noqa: E402

from injector_support import Injector, make_pod  # noqa: E402
from support import write_tls_files  # noqa: E402

CHART_LIMIT_MIB = 128
BODIES_MIB = 32  # what the review bodies being read may add (injector/server.py: REVIEWS_AT_ONCE x MAX_BODY_BYTES)


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def open_sockets(pid: int) -> int:
    def is_socket(fd: str) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except FileNotFoundError:
            return False

    return sum(map(is_socket, os.listdir(f"/proc/{pid}/fd")))


@contextlib.contextmanager
def injector(python: str, tmp: Path):
    tls_dir = tmp / "tls"
    tls_dir.mkdir()
    write_tls_files(tls_dir)
    running = Injector(tls_dir, tmp / "injector.log", python=python)
    try:
        yield running
    finally:
        running.proc.kill()
        running.proc.wait()


def review_answered(running: Injector) -> bool:
    try:
        return running.review(make_pod())["allowed"] is True
    except (OSError, AssertionError):
        return False


def measure(python: str, counts: list[int], tls: bool) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="alnair-injector-idle-") as tmp, injector(python, Path(tmp)) as running:
        context = ssl.create_default_context(cafile=str(running.tls_dir / "ca.crt"))
        held: list[socket.socket] = []
        try:
            for count in counts:
                while len(held) < count:
                    conn = socket.create_connection(("127.0.0.1", running.port), timeout=10)
                    held.append(context.wrap_socket(conn, server_hostname="127.0.0.1") if tls else conn)
                started = time.perf_counter()
                answered = review_answered(running)
                rows.append(
                    {
                        "idle": count,
                        "review_answered": answered,
                        "review_ms": (time.perf_counter() - started) * 1000,
                        "rss_mib": rss_mib(running.proc.pid),
                        "sockets": open_sockets(running.proc.pid),
                    }
                )
        finally:
            for conn in held:
                conn.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose Alnair runs the injector")
    parser.add_argument("--baseline-python", help="an interpreter whose Alnair is the baseline, measured first")
    parser.add_argument("--counts", default="0,250,500,1000,1550,2000")
    parser.add_argument("--tls", action="store_true", help="each idle connection completes its TLS handshake first")
    args = parser.parse_args()
    raise_fd_limit()
    counts = [int(c) for c in args.counts.split(",")]
    runs = {}
    if args.baseline_python:
        runs["baseline"] = measure(args.baseline_python, counts, args.tls)
    runs["this tree"] = measure(args.python, counts, args.tls)
    print(json.dumps(runs, indent=1))
    print("| idle connections | " + " | ".join(f"{name}: RSS MiB / sockets / review" for name in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for i, count in enumerate(counts):
        cells = [
            f"{r[i]['rss_mib']:.1f} / {r[i]['sockets']} / "
            + (f"{r[i]['review_ms']:.0f} ms" if r[i]["review_answered"] else "failed")
            for r in runs.values()
        ]
        print(f"| {count:,} | " + " | ".join(cells) + " |")
    worst = max(row["rss_mib"] for row in runs["this tree"])
    ok = worst < CHART_LIMIT_MIB - BODIES_MIB and all(row["review_answered"] for row in runs["this tree"])
    print(
        f"{'met' if ok else 'NOT met'}: every review answered, RSS at most {worst:.1f} MiB "
        f"(< the chart's {CHART_LIMIT_MIB} MiB less {BODIES_MIB} MiB of review bodies)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
