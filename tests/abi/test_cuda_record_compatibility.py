"""The cuda record's appended fields (activity, per-device copies) and readers on either side of them:
a reader that predates them reads a new writer's record, and a new reader reads an old writer's shorter one
with the new fields absent (None), not zero."""

from __future__ import annotations

import pytest

from alnair.abi import layout, records
from alnair.abi.segments import SegmentDirectory

OLD_RECORD_SIZE = layout.CUDA_ACTIVITY_OFFSET  # what writers published before the fields were appended
NEW_FIELDS = [
    "--set",
    "host_to_device.bytes=1000",
    "--set",
    "device_to_host.copies=7",
    "--set",
    "device_to_device.sync_ns=5",
    "--set",
    "first_launch_ns=1500000000",
    "--set",
    "first_allocation_ns=900000000",
    "--set",
    "last_launch_time_ns=1700000000000000000",
    "--set",
    "kernel_launches=42",
    "--set",
    "context_bytes=500000000",
    "--set",
    "pool_reserved_bytes=3000",
    "--set",
    "charged_bytes=9000",
]


def read(shm_dir, pid: int):
    return next(
        p for p in SegmentDirectory(str(shm_dir), layout.KIND_CUDA, reclaim=False).read() if p.segment.holder_pid == pid
    )


def test_a_new_writers_record_reads_in_full(start_writer, shm_dir):
    w = start_writer("--devices", "2", *NEW_FIELDS)
    parsed = read(shm_dir, w.pid)
    assert parsed.segment.header.record_size == layout.CUDA_RECORD_SIZE
    r = parsed.record
    assert (r.activity.first_launch_ns, r.activity.first_allocation_ns, r.activity.last_launch_time_ns) == (
        1_500_000_000,
        900_000_000,
        1_700_000_000_000_000_000,
    )
    h2d, d2h, d2d = layout.COPY_HOST_TO_DEVICE, layout.COPY_DEVICE_TO_HOST, layout.COPY_DEVICE_TO_DEVICE
    assert [e.copies[h2d].bytes for e in r.devices_ext] == [1000, 1001]  # devices_ext[i] is devices[i]'s
    assert [e.copies[d2h].copies for e in r.devices_ext] == [7, 8]
    assert [e.copies[d2d].sync_ns for e in r.devices_ext] == [5, 6]
    assert [d.kernel_launches for d in r.devices] == [42, 43]
    assert [m.context_bytes for m in r.devices_memory] == [500_000_000, 500_000_001]
    assert [m.pool_reserved_bytes for m in r.devices_memory] == [3000, 3001]
    assert [m.charged_bytes for m in r.devices_memory] == [9000, 9001]


def test_a_writer_from_before_the_memory_fields_reads_them_as_absent(start_writer, shm_dir):
    """A record that ends where devices_memory begins (the copies' writers) has copies, no memory fields."""
    w = start_writer("--devices", "2", "--record-size", str(layout.CUDA_DEVICES_MEMORY_OFFSET), *NEW_FIELDS)
    r = read(shm_dir, w.pid).record
    assert r.devices_memory is None  # absent, not zero
    assert [e.copies[layout.COPY_HOST_TO_DEVICE].bytes for e in r.devices_ext] == [1000, 1001]


def test_a_new_reader_reads_an_old_writers_shorter_record_with_the_new_fields_absent(start_writer, shm_dir):
    w = start_writer("--devices", "2", "--record-size", str(OLD_RECORD_SIZE), *NEW_FIELDS)
    parsed = read(shm_dir, w.pid)
    assert parsed.segment.header.record_size == OLD_RECORD_SIZE
    assert parsed.record.activity is None and parsed.record.devices_ext is None  # absent, not zero
    assert parsed.record.devices_memory is None
    assert [d.kernel_launches for d in parsed.record.devices] == [42, 43]


@pytest.mark.parametrize(
    "size", [OLD_RECORD_SIZE + 8, layout.CUDA_DEVICES_EXT_OFFSET + 100, layout.CUDA_DEVICES_MEMORY_OFFSET + 10]
)
def test_a_record_that_ends_inside_an_appended_struct_lacks_it(size):
    record = layout.CudaRecord(device_count=1, max_devices=layout.CUDA_MAX_DEVICES)
    record.activity.first_launch_ns = 3
    parsed = records.parse_cuda_record(bytes(record)[:size])
    assert parsed.devices_memory is None
    assert (parsed.devices_ext is None) == (size < layout.CUDA_DEVICES_MEMORY_OFFSET)
    assert parsed.activity is None if size < layout.CUDA_DEVICES_EXT_OFFSET else parsed.activity.first_launch_ns == 3


def test_an_old_reader_reads_a_new_writers_record(start_writer, shm_dir, monkeypatch):
    """A reader that knows only the first 8224 bytes copies min(record_size, 8224) and parses its devices."""
    w = start_writer("--devices", "2", *NEW_FIELDS)
    from alnair.abi import segments

    monkeypatch.setitem(segments.RECORD_SIZES, layout.KIND_CUDA, OLD_RECORD_SIZE)
    parsed = read(shm_dir, w.pid)
    assert [d.kernel_launches for d in parsed.record.devices] == [42, 43]
    assert parsed.record.activity is None  # it copied no further than it knows
