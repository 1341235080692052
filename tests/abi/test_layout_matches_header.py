"""The Python mirror, built from abi/alnair_shm.h by its parser, agrees with what a C compiler makes of the header
byte for byte: every size, offset and constant."""

from __future__ import annotations

import ctypes
import re
import subprocess

import pytest

from alnair.abi import HEADER as ABI_HEADER, layout, naming

# Every integer the header defines (#define and enumerators), as the parser read it: the compiler must agree.
CONSTANTS = layout.DECLARATIONS.integers


def header_fields() -> dict[str, list[str]]:
    """Field names of every struct in the header, in declaration order, read from its text."""
    text = re.sub(r"/\*.*?\*/", "", ABI_HEADER.read_text(), flags=re.S)
    structs = {}
    for name, body in re.findall(r"struct (alnair_\w+) \{(.*?)\};", text, flags=re.S):
        structs[name] = re.findall(r"(\w+)\s*(?:\[[^\]]*\])?\s*;", body)
    return structs


def probe_source() -> str:
    """A C program printing sizeof/offsetof of every field the Python layout names."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "alnair_shm.h"', "int main(void) {"]
    for cname, struct in layout.STRUCTS.items():
        lines.append(f'printf("{cname} . %zu %zu\\n", sizeof(struct {cname}), (size_t)0);')
        for field, _ in struct._fields_:
            lines.append(
                f'printf("{cname} {field} %zu %zu\\n", sizeof(((struct {cname} *)0)->{field}), offsetof(struct '
                f"{cname}, {field}));"
            )
    for const in CONSTANTS:
        lines.append(f'printf("const {const} %llu 0\\n", (unsigned long long)({const}));')
    lines.append("return 0; }")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[tuple[str, str], tuple[int, int]]:
    work = tmp_path_factory.mktemp("abi")
    (work / "probe.c").write_text(probe_source())
    subprocess.run(
        [
            "gcc",
            "-std=c11",
            "-Wall",
            "-Werror",
            "-I",
            str(ABI_HEADER.parent),
            "-o",
            str(work / "probe"),
            str(work / "probe.c"),
        ],
        check=True,
    )
    out = subprocess.run([str(work / "probe")], check=True, capture_output=True, text=True).stdout
    return {(s, f): (int(size), int(offset)) for s, f, size, offset in (line.split() for line in out.splitlines())}


@pytest.mark.parametrize("cname", list(layout.STRUCTS))
def test_struct_size_and_every_offset_match_c(c_layout, cname):
    struct = layout.STRUCTS[cname]
    assert c_layout[(cname, ".")][0] == ctypes.sizeof(struct)
    for field, _ in struct._fields_:
        descriptor = getattr(struct, field)
        assert c_layout[(cname, field)] == (descriptor.size, descriptor.offset), f"{cname}.{field}"


def test_python_names_every_field_of_the_header_in_order():
    assert {name: [f for f, _ in s._fields_] for name, s in layout.STRUCTS.items()} == header_fields()


def test_constants_match_header(c_layout):
    for const, value in CONSTANTS.items():
        assert c_layout[("const", const)][0] == value, const


def test_fixed_sizes_documented_in_the_abi():
    assert layout.HEADER_SIZE == 256
    assert layout.CUDA_DEVICE_SIZE == 128
    assert layout.CUDA_DEVICES_OFFSET == 32
    assert layout.SHM_MAGIC.to_bytes(8, "little") == b"ALNAIRSH"


def test_cuda_fields_are_appended_after_every_existing_offset():
    """The activity, per-device extensions and kernel table come after the 8224 bytes the first writers published, so
    every offset those writers and their readers know stays where it was (and abi_version stays 2)."""
    assert layout.CUDA_ACTIVITY_OFFSET == 32 + 64 * 128 == 8224
    assert layout.CUDA_DEVICES_EXT_OFFSET == 8224 + 64 and layout.CUDA_DEVICE_EXT_SIZE == 128
    assert layout.CUDA_DEVICES_MEMORY_OFFSET == 8288 + 64 * 128 == 16480 and layout.CUDA_DEVICE_MEMORY_SIZE == 64
    assert layout.CUDA_KERNELS_OFFSET == 16480 + 64 * 64 == 20576
    assert layout.CUDA_RECORD_SIZE == 20576 + 32 + 96 * 272 == 46720 <= layout.MAX_RECORD_SIZE
    assert [f for f, _ in layout.CudaRecord._fields_][:4] == ["device_count", "max_devices", "reserved", "devices"]
    assert layout.ABI_VERSION == 2
    assert layout.COPY_DIRECTION_NAMES[layout.COPY_DEVICE_TO_DEVICE] == "device_to_device"


def test_python_record_is_bounded_and_documented_size():
    assert ctypes.sizeof(layout.PythonRecord) == 4224
    assert layout.PythonRecord.counters.offset == 128
    assert ctypes.sizeof(layout.PythonCounter) == ctypes.sizeof(layout.PythonPhase) == 64


def test_segment_naming_matches_the_header_and_the_c_writer(start_writer):
    defines = dict(re.findall(r'#define (ALNAIR_SHM_\w+) "([^"]*)"', ABI_HEADER.read_text()))
    defines.update(re.findall(r'#define (ALNAIR_READER_MARKER) "([^"]*)"', ABI_HEADER.read_text()))
    assert (defines["ALNAIR_SHM_DEFAULT_DIR"], defines["ALNAIR_SHM_NAME_PREFIX"], defines["ALNAIR_READER_MARKER"]) == (
        naming.DEFAULT_DIR,
        naming.NAME_PREFIX,
        naming.READER_MARKER,
    )
    writer = start_writer()
    header = layout.ShmHeader.from_buffer_copy(writer.path.read_bytes())
    assert writer.path.name == naming.segment_name(
        layout.KIND_CUDA, header.pid_namespace_inode, writer.pid, header.start_time_ticks
    )
