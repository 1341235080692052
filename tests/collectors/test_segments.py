"""The segment reader against the C test writer: values, seqlock, skipped and reclaimed segments."""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import time

from hypothesis import HealthCheck, given, settings, strategies as st

from alnair.abi import layout
from alnair.abi.records import parse_cuda_record
from alnair.abi.segments import SegmentDirectory
from support import wait_until

COUNTERS = [
    "kernel_launches",
    "graph_launches",
    "bytes_in_use",
    "peak_bytes",
    "allocations",
    "failed_allocations",
    "limit_denied_allocations",
    "memory_limit_bytes",
    "throttled_ns",
]


def read_cuda(shm_dir):
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    return directory, directory.read()


def start_ticks(pid: int) -> int:
    stat_line = open(f"/proc/{pid}/stat").read()
    return int(stat_line.rsplit(")", 1)[1].split()[19])


def test_reader_returns_exactly_what_the_c_writer_published(start_writer, shm_dir):
    env = {"ALNAIR_POD_UID": "0b7c5e2a-1111-4222-8333-944455556666", "ALNAIR_CONTAINER_ID": "containerd://abc123"}
    writer = start_writer(
        "--devices", "3", "--set", "kernel_launches=7", "--set", "bytes_in_use=4096", "--compute-limit", "30", env=env
    )
    directory, segments = read_cuda(shm_dir)
    assert len(segments) == 1 and directory.skipped.total() == 0
    segment, process = segments[0].segment, segments[0].record
    h = segment.header
    assert segment.holder_pid == writer.pid == h.writer_pid
    assert h.start_time_ticks == start_ticks(writer.pid)
    assert h.pid_namespace_inode == os.stat("/proc/self/ns/pid").st_ino
    assert (segment.pod_uid, segment.container_id, segment.comm) == (
        env["ALNAIR_POD_UID"],
        env["ALNAIR_CONTAINER_ID"],
        "alnair-shm-test",
    )
    assert h.seq % 2 == 0 and h.seq >= 2
    assert abs(h.update_time_ns / 1e9 - time.time()) < 60
    assert [d.device_index for d in process.devices] == [0, 1, 2]
    assert [d.kernel_launches for d in process.devices] == [7, 8, 9]
    assert [d.bytes_in_use for d in process.devices] == [4096, 4097, 4098]
    assert [d.compute_limit_percent for d in process.devices] == [30, 30, 30]
    assert bytes(process.devices[1].uuid) == bytes(range(16, 32))


def test_segment_is_named_by_kind_namespace_pid_and_start_time_and_not_world_readable(start_writer, shm_dir):
    writer = start_writer()
    ns = os.stat("/proc/self/ns/pid").st_ino
    assert writer.path.name == f"alnair.cuda.{ns}.{writer.pid}.{start_ticks(writer.pid)}"
    mode = stat.S_IMODE(writer.path.stat().st_mode)
    assert mode & 0o137 == 0, oct(mode)  # owner rw, group r at most


def test_reader_never_sees_a_torn_record_while_the_writer_churns(start_writer, shm_dir):
    writer = start_writer("--devices", "64", "--churn")
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    # A pass the writer outpaces on every retry skips the record (torn), never serves it torn; how many passes do
    # depends on the scheduler (1473 of 2000 on one loaded CI run, 739 on another), so read until 1000 are served.
    consistent, deadline = 0, time.monotonic() + 300  # the deadline only ends a reader that is never served
    while consistent < 1000 and time.monotonic() < deadline:
        for parsed in directory.read():
            values = {getattr(d, f) for d in parsed.record.devices for f in COUNTERS}
            assert len(values) == 1, values  # every counter of every device from one publish
            consistent += 1
    assert consistent >= 1000
    assert unchecked_copy_tears(writer.path, 64), "the stress never tore a plain copy: the test proves nothing"


def unchecked_copy_tears(path, devices: int, tries: int = 50000) -> bool:
    """A copy taken without the seqlock does tear under this writer."""
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(tries):
            raw = os.pread(fd, layout.HEADER_SIZE + layout.CUDA_DEVICES_OFFSET + devices * layout.CUDA_DEVICE_SIZE, 0)
            process = parse_cuda_record(raw[layout.HEADER_SIZE :])
            if len({getattr(d, f) for d in process.devices for f in COUNTERS}) > 1:
                return True
        return False
    finally:
        os.close(fd)


def test_clean_exit_removes_the_segment(start_writer, shm_dir):
    writer = start_writer()
    writer.stop()
    assert not writer.path.exists()
    assert read_cuda(shm_dir)[1] == []


