"""Turns (intercept/turns.h) through the library, its monitor and the share table, against the fake driver and a
fake NVML (a test double of libnvidia-ml.so.1) whose utilization samples say how busy the GPU is: a process that a
limit releases runs alone while the others' launches hold, but only on a GPU its samples say is saturated. The
turns' effect on a time-sliced GPU is tested exactly on a virtual clock (test_gpu_time.py)."""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct
import subprocess
import time
from pathlib import Path

import pytest

from alnair.abi import layout
from conftest import HERE, gcc, program
from test_compute_limits import together

TABLE = "alnair.share." + bytes([*range(0xF0, 0xFF), 0]).hex()  # the fake driver's device 0
TAKEN = layout.DECLARATIONS.integers["ALNAIR_TURN_TAKEN"] << layout.DECLARATIONS.integers["ALNAIR_TURN_STATE_SHIFT"]
HOLDING = layout.DECLARATIONS.integers["ALNAIR_TURN_HOLDING"]
AWARE = layout.DECLARATIONS.integers["ALNAIR_TURN_AWARE"]
STATE = 3 << layout.DECLARATIONS.integers["ALNAIR_TURN_STATE_SHIFT"]


@pytest.fixture(scope="session")
def with_nvml(tmp_path_factory, fake_driver_dir) -> str:
    """LD_LIBRARY_PATH with the fake NVML before the fake driver."""
    d = tmp_path_factory.mktemp("fake-nvml")
    library = d / "libnvidia-ml.so.1"
    gcc("-shared", "-fPIC", "-fvisibility=hidden", "-o", str(library), str(HERE / "doubles" / "fake_libnvidia_ml.c"))
    return f"{d}:{fake_driver_dir}"


def words(shm_dir: Path, seconds: float) -> list[list[int]]:
    """The table's turn words of every slot, read every ms for `seconds`."""
    seen, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        table = layout.ShareTable.from_buffer_copy((shm_dir / TABLE).read_bytes().ljust(5120, b"\0"))
        seen.append([b.turn for b in table.busy])
        time.sleep(0.001)
    return seen


def test_a_released_cap_takes_turns_and_its_busy_peer_holds_for_them(run_client, shm_dir, with_nvml):
    seen: list[list[int]] = []
    capped, free = together(
        run_client,
        shm_dir,
        [{"ALNAIR_COMPUTE_LIMIT": "30", "LD_LIBRARY_PATH": with_nvml}, {"LD_LIBRARY_PATH": with_nvml}],
        after_settling=lambda pids: seen.extend(words(shm_dir, 1.0)),
    )
    taken = [w for row in seen for w in row if w & STATE == TAKEN]
    holding = [w for row in seen for w in row if w & HOLDING]
    assert taken and holding, f"{len(seen)} readings, none with a turn taken and a peer holding"
    assert abs(capped.gpu_share - 0.30) < 0.05, capped
    assert free.gpu_share > 0.6 and free.throttled > 0.05, free  # it held for the capped turns, and used the rest


def test_no_turns_while_the_gpu_is_not_saturated(run_client, shm_dir, with_nvml):
    env = {"LD_LIBRARY_PATH": with_nvml, "FAKE_NVML_BUSY": "80"}
    seen: list[list[int]] = []
    capped, free = together(
        run_client,
        shm_dir,
        [{"ALNAIR_COMPUTE_LIMIT": "30", **env}, env],
        after_settling=lambda pids: seen.extend(words(shm_dir, 0.5)),
    )
    assert not [w for row in seen for w in row if w & (STATE | HOLDING)]
    assert abs(capped.gpu_share - 0.30) < 0.05 and free.throttled == 0, (capped, free)


def test_a_forged_turn_holds_a_process_at_most_about_half_of_each_second(run_client, shm_dir, with_nvml):
    """A live process that says it runs its turn forever (the table is writable by every local user): a busy
    process holds for it at most ~half of each second, as much as a busy peer on a time-sliced GPU would take."""
    path = shm_dir / TABLE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        os.ftruncate(fd, 5120)
        slot = layout.SHARE_SLOTS - 1
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 8, slot * 8)
        os.pwrite(fd, struct.pack("<Ii", layout.SHARE_UNLIMITED, os.getpid()), slot * 8)
        turn_at = layout.ShareTable.busy.offset + slot * ctypes.sizeof(layout.ShareBusy) + layout.ShareBusy.turn.offset
        os.pwrite(fd, struct.pack("<I", TAKEN | AWARE), turn_at)
        [free] = together(run_client, shm_dir, [{"LD_LIBRARY_PATH": with_nvml}], span=2.0)
    finally:
        os.close(fd)
    assert 0.2 < free.throttled < 0.65, free  # it did hold, and not for more than the budget
    assert free.gpu_share > 0.3, free


# ---- turns.c alone, as several threads of one process drive it ----------------------------------------


@pytest.fixture(scope="module")
def turn_cases(tmp_path_factory):
    binary = program(tmp_path_factory.mktemp("turn-cases"), "turn_cases", "turns")
    return lambda case: subprocess.run([str(binary), case], capture_output=True, text=True, check=True).stdout


def steps(out: str, fields: tuple[str, ...] = ("wait", "holding", "changed")) -> dict[str, tuple[int, ...]]:
    """{step: (its fields' values)} from turn_cases' lines ("STEP field value ...")."""
    named = ((f[0], dict(zip(f[1::2], f[2::2]))) for f in (line.split() for line in out.splitlines()))
    return {step: tuple(int(values[k]) for k in fields) for step, values in named}


def test_the_word_holds_while_any_thread_of_the_process_holds(turn_cases):
    """Two launches hold for a peer's turn; the one that goes first leaves the word HOLDING for the other (to
    accf3f3 the first to go cleared it, and the peer's turn waited on a queue that was not drained)."""
    assert steps(turn_cases("holders")) == {
        "a-holds": (1, 1, 1),
        "b-holds": (1, 1, 0),
        "b-goes": (0, 1, 0),
        "a-goes": (0, 0, 1),
    }


def test_a_launch_says_it_holds_only_once_its_queue_is_drained(turn_cases):
    assert steps(turn_cases("drain")) == {"waits": (1, 0, 0), "drained": (1, 1, 1), "goes": (0, 0, 1)}


def test_a_turn_that_comes_due_during_a_peers_stays_due_until_it_is_taken(turn_cases):
    """A launch released by its limit while a peer's turn runs holds for it, past the 5 ms a release is otherwise
    kept, and takes its own turn once the peer's ends (to b023108 the tick dropped it and the launch went without a
    turn, time-slicing: simulated 20/30/50 caps at a 0.4 ms switch got 18.1-19.7/27.1-29.6/45.7-46.9% of their
    rates alone, now 19.6-19.8/28.6-29.9/47.0-49.2)."""
    assert steps(turn_cases("due"), ("wait", "holding", "state")) == {
        "holds": (1, 1, 1),  # (wait, holding, state): due, holding for the peer's turn
        "held-10ms": (1, 1, 1),
        "held-20ms": (1, 1, 1),
        "takes": (0, 1, 2),
        "goes": (0, 0, 2),
    }


def test_holds_for_an_everlasting_turn_take_half_of_each_second(turn_cases):
    """A forged turn taken for ever: each launch holds 100 ms at most, and the holds stop at 500 ms of the second."""
    assert turn_cases("budget").split() == ["holds", "5", "held_ms", "500"]
