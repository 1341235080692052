"""Pass-through mode, fork, and running on when the segment cannot be created."""

from __future__ import annotations

import os
import subprocess

import pytest

from conftest import published
from support import wait_until


def segments(directory) -> list[str]:
    """The segments in a directory: every name but the GPUs' share tables (alnair.share.<uuid>)."""
    return [name for name in os.listdir(directory) if not name.startswith("alnair.share.")]


def test_pass_through_mode_wraps_nothing_and_publishes_nothing(run_client, shm_dir):
    for lookup in ("gpa", "dlsym"):
        client = run_client(lookup, "every-entry", env={"ALNAIR_INTERCEPT": "off"})
        assert set(dict(client.values("wrapped")).values()) == {"no"}
        assert min(int(n) for _, n in client.values("driver")) >= 1
    client = run_client("direct", "every-entry", env={"ALNAIR_INTERCEPT": "off"})
    assert min(int(n) for _, n in client.values("driver")) >= 1  # interposed, but only forwards
    assert os.listdir(shm_dir) == []


def test_the_preloaded_library_alone_wraps_and_publishes(run_client, shm_dir):
    """The same program with and without the library: what the first run shows is the library's doing."""
    client = run_client("gpa", "launches", "1", "10", "1", preload=False)
    assert client.values("launches") == [["0", "10"]]
    client.stop()
    assert os.listdir(shm_dir) == []
    client = run_client("gpa", "launches", "1", "10", "1")
    wait_until(
        lambda: (
            published(shm_dir, client.proc.pid).get(0) and published(shm_dir, client.proc.pid)[0].kernel_launches == 10
        )
    )
    client.stop()


def test_fork_child_gets_its_own_segment_and_counts(run_client, shm_dir):
    client = run_client("gpa", "fork")
    client.read_until_ready()  # the child's ready line
    parent, child = int(client.values("parent")[0][0]), int(client.values("child")[0][0])
    wait_until(lambda: published(shm_dir, parent).get(0) and published(shm_dir, child).get(0))
    wait_until(lambda: published(shm_dir, parent)[0].kernel_launches == 5 + 2)
    wait_until(lambda: published(shm_dir, child)[0].kernel_launches == 7)  # none inherited from the parent
    assert len([name for name in os.listdir(shm_dir) if name.startswith("alnair.cuda.")]) == 2


def test_unusable_segment_directory_costs_one_line_and_the_program_runs(run_client, tmp_path):
    client = run_client("gpa", "launches", "4", "1000", "2", env={"ALNAIR_SHM_DIR": str(tmp_path / "missing")})
    assert client.values("launches") == [["0", "2000"], ["1", "2000"]]
    stderr = client.stop()
    assert client.proc.returncode == 0
    assert len(stderr.strip().splitlines()) == 1 and "cannot create" in stderr


def test_a_world_writable_directory_without_the_sticky_bit_gets_no_segment_and_one_line(run_client, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone could delete a segment here: the exporter refuses it, the writer does not publish
    client = run_client("gpa", "launches", "4", "1000", "2", env={"ALNAIR_SHM_DIR": str(shared)})
    assert client.values("launches") == [["0", "2000"], ["1", "2000"]]
    stderr = client.stop()
    assert client.proc.returncode == 0 and segments(shared) == []
    assert len(stderr.strip().splitlines()) == 1 and "without the sticky bit" in stderr and "chmod 1777" in stderr
    shared.chmod(0o1777)
    client = run_client("gpa", "launches", "4", "1000", "2", env={"ALNAIR_SHM_DIR": str(shared)})
    wait_until(lambda: segments(shared))  # with the sticky bit it publishes
    assert client.stop() == ""


def test_clean_exit_removes_the_segment(run_client, shm_dir):
    client = run_client("gpa", "launches", "1", "10", "1")
    wait_until(lambda: published(shm_dir, client.proc.pid))
    client.stop()
    assert segments(shm_dir) == []  # the GPU's share table stays, for the next process on that GPU


def test_full_segment_filesystem_costs_one_line_not_a_crash(run_client, tmp_path):
    """A sparse segment on a full tmpfs would SIGBUS the program at its first publish."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        (full / "filler").write_bytes(b"\0" * 56 * 1024)
        client = run_client("gpa", "launches", "2", "1000", "1", env={"ALNAIR_SHM_DIR": str(full)})
        assert client.values("launches") == [["0", "2000"]]
        stderr = client.stop()
        assert client.proc.returncode == 0
        assert len(stderr.strip().splitlines()) == 1 and "No space left" in stderr
    finally:
        subprocess.run(["umount", "-l", str(full)], check=True)


def test_a_clean_exit_publishes_the_final_counts_and_leaves_them_where_a_reader_lingers(run_client, shm_dir):
    """With a 60 s publish period nothing after the first tick reaches the segment but the exit's publish."""
    from alnair.abi import layout
    from alnair.abi.segments import SegmentDirectory

    (shm_dir / "alnair.reader").touch()
    # 1 ms per launch: the first tick publishes near the start, and 60 s pass before the next one would.
    client = run_client(
        "gpa",
        "launches",
        "1",
        "500",
        "1",
        env={"ALNAIR_PUBLISH_INTERVAL_MS": "60000", "FAKE_CUDA_LAUNCH_NS": "1000000"},
    )
    reader = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60)
    wait_until(lambda: reader.read())  # seen alive
    assert client.values("launches") == [["0", "500"]]
    assert [p.record.devices[0].kernel_launches for p in reader.read()] < [500]  # still the first tick's count
    assert client.stop() == "" and client.proc.returncode == 0
    [last] = reader.read()
    assert last.segment.exited and last.record.devices[0].kernel_launches == 500