def test_killed_writer_segment_is_reclaimed(start_writer, shm_dir):
    survivor = start_writer()
    victim = start_writer()
    victim.kill()
    assert victim.path.exists()
    directory, segments = read_cuda(shm_dir)
    assert [s.segment.holder_pid for s in segments] == [survivor.pid]
    assert directory.reclaimed == 1 and not victim.path.exists() and survivor.path.exists()


def test_segment_naming_a_live_but_unrelated_pid_is_reclaimed(start_writer, shm_dir):
    """A reused pid: the header names a live process, but no process holds the lock."""
    writer = start_writer()
    data = bytearray(writer.path.read_bytes())
    struct.pack_into("<i", data, layout.ShmHeader.writer_pid.offset, os.getpid())
    impostor = shm_dir / f"alnair.cuda.1.{os.getpid()}.1"
    impostor.write_bytes(bytes(data))
    directory, segments = read_cuda(shm_dir)
    assert len(segments) == 1 and directory.reclaimed == 1 and not impostor.exists()


def valid_bytes(start_writer, shm_dir) -> bytes:
    writer = start_writer("--devices", "2")
    data = writer.path.read_bytes()
    writer.stop()
    return data


def test_broken_and_foreign_segments_are_skipped_and_counted(start_writer, shm_dir, locker):
    good = valid_bytes(start_writer, shm_dir)
    live = start_writer()

    def patched(offset: int, fmt: str, value: int) -> bytes:
        data = bytearray(good)
        struct.pack_into(fmt, data, offset, value)
        return bytes(data)

    files = {
        "alnair.cuda.1.1.101": good[:100],
        "alnair.cuda.1.1.102": good[:300],
        "alnair.cuda.1.1.103": b"",
        "alnair.cuda.1.1.104": patched(0, "<Q", 0x1234),
        "alnair.cuda.1.1.105": patched(layout.ShmHeader.abi_version.offset, "<I", layout.ABI_VERSION + 1),
        "alnair.cuda.1.1.106": patched(layout.ShmHeader.record_kind.offset, "<I", layout.KIND_PYTHON),
        "alnair.cuda.1.1.107": os.urandom(9000),
        "alnair.cuda.1.1.108": patched(layout.HEADER_SIZE, "<I", 65),  # device_count over the maximum
        "unrelated.file": b"not ours",
        "alnair.cuda.1.1.112.x": good,  # a writer's record under a name no writer makes: never opened
        "alnair.cuda.1.1.\udcff": good,  # not UTF-8
    }
    for name, data in files.items():
        (shm_dir / name).write_bytes(data)
    locker.lock(shm_dir / "alnair.cuda.1.1.108")  # a live writer with a bad record
    (shm_dir / "alnair.cuda.1.1.109").mkdir()
    os.mkfifo(shm_dir / "alnair.cuda.1.1.110")  # must not block the reader
    os.symlink(live.path, shm_dir / "alnair.cuda.1.1.111")
    directory, segments = read_cuda(shm_dir)
    assert [s.segment.holder_pid for s in segments] == [live.pid]
    assert dict(directory.skipped) == {
        "truncated": 3,
        "bad_magic": 2,
        "abi_version": 1,
        "malformed": 4,
        "unreadable": 1,
        "bad_name": 2,
    }
    assert (shm_dir / "unrelated.file").read_bytes() == b"not ours"  # never touched
    assert all((shm_dir / name).exists() for name in files)  # nothing not understood is deleted


def test_abandoned_temp_file_is_removed_after_the_grace_period_and_a_foreign_one_never(shm_dir):
    """A writer's temp file begins with the header it wrote before dying; one that does not was never a writer's."""
    begun = bytes(layout.ShmHeader(magic=layout.SHM_MAGIC, record_kind=layout.KIND_CUDA))
    old, fresh = shm_dir / ".alnair.cuda.1.2.3.tmp", shm_dir / ".alnair.cuda.1.4.5.tmp"
    foreign, odd = shm_dir / ".alnair.cuda.1.6.7.tmp", shm_dir / ".alnair.cuda.x.tmp"
    for path in (old, fresh, odd):
        path.write_bytes(begun)
    foreign.write_bytes(b"x")
    for path in (old, foreign, odd):
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    directory, _ = read_cuda(shm_dir)
    assert not old.exists() and fresh.exists() and foreign.exists() and odd.exists() and directory.reclaimed == 1


def _fuzz_template() -> bytes:
    header = layout.ShmHeader(
        magic=layout.SHM_MAGIC,
        abi_version=layout.ABI_VERSION,
        header_size=layout.HEADER_SIZE,
        record_kind=layout.KIND_CUDA,
        record_size=ctypes.sizeof(layout.CudaRecord),
    )
    return bytes(header) + bytes(layout.CudaRecord(device_count=2, max_devices=layout.CUDA_MAX_DEVICES))


