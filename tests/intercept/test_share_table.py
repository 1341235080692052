"""The GPU share table is a mode-0666 file: any local user may truncate it, grow it, fill it with
garbage or rename another file over it while the processes on the GPU publish their busy timelines
there. None of that may kill them, stall them or take their GPU time away (docs/intercept.md, the rules)."""

from __future__ import annotations

import fcntl
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import read_line, wait_until
from test_compute_limits import together

TABLE_BYTES = 5120
SLOTS = 64
SLOT = struct.Struct("<Ii")  # quota_ppm, pid
FLOCK = struct.Struct("hh4xqqi4x")  # struct flock on x86-64 and arm64 Linux
PPM = 1_000_000
FAKE_GPU_UUID = bytes(range(0xF0, 0xFF)) + b"\x00"  # device 0 of the fake driver
LIMITS = {"30": 30.0, "70": 70.0}


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


# ---- the pair of capped processes, disturbed --------------------------------------------------


@pytest.mark.parametrize(
    "disturb",
    [truncate_to_zero, grow_to_1mib, random_bytes, max_quotas_in_free_slots, rename_over, remove],
    ids=lambda f: f.__name__,
)
def test_a_disturbed_table_neither_kills_nor_starves_the_processes_sharing_it(run_client, shm_dir, disturb):
    table, said = table_path(shm_dir), []

    def disturb_then_settle(pids):
        disturb(table)
        # the processes are in the table now at the path, whatever happened to the old one
        assert wait_until(lambda: set(holders(table).values()) >= set(pids), timeout=2)
        time.sleep(1.2)  # past every process's liveness check: the figures below are measured after it

    small, large = together(
        run_client,
        shm_dir,
        [{"ALNAIR_COMPUTE_LIMIT": limit} for limit in LIMITS],
        after_settling=disturb_then_settle,
        said=said,
    )
    assert said == ["", ""]  # not a line of complaint, and both lived to the end
    assert abs(small.gpu_share - 0.30) < 0.06 and abs(large.gpu_share - 0.70) < 0.06, (small, large)
    if disturb is grow_to_1mib:
        assert table.stat().st_size == 1 << 20  # each process writes its own slot and timeline, nothing else


SLOT_HOG = """
import fcntl, os, struct, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
slots = []
for slot in range(64):
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 8, slot * 8)
    except OSError:
        continue  # a process's slot
    os.pwrite(fd, struct.pack("<Ii", 1000000, os.getpid()), slot * 8)
    slots.append(slot)
print("locked", flush=True)
while True:  # every slot's timeline says: busy all of every ms, wanting the GPU
    until = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000000
    for slot in slots:
        os.pwrite(fd, struct.pack("<QIIQ", until, 0, 0, (1 << 48) - 1) + bytes([250]) * 48, 512 + slot * 72)
    time.sleep(0.005)
"""


def test_a_process_holding_every_free_slot_counts_once(run_client, shm_dir):
    """A live process may take part, but only once: 63 slots held by one pid whose timelines say it is busy all
    the time halve a busy process's GPU time (one peer), not leave it 1/64."""
    hog: list[subprocess.Popen] = []

    def start_hog(pids):
        assert wait_until(lambda: table_path(shm_dir).exists())
        hog.append(
            subprocess.Popen(
                [sys.executable, "-c", SLOT_HOG, str(table_path(shm_dir))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
        assert read_line(hog[0].stdout, 10).strip() == "locked"
        assert len(holders(table_path(shm_dir))) == SLOTS
        time.sleep(0.3)  # counted within a period

    try:
        [busy] = together(run_client, shm_dir, [{}], after_settling=start_hog)
    finally:
        for process in hog:
            process.kill()
            process.wait(10)
    assert abs(busy.of_busy - 0.5) < 0.05, busy
