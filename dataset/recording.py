"""What records a campaign's jobs: the real exporter over their segment directory and a real Prometheus scraping
it every second, queried with `alnair profile`'s functions for each job's row."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from alnair.profiler import EXITS, STARTS, ProfileError, Prometheus, Selection, job_rows

SCRAPE_INTERVAL = 1.0


class Stack:
    """The exporter over the jobs' segment directory and Prometheus scraping it every second."""

    def __init__(self, out: Path, scratch: Path, binary: str):
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.shm = scratch / "shm"
        self.shm.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []
        exporter_port, prometheus_port = _free_port(), _free_port()
        self.target = f"127.0.0.1:{exporter_port}"
        interval = f"{int(SCRAPE_INTERVAL * 500)}ms"  # samples twice a scrape
        with open(self.logs / "exporter.log", "a") as log:
            self.procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "alnair.exporter",
                        f"--web.listen-address={self.target}",
                        f"--shm.dir={self.shm}",
                        f"--collector.python.interval={interval}",
                        f"--collector.cuda.interval={interval}",
                        f"--collector.nvml.interval={interval}",
                        f"--collector.host.interval={interval}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    env=_without_intercepts(os.environ),
                )
            )
        config = out / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {SCRAPE_INTERVAL:g}s\n  scrape_timeout: {SCRAPE_INTERVAL:g}s\n"
            f"scrape_configs:\n  - job_name: alnair\n    static_configs:\n      - targets: ['{self.target}']\n"
        )
        with open(self.logs / "prometheus.log", "a") as log:
            self.procs.append(
                subprocess.Popen(
                    [
                        binary,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={scratch / 'prometheus-data'}",
                        f"--web.listen-address=127.0.0.1:{prometheus_port}",
                    ],
                    stdout=log,
                    stderr=log,
                )
            )
        self.url = f"http://127.0.0.1:{prometheus_port}"
        self.prometheus = Prometheus(self.url, timeout=60)
        deadline = time.monotonic() + 60
        while not self._up():
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise ProfileError(f"the exporter or Prometheus did not come up (logs in {self.logs})")
            time.sleep(0.25)

    def _up(self) -> bool:
        try:
            found = self.prometheus.raw('up{job="alnair"}', time.time() - 5, time.time())
        except ProfileError:
            return False
        return any(s.values and s.values[-1] == 1 for s in found)

    def exited(self, pid: int, since: float, timeout: float) -> bool:
        """Waits until Prometheus holds the exit time of each of the job's records. The row's duration ends at the
        last: the CUDA library's record exits about a second after Python's, and a profile taken between the two
        would end the run at Python's (as it did in 162 of the 296 ok rows of blocks 1-22)."""
        deadline = time.monotonic() + timeout
        selector = f'{{__name__=~"{"|".join(STARTS + EXITS)}",pid="{pid}"}}'
        while time.monotonic() < deadline:
            found = {s.labels["__name__"] for s in self.prometheus.raw(selector, since, time.time()) if s.values}
            started, exited = _records(found, STARTS), _records(found, EXITS)
            if "python" in exited and started <= exited:
                return True
            time.sleep(0.25)
        return False

    def profile(self, pid: int, since: float) -> dict | None:
        selection = Selection(since, time.time() + 1, pids=(str(pid),))
        rows = job_rows(self.prometheus, selection, quiet=True, chosen_by_pod=False)
        return rows[0] if len(rows) == 1 else None

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _without_intercepts(environ) -> dict:
    env = dict(environ)
    for name in ("ALNAIR_PYTHON_INTERCEPT", "LD_PRELOAD", "ALNAIR_COMPUTE_LIMIT", "ALNAIR_MEMORY_LIMIT"):
        env.pop(name, None)
    return env


def _records(found: set[str], families: tuple[str, ...]) -> set[str]:
    """The records (python, cuda) of the families found: `alnair_<record>_process_...`."""
    return {name.split("_")[1] for name in found & set(families)}