FUZZ_TEMPLATE = _fuzz_template()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.binary(max_size=9000),
    flips=st.lists(st.tuples(st.integers(0, len(FUZZ_TEMPLATE) - 1), st.integers(0, 255)), max_size=40),
)
def test_fuzzed_segment_bytes_never_crash_the_reader(shm_dir, locker, data, flips):
    random_file, mutated_file = shm_dir / "alnair.cuda.1.1.1", shm_dir / "alnair.cuda.1.1.2"
    if not mutated_file.exists():
        random_file.touch()
        mutated_file.touch()
        locker.lock(random_file)  # held by a live process: the reader parses instead of reclaiming
        locker.lock(mutated_file)
    template = bytearray(FUZZ_TEMPLATE)
    for offset, value in flips:
        template[offset] = value
    random_file.write_bytes(data)  # same inode: the lock stays
    mutated_file.write_bytes(bytes(template))
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    segments = directory.read()
    assert len(segments) + directory.skipped.total() == 2
    assert directory.reclaimed == 0
    for parsed in segments:
        assert len(parsed.record.devices) <= layout.CUDA_MAX_DEVICES


def planted_segment(path, record_size: int, comm: bytes = b"planted") -> None:
    """A header that validates, claiming a record of `record_size` bytes, in a file that is sparse beyond it."""
    header = layout.ShmHeader(
        magic=layout.SHM_MAGIC,
        abi_version=layout.ABI_VERSION,
        header_size=layout.HEADER_SIZE,
        record_kind=layout.KIND_CUDA,
        record_size=record_size,
        comm=comm,
    )
    with open(path, "wb") as f:
        f.write(bytes(header) + bytes(layout.CudaRecord(device_count=1, max_devices=layout.CUDA_MAX_DEVICES)))
        f.truncate(layout.HEADER_SIZE + record_size)  # sparse: costs the planter a few KiB of tmpfs


def test_a_planted_sparse_segment_claiming_4_gib_is_skipped_unread(shm_dir, locker, monkeypatch):
    import alnair.abi.segments as segments

    planted = shm_dir / "alnair.cuda.1.2.3"
    planted_segment(planted, 0xFFFF_FFFF)  # record_size is a u32: 4 GiB less a byte
    locker.lock(planted)
    asked = []
    real_pread = os.pread
    monkeypatch.setattr(segments.os, "pread", lambda fd, n, offset: asked.append(n) or real_pread(fd, n, offset))
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    assert directory.read() == [] and dict(directory.skipped) == {"oversized": 1}
    assert max(asked) == layout.HEADER_SIZE and planted.exists()  # the header alone was read; nothing removed


def test_a_record_larger_than_this_reader_knows_is_read_only_as_far_as_it_knows(shm_dir, locker, monkeypatch):
    """A newer writer may append fields: its record is read, and copied only up to the fields known here."""
    import alnair.abi.segments as segments

    newer = shm_dir / "alnair.cuda.1.2.4"
    planted_segment(newer, layout.MAX_RECORD_SIZE)
    locker.lock(newer)
    asked = []
    real_pread = os.pread
    monkeypatch.setattr(segments.os, "pread", lambda fd, n, offset: asked.append(n) or real_pread(fd, n, offset))
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    [parsed] = directory.read()
    assert len(parsed.record.devices) == 1 and parsed.segment.comm == "planted"
    assert max(asked) == layout.HEADER_SIZE + layout.CUDA_RECORD_SIZE


def test_segments_past_the_cap_are_counted_not_read(shm_dir, start_writer):
    for _ in range(5):
        start_writer()
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, max_segments=3)
    assert len(directory.read()) == 3 and dict(directory.skipped) == {"over_limit": 2}


def test_writers_seen_alive_keep_their_place_when_newcomers_fill_the_cap(shm_dir, start_writer, caplog):
    """tmpfs lists the newest entries first: without an order of its own the reader would serve whoever came last."""
    established = {start_writer().pid for _ in range(3)}
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, max_segments=3)
    assert {p.segment.holder_pid for p in directory.read()} == established
    for _ in range(4):
        start_writer()
    for _ in range(2):
        assert {p.segment.holder_pid for p in directory.read()} == established
        assert dict(directory.skipped) == {"over_limit": 4}
    assert [r.getMessage().split(": ", 1)[1] for r in caplog.records if "max-segments" in r.getMessage()] == [
        "4 segments not read this pass, past --shm.max-segments 3 (writers seen alive are read first; "
        'see alnair_*_segments_skipped{reason="over_limit"})'
    ]


