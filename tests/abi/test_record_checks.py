"""What a record may not hold because it would break the exposition: two series under one set of labels."""
from __future__ import annotations

import pytest

from alnair.abi import layout
from alnair.abi.records import MalformedRecord, parse_cuda_record, parse_python_record


def cuda_record(indices: list[int]) -> bytes:
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


@pytest.mark.parametrize("counters, phases", [
    ([b"tokens", b"tokens"], []),
    ([], [b"step", b"step"]),
    ([b"a\x01", b"a\x02"], []),  # both read as "a\ufffd": one label value
], ids=["counter twice", "phase twice", "names alike once made text"])
def test_a_name_given_twice_is_malformed(counters, phases):
    with pytest.raises(MalformedRecord, match="name given twice"):
        parse_python_record(python_record(counters, phases))
