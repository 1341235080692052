"""What a record may not hold because it would break the exposition: two series under one set of labels."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from alnair.abi import layout
from alnair.abi.records import MalformedRecord, kernel_key, parse_cuda_record, parse_python_record


def cuda_record(indices: Sequence[int]) -> bytes:
    record = layout.CudaRecord(device_count=len(indices), max_devices=layout.CUDA_MAX_DEVICES)
    for slot, index in enumerate(indices):
        record.devices[slot].device_index = index
    return bytes(record)


def python_record(counters: list[bytes], phases: list[bytes]) -> bytes:
    record = layout.PythonRecord(counter_count=len(counters), phase_count=len(phases))
    for slot, name in enumerate(counters):
        record.counters[slot].name = name
    for slot, name in enumerate(phases):
        record.phases[slot].name = name
    return bytes(record)


def test_distinct_devices_and_names_parse():
    assert [d.device_index for d in parse_cuda_record(cuda_record([0, 3])).devices] == [0, 3]
    parsed = parse_python_record(python_record([b"tokens", b"samples"], [b"forward", b"backward"]))
    assert (parsed.counter_count, parsed.phase_count) == (2, 2)


def test_a_device_given_twice_is_malformed():
    with pytest.raises(MalformedRecord, match="device_index given twice"):
        parse_cuda_record(cuda_record([1, 1]))


@pytest.mark.parametrize(
    "counters, phases",
    [
        ([b"tokens", b"tokens"], []),
        ([], [b"step", b"step"]),
        ([b"a\x01", b"a\x02"], []),  # both read as "a\ufffd": one label value
    ],
    ids=["counter twice", "phase twice", "names alike once made text"],
)
def test_a_name_given_twice_is_malformed(counters, phases):
    with pytest.raises(MalformedRecord, match="name given twice"):
        parse_python_record(python_record(counters, phases))


def kernel_table(
    rows: list[tuple[int, bytes, int]], devices: tuple[int, ...] = (0, 1), count: int | None = None
) -> bytes:
    """A cuda record of `devices` whose kernel table holds (device_index, name, flags) rows."""
    record = layout.CudaRecord.from_buffer_copy(cuda_record(devices))
    record.kernels.count = len(rows) if count is None else count
    for slot, (device, name, flags) in enumerate(rows):
        record.kernels.kernels[slot].device_index, record.kernels.kernels[slot].name = device, name
        record.kernels.kernels[slot].flags = flags
    return bytes(record)


def test_kernels_by_name_and_other_rows_parse_as_their_labels():
    other = layout.CUDA_KERNEL_OTHER
    rows = [(0, b"gemm", 0), (1, b"gemm", 0), (0, b"", 0), (0, b"", other), (1, b"", other)]
    assert [kernel_key(k) for k in parse_cuda_record(kernel_table(rows)).kernels] == [
        (0, "gemm"),
        (1, "gemm"),
        (0, "(unnamed)"),
        (0, "(other)"),
        (1, "(other)"),
    ]


@pytest.mark.parametrize(
    "rows, count, why",
    [
        ([(0, b"gemm", 0), (0, b"gemm", 0)], None, "kernel given twice"),
        # a name posing as OTHER
        ([(0, b"(other)", 0), (0, b"", layout.CUDA_KERNEL_OTHER)], None, "kernel given twice"),
        ([(0, b"a\x01", 0), (0, b"a\x02", 0)], None, "kernel given twice"),  # one label value
        ([(2, b"gemm", 0)], None, "device the record does not have"),
        ([], layout.CUDA_MAX_KERNELS + 1, "over the table's size"),
    ],
)
def test_a_kernel_table_that_would_give_two_series_one_label_set_is_malformed(rows, count, why):
    with pytest.raises(MalformedRecord, match=why):
        parse_cuda_record(kernel_table(rows, count=count))


def test_a_record_without_the_kernel_table_reads_it_as_absent():
    assert parse_cuda_record(cuda_record([0])[: layout.CUDA_KERNELS_OFFSET]).kernels is None
