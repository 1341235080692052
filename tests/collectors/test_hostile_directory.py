"""The segment reader against a directory a hostile neighbour fills: junk and temp names of any count never
hide a writer, each pass does bounded work, and no name can corrupt the reader's saved state."""

from __future__ import annotations

import logging
import os

import pytest

import alnair.abi.segments as segments
from alnair.abi import layout
from alnair.abi.segments import SegmentDirectory
from test_segments import planted_segment

CAP = 4  # --shm.max-segments: a pass lists 64 names and opens at most 16 files of names it does not know
NAMES_PER_PASS = segments.NAMES_PER_SEGMENT * CAP
OPENS_PER_PASS = 16


@pytest.fixture
def opens(monkeypatch):
    """The paths the reader opens, pass by pass (the test clears it)."""
    opened: list[str] = []
    real_open = os.open
    monkeypatch.setattr(
        segments.os, "open", lambda path, *a, **k: opened.append(os.path.basename(path)) or real_open(path, *a, **k)
    )
    return opened


def plant_junk(shm_dir, count: int, template: str = "alnair.cuda.9.{i}.1") -> list[str]:
    """Empty files named as a writer names its segment: the attack that hid every job (hardening finding 1)."""
    names = [template.format(i=i) for i in range(count)]
    for name in names:
        os.close(os.open(shm_dir / name, os.O_CREAT | os.O_WRONLY, 0o644))
    return names


def plant_held(shm_dir, locker, tmp_path, name: bytes) -> None:
    """A valid segment held by a live process under any name: locked under a plain one, then renamed (the lock
    follows the inode), as the writers publish."""
    stage = tmp_path / "stage"
    planted_segment(stage, layout.CUDA_RECORD_SIZE)
    locker.lock(stage)
    os.rename(stage, os.path.join(os.fsencode(shm_dir), name))


def test_junk_names_of_any_count_never_push_out_a_writer_seen_alive(shm_dir, start_writer, opens):
    writer = start_writer("--set", "kernel_launches=41")
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, max_segments=CAP)
    assert [p.segment.holder_pid for p in directory.read()] == [writer.pid]
    junk = plant_junk(shm_dir, 20 * NAMES_PER_PASS)
    for _ in range(25):  # a whole sweep and more: every pass serves the writer, with its values
        opens.clear()
        [served] = directory.read()
        assert served.segment.holder_pid == writer.pid and served.record.devices[0].kernel_launches == 41
        assert len(opens) <= 1 + OPENS_PER_PASS  # the writer by name, then the sweep's budget
    assert all((shm_dir / name).exists() for name in junk)  # nothing foreign is deleted


def test_a_new_writer_behind_junk_is_found_by_the_sweep_and_junk_is_opened_once(shm_dir, start_writer, opens):
    junk = plant_junk(shm_dir, segments.REMEMBERED_PER_SEGMENT * CAP - 1)  # as many as it remembers
    writer = start_writer("--set", "kernel_launches=7")
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, max_segments=CAP)  # no watcher: the sweep alone
    passes_to_classify = len(junk) // OPENS_PER_PASS + 1
    served = []
    for _ in range(passes_to_classify + 1):
        served = directory.read()
        if served:
            break
    assert [p.record.devices[0].kernel_launches for p in served] == [7]
    while directory.sweep_passes == 0 or len(directory.skipped) < 1:
        directory.read()  # until a whole sweep ended
    opens.clear()
    for _ in range(len(junk) // NAMES_PER_PASS + 2):  # a whole sweep once every junk file has its verdict
        assert len(directory.read()) == 1
    assert set(opens) == {writer.path.name}  # the junk is opened no more
    assert directory.skipped == {"truncated": len(junk)}
    assert directory.scan_bounded["names"] > 0 and directory.sweep_passes == (len(junk) + 1) // NAMES_PER_PASS + 1


def test_temp_names_count_against_the_budget_and_are_checked_in_turn(shm_dir, start_writer, opens):
    writer = start_writer()
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, max_segments=CAP)
    directory.read()
    temps = plant_junk(shm_dir, 2 * segments.TEMP_CHECKS_PER_SWEEP, ".alnair.cuda.9.{i}.1.tmp")
    for path in temps:
        os.utime(shm_dir / path, (1, 1))  # abandoned for decades, but never a writer's: no header
    opens.clear()
    for _ in range(3 * len(temps) // NAMES_PER_PASS):
        before = len(opens)
        assert [p.segment.holder_pid for p in directory.read()] == [writer.pid]
        assert len(opens) - before <= 1 + OPENS_PER_PASS
    assert directory.scan_bounded["temps"] > 0  # the second sweep on checks each temp once every few sweeps
    assert all((shm_dir / name).exists() for name in temps)


def test_bounds_hit_are_one_warning_and_counted(shm_dir, caplog):
    plant_junk(shm_dir, 3 * NAMES_PER_PASS)
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, max_segments=CAP)
    with caplog.at_level(logging.INFO, logger="alnair.abi.segments"):
        for _ in range(6):
            directory.read()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "bound on opens" in warnings[0]
        assert directory.scan_bounded["opens"] >= 4
        for name in os.listdir(shm_dir):
            os.unlink(shm_dir / name)
        for _ in range(3 * NAMES_PER_PASS // OPENS_PER_PASS):  # the sweep under way ends, then one within bounds
            directory.read()
        assert caplog.records[-1].getMessage().endswith("swept within every bound again")
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


def test_a_name_that_is_not_utf8_never_breaks_a_sample_or_the_saved_state(shm_dir, start_writer, locker, tmp_path):
    state = str(tmp_path / "seen")
    writer = start_writer()
    plant_held(shm_dir, locker, tmp_path, b"alnair.cuda.1.2.\xff")
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, state_path=state)
    for _ in range(3):
        assert [p.segment.holder_pid for p in directory.read()] == [writer.pid]
        assert directory.skipped == {"bad_name": 1}
    assert segments.load_holders(state, layout.KIND_CUDA) == {writer.path.name: writer.pid}


def test_a_newline_in_a_name_cannot_write_a_line_into_the_saved_state(shm_dir, locker, tmp_path):
    """Else a restarted reader would serve a file planted unlocked under the forged line's name as an exited pid."""
    state = str(tmp_path / "seen")
    plant_held(shm_dir, locker, tmp_path, b"alnair.cuda.1.2.3\nalnair.cuda.7.7.7")
    SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60, state_path=state).read()
    planted_segment(shm_dir / "alnair.cuda.7.7.7", layout.CUDA_RECORD_SIZE)  # unlocked: nobody's
    restarted = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60, state_path=state)
    assert restarted.read() == [] and restarted.skipped == {"bad_name": 1}


def test_a_dead_segment_that_cannot_be_removed_is_counted_and_opened_once(
    shm_dir, start_writer, monkeypatch, opens, caplog
):
    """As for a non-root exporter meeting another user's dead writer in a sticky directory."""
    writer = start_writer()
    writer.kill()

    def refuse(path):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(segments.os, "unlink", refuse)
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    for _ in range(3):
        assert directory.read() == [] and directory.skipped == {"unreclaimable": 1}
    assert opens.count(writer.path.name) == 1 and directory.reclaimed == 0
    assert sum("cannot reclaim" in r.getMessage() for r in caplog.records) == 1
