"""The cuda and python collectors serve each line of the ABI's field table (abi/fields.py) as its family: its name,
type, help and labels, from records with every field set, so a field added to the header and the table is checked
here without a line of this test changing."""

from __future__ import annotations

import argparse
import re
import textwrap

from alnair.abi import fields, layout
from alnair.collectors.cuda import CudaCollector
from alnair.collectors.python import PythonCollector
from alnair.exporter.plugin import render
from support import PythonProgram

# A record (format: `record`, a layout class, and its `kind`) with every number set: 1, flags all bits; of each table,
# the first entry (its count is 1 too).
EVERY_FIELD_WRITER = textwrap.dedent("""
    import ctypes, sys
    from alnair.abi import layout
    from alnair.intercept.segment_writer import WriterSegment

    def fill(struct):
        for name, _ in struct._fields_:
            value = getattr(struct, name)
            if isinstance(value, ctypes.Structure):
                fill(value)
            elif isinstance(value, ctypes.Array) and isinstance(value[0], ctypes.Structure):
                fill(value[0])
            elif isinstance(value, int):
                setattr(struct, name, 0xFFFFFFFF if name == "flags" else 1)

    record = layout.{record}()
    fill(record)
    segment = WriterSegment({kind}, ctypes.sizeof(record))
    segment.publish(bytes(record))
    print("ready", flush=True)
    sys.stdin.read()
    segment.close()
""")


def exposition(collector_class, record: str, shm_dir) -> str:
    writer = PythonProgram(EVERY_FIELD_WRITER.format(record=record, kind=collector_class.kind), shm_dir)
    try:
        return render(collector_class(argparse.Namespace(shm_dir=str(shm_dir), procfs="/proc")).collect()).decode()
    finally:
        writer.finish()


def test_every_line_of_the_table_is_served_with_its_type_help_and_labels(shm_dir):
    text = exposition(CudaCollector, "CudaRecord", shm_dir) + exposition(PythonCollector, "PythonRecord", shm_dir)
    for line in fields.EXPORTED:
        name = line.family + ("_total" if line.type == "counter" else "")
        assert f"# HELP {name} {line.help}\n# TYPE {name} {line.type}\n" in text, name
        label_sets = {frozenset(re.findall(r'(\w+)="', s)) for s in re.findall(rf"^{name}{{(.*)}} ", text, re.M)}
        assert label_sets == {frozenset(fields.LABELS[line.struct])}, name


def test_the_table_serves_the_copy_directions_of_the_header():
    assert layout.COPY_DIRECTION_NAMES == ("host_to_device", "device_to_host", "device_to_device")
    assert layout.KIND_NAMES == {layout.KIND_CUDA: "cuda", layout.KIND_PYTHON: "python"}
