"""The Python writer follows the segment protocol of intercept/shm_segment.c: name, mode, lock, fork."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

from alnair.abi import layout
from alnair.abi.segments import SegmentDirectory, lock_holder
from support import PythonProgram, python_records, wait_until

FORKING = textwrap.dedent("""
    import os, sys
    import alnair
    alnair.counter("before_fork").inc(5)
    child = os.fork()
    if child == 0:
        alnair.counter("in_child").inc(2)
        sys.stdin.read()
        os._exit(0)
    alnair.counter("after_fork").inc(1)
    print("ready", child, flush=True)
    sys.stdin.read()
    os.waitpid(child, 0)
""")


def test_segment_is_named_locked_and_private_like_the_c_writers(shm_dir):
    p = PythonProgram(
        "import sys, alnair\nalnair.counter('c').inc()\nprint('ready', flush=True)\nsys.stdin.read()",
        shm_dir,
        env={"ALNAIR_POD_UID": "0f0e-pod", "ALNAIR_CONTAINER_ID": "containerd://abc"},
    )
    path = wait_until(lambda: next(iter(shm_dir.iterdir()), None))
    with open(f"/proc/{p.pid}/stat", "rb") as f:
        start_ticks = f.read().rsplit(b")", 1)[1].split()[19].decode()
    assert path.name == f"alnair.python.{os.stat('/proc/self/ns/pid').st_ino}.{p.pid}.{start_ticks}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 & ~_umask()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert lock_holder(fd) == p.pid
        header = layout.ShmHeader.from_buffer_copy(os.pread(fd, layout.HEADER_SIZE, 0))
    finally:
        os.close(fd)
    assert (header.record_kind, header.record_size, header.writer_pid) == (
        layout.KIND_PYTHON,
        layout.PYTHON_RECORD_SIZE,
        p.pid,
    )
    comm = Path(f"/proc/{p.pid}/comm").read_bytes().strip()  # python or python3, as the interpreter is named
    assert (header.pod_uid, header.container_id, header.comm) == (b"0f0e-pod", b"containerd://abc", comm)
    assert header.seq % 2 == 0 and header.seq >= 2
    # One descriptor on its own segment: closing a second would drop the process's lock.
    fds = [os.readlink(f"/proc/{p.pid}/fd/{n}") for n in os.listdir(f"/proc/{p.pid}/fd")]
    assert fds.count(str(path)) == 1
    p.finish()
    assert list(shm_dir.iterdir()) == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_fork_child_gets_its_own_segment_and_the_parents_stays_locked(shm_dir):
    p = PythonProgram(FORKING, shm_dir)
    child = int(p.ready_line[0])
    records = wait_until(lambda: (r := python_records(shm_dir)) and len(r) == 2 and r[p.pid].counter_count == 2 and r)
    parent_counts = {c.name: c.value for c in records[p.pid].counters[: records[p.pid].counter_count]}
    child_counts = {c.name: c.value for c in records[child].counters[: records[child].counter_count]}
    assert parent_counts == {b"before_fork": 5, b"after_fork": 1}
    assert child_counts == {b"before_fork": 0, b"in_child": 2}  # the child starts from zero
    assert p.finish() == ""


def test_a_clean_exit_leaves_the_final_record_where_a_reader_lingers_and_removes_it_where_none_does(shm_dir):
    program = "import alnair\nalnair.counter('done').inc(7)\nprint('ready', flush=True)\n"
    PythonProgram(program, shm_dir).proc.wait(30)
    assert list(shm_dir.iterdir()) == []  # no exporter has announced itself here: nothing is left behind
    (shm_dir / "alnair.reader").touch()
    reader = SegmentDirectory(str(shm_dir), layout.KIND_PYTHON, linger_seconds=60)
    done = PythonProgram(program + "import sys\nsys.stdin.readline()\n", shm_dir)
    wait_until(lambda: len(reader.read()) == 1)  # seen alive
    done.finish()
    [segment] = [p for p in shm_dir.iterdir() if p.name.startswith("alnair.python.")]
    fd = os.open(segment, os.O_RDONLY)
    try:
        assert lock_holder(fd) is None  # released: the writer is gone
    finally:
        os.close(fd)
    [last] = reader.read()
    assert last.segment.exited and {c.name: c.value for c in last.record.counters[: last.record.counter_count]} == {
        b"done": 7
    }


def test_no_segment_in_a_world_writable_directory_without_the_sticky_bit(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    p = PythonProgram(
        "import sys, alnair\nalnair.counter('c').inc()\nprint('ready', flush=True)\nsys.stdin.read()", shared
    )
    assert os.listdir(shared) == []
    err = p.finish()
    assert p.proc.returncode == 0 and os.listdir(shared) == []
    assert len(err.strip().splitlines()) == 1 and "without the sticky bit" in err and "chmod 1777" in err
