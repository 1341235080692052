"""The GPU share table is a mode-0666 file: any local user may truncate it, grow it, fill it with
garbage or rename another file over it while limited processes take turns through it. None of
that may kill them, stall them or take their windows away (docs/intercept.md, the rules)."""
from __future__ import annotations

import fcntl
import os
import random
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from support import read_line, wait_until
from test_limits import launches_and_overlaps, overlap_fraction, quota_ms

TABLE_BYTES = 512
SLOTS = 64
SLOT = struct.Struct("<Ii")  # quota_ppm, pid
FLOCK = struct.Struct("hh4xqqi4x")  # struct flock on x86-64 and arm64 Linux
PPM = 1_000_000
FAKE_GPU_UUID = bytes(range(0xF0, 0xFF)) + b"\x00"  # device 0 of the fake driver
LIMITS = {"30": 30.0, "70": 70.0}  # the pair the existing share test holds to 0.3 +- 0.08
WARMUP, SECONDS = 2.5, 2.0  # the rates are measured from 2.5 s on: after the disturbance has settled
WATCH = 1.2  # windows are watched this long after the disturbance: past every process's liveness check


def table_path(shm_dir: Path) -> Path:
    return shm_dir / ("alnair.share." + FAKE_GPU_UUID.hex())


def read_slots(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()[:TABLE_BYTES].ljust(TABLE_BYTES, b"\0")
    return [SLOT.unpack_from(data, i * SLOT.size) for i in range(SLOTS)]


def holders(path: Path) -> dict[int, int]:
    """Slot -> pid of the process holding the slot's lock (the kernel's answer, F_GETLK)."""
    held = {}
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return held
    try:
        for slot in range(SLOTS):
            lock = FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, slot * SLOT.size, SLOT.size, 0)
            l_type, _, _, _, pid = FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, lock))
            if l_type != fcntl.F_UNLCK:
                held[slot] = pid
    finally:
        os.close(fd)
    return held


def limited_pids(path: Path) -> dict[int, float]:
    """pid -> limit (%) of the two limited processes, once both hold a slot with their quota."""
    held = holders(path)
    if not held:
        return {}
    slots = read_slots(path)
    found = {pid: round(slots[slot][0] / PPM * 100, 3) for slot, pid in held.items()}
    return found if sorted(found.values()) == sorted(LIMITS.values()) else {}