def test_control_characters_in_a_writers_strings_never_reach_a_label_or_a_terminal(shm_dir, locker):
    planted = shm_dir / "alnair.cuda.1.2.5"
    planted_segment(planted, layout.CUDA_RECORD_SIZE, comm=b"\x1b[2Jx\n\x7fy\xff")
    locker.lock(planted)
    [parsed] = SegmentDirectory(str(shm_dir), layout.KIND_CUDA).read()
    assert parsed.segment.comm == "\ufffd[2Jx\ufffd\ufffdy\ufffd"


def test_a_dead_writers_last_record_lingers_as_exited_then_is_reclaimed(start_writer, shm_dir):
    clock = [1000.0]
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60, clock=lambda: clock[0])
    writer = start_writer("--set", "kernel_launches=77")
    [alive] = directory.read()
    assert not alive.segment.exited and alive.segment.holder_pid == writer.pid
    writer.kill()
    [last] = directory.read()
    assert last.segment.exited and last.segment.holder_pid == writer.pid  # the pid it had while it lived
    assert (
        last.record.devices[0].kernel_launches == 77
        and last.segment.ended_unix == last.segment.header.update_time_ns / 1e9
    )
    clock[0] += 59.9
    assert len(directory.read()) == 1 and writer.path.exists()
    clock[0] += 0.2
    assert directory.read() == [] and not writer.path.exists() and directory.reclaimed == 1


def test_a_writer_that_lived_between_two_passes_is_seen_alive_and_lingers(start_writer, shm_dir):
    """Its segment was renamed into place while it held the lock: the watcher saw that, no pass did."""
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60, watch_arrivals=True)
    blind = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60, reclaim=False)
    try:
        assert directory.read() == []
        writer = start_writer("--set", "kernel_launches=5")
        wait_until(lambda: directory._arrivals._arrivals)  # the watcher probed the new segment while it was locked
        writer.kill()
        [last] = directory.read()  # the first pass to meet it finds it unlocked
        assert last.segment.exited and last.segment.holder_pid == writer.pid
        assert last.record.devices[0].kernel_launches == 5
        assert blind.read() == []  # without the watcher the same file is anyone's invention
    finally:
        directory.close()


def test_a_flood_of_names_costs_the_watcher_at_most_its_budget(shm_dir, monkeypatch):
    import alnair.abi.arrivals as arrivals

    probes = []
    monkeypatch.setattr(arrivals, "PROBES_PER_SECOND", 50)
    watcher = arrivals.ArrivalWatcher(str(shm_dir), lambda name: True, lambda fd: probes.append(fd) or 1)
    first_second = int(time.monotonic())
    try:
        for i in range(400):  # published as writers publish: made under another name, renamed into place
            (shm_dir / f".t{i}").write_bytes(b"")
            os.rename(shm_dir / f".t{i}", shm_dir / f"alnair.cuda.1.{i}.1")
        wait_until(lambda: len(probes) >= 50)
        assert len(probes) <= 50 * (int(time.monotonic()) - first_second + 1)  # the budget of each second so far
    finally:
        watcher.stop()


def test_without_a_linger_a_dead_writers_segment_is_reclaimed_at_once(start_writer, shm_dir):
    writer = start_writer()
    writer.kill()
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    assert directory.read() == [] and not writer.path.exists() and directory.reclaimed == 1


def test_a_process_holding_several_segments_is_served_once(shm_dir, locker):
    """Every series once per scrape: the text format allows no repeats, and one pid is one process."""
    for i in range(3):
        planted = shm_dir / f"alnair.cuda.1.2.{10 + i}"
        planted_segment(planted, layout.CUDA_RECORD_SIZE)
        locker.lock(planted)  # one process holds them all
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA)
    assert len(directory.read()) == 1 and dict(directory.skipped) == {"duplicate": 2}


def test_a_file_planted_unlocked_is_never_served_as_an_exited_writer(shm_dir):
    planted = shm_dir / "alnair.cuda.1.2.20"
    planted_segment(planted, layout.CUDA_RECORD_SIZE)  # valid, but no writer ever held it
    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60)
    assert directory.read() == [] and not planted.exists() and directory.reclaimed == 1


def test_a_restarted_reader_still_serves_the_writers_that_exited_meanwhile(start_writer, shm_dir, tmp_path):
    state = str(tmp_path / "seen")
    writer = start_writer("--set", "kernel_launches=5")
    SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60, state_path=state).read()  # seen alive
    writer.kill()  # while no reader runs
    [last] = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, linger_seconds=60, state_path=state).read()
    assert last.segment.exited and last.segment.holder_pid == writer.pid and last.record.devices[0].kernel_launches == 5
