"""psutil's samples of a job's process tree: a short CPU job that holds a known amount of memory, starts a known
number of threads and one child process, checked against what it did."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import pytest

from alnair_dataset import process_sampler

MIB = 2**20
HELD_MIB = 200
THREADS = 4
JOB = f"""
import subprocess, sys, threading, time
held = bytearray({HELD_MIB} * 2**20)
for i in range(0, len(held), 4096):
    held[i] = 1  # touched: resident
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"])
end = time.time() + 2.5
def spin():
    while time.time() < end:
        sum(range(1000))
threads = [threading.Thread(target=spin) for _ in range({THREADS})]
for t in threads:
    t.start()
for t in threads:
    t.join()
child.wait()
"""


@pytest.fixture(scope="module")
def sampled():
    began = time.monotonic()
    job = subprocess.Popen([sys.executable, "-c", JOB])
    sampler = process_sampler.ProcessSampler(job.pid, interval=0.2)
    job.wait(timeout=60)
    return sampler.columns(), time.monotonic() - began


def test_every_column_is_named_and_typed():
    assert len(process_sampler.NAMES) == len(set(process_sampler.NAMES))
    assert all(meaning for _, _, meaning in process_sampler.COLUMNS)


def test_rss_is_what_the_job_holds(sampled):
    row, _ = sampled
    # the job's interpreter (10-30 MiB) plus what it touched, plus the child's interpreter while both are sampled
    assert HELD_MIB * MIB < row["proc_rss_bytes_max"] < (HELD_MIB + 80) * MIB
    assert row["proc_rss_bytes_min"] < HELD_MIB * MIB  # the first sample comes before the allocation
    assert row["proc_rss_bytes_range"] == pytest.approx(row["proc_rss_bytes_max"] - row["proc_rss_bytes_min"])
    assert row["proc_rss_bytes_min"] <= row["proc_rss_bytes_mean"] <= row["proc_rss_bytes_max"]


def test_threads_and_processes_are_the_jobs(sampled):
    row, _ = sampled
    assert row["proc_threads_max"] >= THREADS + 1 + 1  # the main thread, the spinners, the child's main thread
    assert row["proc_processes_max"] == 2
    assert row["proc_threads_min"] >= 1


def test_cpu_is_the_spinning_threads(sampled):
    row, wall = sampled
    busy = row["proc_cpu_user_seconds"] + row["proc_cpu_system_seconds"]
    assert 0.5 < busy < wall * 2.2  # the GIL lets about one CPU's worth through (2 CPUs at most here)
    assert 30 < row["proc_cpu_percent_max"] < 100 * 2.5
    assert row["proc_ctx_switches_voluntary"] + row["proc_ctx_switches_involuntary"] > 0
    assert row["proc_samples"] >= 0.5 * wall / 0.2


def test_node_columns_are_differences_over_the_run_and_levels_within_it(sampled):
    row, wall = sampled
    cpu = sum(
        row[f"sys_cpu_{m}_seconds"] for m in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    )
    assert 0 < cpu < wall * 64  # at most every CPU over the run: a difference, not a counter since boot
    assert row["sys_ctx_switches"] > 0 and row["sys_interrupts"] >= 0
    assert 0 < row["sys_memory_percent"] < 100 and row["sys_memory_available_bytes"] > 0
    assert row["disk_total_bytes"] >= row["disk_used_bytes"] > 0 and 0 < row["disk_percent"] <= 100
    assert row["net_bytes_sent"] >= 0 and row["net_errin"] >= 0


def test_a_pid_that_is_gone_gives_empty_process_columns():
    job = subprocess.Popen([sys.executable, "-c", "pass"])
    job.wait()
    row = process_sampler.ProcessSampler(job.pid).columns()
    assert row["proc_samples"] == 0 and row["proc_rss_bytes_max"] is None and row["proc_processes_max"] is None
    assert row["sys_cpu_user_seconds"] is not None  # the node's differences are there whatever the job did


def test_a_process_whose_memory_is_torn_down_is_not_sampled(monkeypatch):
    """Between freeing its memory and turning zombie an exiting process reads 0 bytes resident; such a reading
    is the exit, not the job's smallest footprint (a campaign row once had proc_rss_bytes_min 0)."""
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sampler = process_sampler.ProcessSampler(job.pid, interval=3600)
        sampler.stop()  # its thread took the first sample; the rest are taken here
        assert sampler.sample() and sampler.gauges["proc_rss_bytes"][-1] > 0
        taken = len(sampler.gauges["proc_rss_bytes"])
        real = sampler.psutil.Process.memory_info
        monkeypatch.setattr(sampler.psutil.Process, "oneshot", lambda self: contextlib.nullcontext())
        monkeypatch.setattr(sampler.psutil.Process, "memory_info", lambda self: real(self)._replace(rss=0))
        assert not sampler.sample()  # nothing alive in the tree: the job is gone
        assert len(sampler.gauges["proc_rss_bytes"]) == taken
    finally:
        job.kill()
        job.wait()