def write_at(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


# ---- the disturbances -----------------------------------------------------------------------

def truncate_to_zero(path: Path) -> None:
    os.truncate(path, 0)


def grow_to_1mib(path: Path) -> None:
    """As a copy rewrites a file: truncated, then written 64 KiB at a time (empty for 30 ms)."""
    with open(path, "wb", buffering=0) as out:
        time.sleep(0.03)
        for _ in range(16):
            out.write(bytes(64 << 10))
            time.sleep(0.02)


def random_bytes(path: Path) -> None:
    write_at(path, 0, random.Random(20240611).randbytes(TABLE_BYTES))  # fixed: the run can be repeated


def max_quotas_in_free_slots(path: Path) -> None:
    """10^6 (the most a slot may hold: only the lock rule refuses it) and 2^32-1, under a live pid (ours)."""
    held = holders(path)
    for slot in range(SLOTS):
        if slot not in held:
            write_at(path, slot * SLOT.size, SLOT.pack(PPM if slot % 2 else 0xFFFFFFFF, os.getpid()))


def rename_over(path: Path) -> None:
    fresh = path.with_name(path.name + ".new")
    fresh.write_bytes(bytes(TABLE_BYTES))
    fresh.chmod(0o666)
    os.rename(fresh, path)


def remove(path: Path) -> None:
    path.unlink()


# ---- the pair of limited processes, disturbed ------------------------------------------------

_unlimited_overlap: list[float] = []


def unlimited_overlap(run_client, tmp_path: Path) -> float:
    """How often two unlimited processes overlap on the shared fake GPU (measured once)."""
    if not _unlimited_overlap:
        _unlimited_overlap.append(overlap_fraction(run_client, [None, None], tmp_path / "control")[0])
    return _unlimited_overlap[0]


def run_pair(run_client, gpu_file: Path, during) -> list:
    """Two processes limited to 30% and 70% of one fake GPU, as in test_limits's share test but
    with a longer warmup, and `during` run on a thread while they warm up."""
    env = {"FAKE_CUDA_LAUNCH_NS": "200000", "FAKE_CUDA_SHARED_GPU": str(gpu_file)}

    def run(limit):
        return run_client("gpa", "rate", str(WARMUP), str(SECONDS), env={**env, "ALNAIR_COMPUTE_LIMIT": limit})

    with ThreadPoolExecutor(3) as pool:
        side = pool.submit(during)
        clients = list(pool.map(run, LIMITS))
        side.result()
    return clients


def watch_windows(shm_dir: Path, limits: dict[int, float], seconds: float) -> list[dict[int, float]]:
    """Each process's published window (ms) every 20 ms for `seconds`."""
    samples, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        samples.append({pid: quota_ms(shm_dir, pid) for pid in limits})
        time.sleep(0.02)
    return samples


@pytest.mark.parametrize("disturb", [truncate_to_zero, grow_to_1mib, random_bytes, max_quotas_in_free_slots,
                                     rename_over, remove], ids=lambda f: f.__name__)
def test_a_disturbed_table_neither_kills_nor_starves_the_processes_sharing_it(run_client, shm_dir, tmp_path, disturb):
    baseline = unlimited_overlap(run_client, tmp_path)
    table, gpu_file = table_path(shm_dir), tmp_path / "gpu"
    seen: dict[str, object] = {}

    def during():
        started = time.monotonic()
        limits = wait_until(lambda: limited_pids(table), timeout=10)
        disturb(table)
        time.sleep(0.05)  # a tick or two: a process repairs its own slot within one
        seen["windows"] = watch_windows(shm_dir, limits, WATCH)
        # the processes are in the table now at the path, whatever happened to the old one
        seen["in_table"] = wait_until(lambda: set(holders(table).values()) >= set(limits), timeout=2)
        seen["counters"] = launches_and_overlaps(gpu_file)
        seen["limits"], seen["settled_after"] = limits, time.monotonic() - started

    clients = run_pair(run_client, gpu_file, during)
    limits = seen["limits"]
    assert seen["settled_after"] < WARMUP, seen["settled_after"]  # the rates below are measured after it
    assert [c.stop() for c in clients] == ["", ""]  # not a line of complaint
    assert [c.proc.returncode for c in clients] == [0, 0]
    # every window kept its length at every look: nothing in the file took time from them
    wrong = [s for s in seen["windows"] if s != limits]
    assert not wrong, (limits, wrong[:5], len(wrong), len(seen["windows"]))
    first, second = (float(c.values("rate")[0][0]) for c in clients)
    assert abs(first / (first + second) - 0.3) < 0.08, (first, second)
    launches, overlaps = (now - then for now, then in zip(launches_and_overlaps(gpu_file), seen["counters"]))
    assert overlaps / launches < 0.2 * baseline, (overlaps, launches, baseline)  # taking turns, in one table
    if disturb is grow_to_1mib:
        assert table.stat().st_size == 1 << 20  # each process writes its own 8 bytes, nothing else


SLOT_HOG = """
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
for slot in range(64):
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 8, slot * 8)
    except OSError:
        continue  # a limited process's slot
    os.pwrite(fd, struct.pack("<Ii", 1000000, os.getpid()), slot * 8)
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_process_holding_every_free_slot_gets_one_window(run_client, shm_dir):
    """A live process may take part, but only once: 62 slots held at 10^6 ppm by one pid count as one
    window of the period, so 30% + 70% + 100% shrink alike to 15 and 35 ms; when it goes, 30 and 70."""
    clients = [run_client("gpa", "launches", "1", "10", "1", env={"ALNAIR_COMPUTE_LIMIT": limit}) for limit in LIMITS]
    pids = [c.proc.pid for c in clients]
    assert wait_until(lambda: [quota_ms(shm_dir, pid) for pid in pids] == [30, 70])
    hog = subprocess.Popen([sys.executable, "-c", SLOT_HOG, str(table_path(shm_dir))], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert read_line(hog.stdout, 10).strip() == "locked"
        assert len(holders(table_path(shm_dir))) == SLOTS
        assert wait_until(lambda: [quota_ms(shm_dir, pid) for pid in pids] == [15, 35], timeout=3)
    finally:
        hog.stdin.close()
        hog.wait(10)
    # its slots still hold 10^6, but nobody holds their locks: they stop counting at the next check
    assert wait_until(lambda: [quota_ms(shm_dir, pid) for pid in pids] == [30, 70], timeout=3)
    assert [c.stop() for c in clients] == ["", ""]
