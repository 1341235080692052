"""The field table (abi/fields.py) against the header, field by field: every field of every struct a reader sees is
served by a line or listed as not served, with a reason; a line names a number field that exists. The check runs on
the package and, to show it catches drift, on scratch copies with one field or one line changed."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
from pathlib import Path

import pytest

from alnair.abi import HEADER, fields, layout

ABI = HEADER.parent
DOCS = Path(__file__).resolve().parents[2] / "docs" / "shm-abi.md"
NUMBERS = ("uint8_t", "int32_t", "uint32_t", "uint64_t")
RESERVED = re.compile(r"reserved\d*")


def leaf_fields(layout, fields) -> list[tuple[str, str]]:
    """(struct, field) of every member a reader sees that is not a nested struct, nor reserved space."""
    return [
        (struct, m.name)
        for struct, members in layout.DECLARATIONS.structs.items()
        if struct not in fields.WRITERS_ONLY
        for m in members
        if not m.is_struct and not RESERVED.fullmatch(m.name)
    ]


def line_problems(layout, fields, line) -> list[str]:
    members = {m.name: m for m in layout.DECLARATIONS.structs.get(line.struct, [])}
    where = f"{line.struct}.{line.field} ({line.family})"
    problems = [] if line.struct in fields.LABELS else [f"{where}: no labels for struct {line.struct}"]
    for name in (line.field, line.unit) if isinstance(line.unit, str) else (line.field,):
        member = members.get(name)
        if member is None:
            problems.append(f"{where}: the header has no {line.struct}.{name}")
        elif member.type not in NUMBERS or member.dims:
            problems.append(f"{where}: {line.struct}.{name} is {member.type}{list(member.dims) or ''}, not a number")
    if line.type not in ("counter", "gauge"):
        problems.append(f"{where}: type {line.type!r}")
    return problems


def table_problems(layout, fields) -> list[str]:
    """What is wrong between the header `layout` was built from and the table `fields` holds."""
    problems = [problem for line in fields.EXPORTED for problem in line_problems(layout, fields, line)]
    problems += [
        f"WRITERS_ONLY: the header has no struct {struct}"
        for struct in fields.WRITERS_ONLY
        if struct not in layout.DECLARATIONS.structs
    ]
    served = [(line.struct, line.field) for line in fields.EXPORTED]
    seen_lines, seen_families = set(), set()
    for line in fields.EXPORTED:
        if (line.struct, line.field, line.bit) in seen_lines or line.family in seen_families:
            problems.append(f"{line.struct}.{line.field} ({line.family}): served twice")
        seen_lines.add((line.struct, line.field, line.bit))
        seen_families.add(line.family)
    leaves = leaf_fields(layout, fields)
    for struct, field in leaves:
        if ((struct, field) in served) == ((struct, field) in fields.NOT_EXPORTED):
            how = "both served by a line and" if (struct, field) in served else "neither served by a line nor"
            problems.append(f"{struct}.{field}: {how} listed in NOT_EXPORTED")
    problems += [
        f"{struct}.{field}: listed in NOT_EXPORTED, but the header has no such field"
        for struct, field in fields.NOT_EXPORTED
        if (struct, field) not in leaves
    ]
    return problems


def test_every_field_is_served_by_one_line_or_listed_with_a_reason():
    assert table_problems(layout, fields) == []
    assert all(reason.strip() for reason in fields.NOT_EXPORTED.values())


def test_the_abi_doc_names_every_field():
    named = {word for span in re.findall(r"`([^`]+)`", DOCS.read_text()) for word in re.findall(r"\w+", span)}
    assert [f"{struct}.{field}" for struct, field in leaf_fields(layout, fields) if field not in named] == []


@pytest.fixture
def scratch_abi(tmp_path, monkeypatch):
    """A copy of abi/ to change, imported as its own package: `change(file, old, new)`, then `load()`."""
    copy = tmp_path / "scratch_abi"
    shutil.copytree(ABI, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.syspath_prepend(str(tmp_path))

    class Scratch:
        @staticmethod
        def change(file: str, old: str, new: str) -> None:
            text = (copy / file).read_text()
            assert old in text, f"{old!r} is not in {file}"
            (copy / file).write_text(text.replace(old, new, 1))

        @staticmethod
        def load():
            return importlib.import_module("scratch_abi.layout"), importlib.import_module("scratch_abi.fields")

    yield Scratch
    for name in [n for n in sys.modules if n == "scratch_abi" or n.startswith("scratch_abi.")]:
        del sys.modules[name]


def test_an_unchanged_copy_passes(scratch_abi):
    assert table_problems(*scratch_abi.load()) == []


POOL_USED_LINE = re.search(
    r'    Exported\("alnair_cuda_device_memory", "pool_used_bytes",.*?\),\n', (ABI / "fields.py").read_text(), re.S
).group()


@pytest.mark.parametrize(
    "file, old, new, problem",
    [
        (
            "alnair_shm.h",
            "uint64_t reserved[6];\n};",
            "uint64_t busy_spans;\n    uint64_t reserved[5];\n};",
            "alnair_cuda_device_ext.busy_spans: neither served by a line nor listed in NOT_EXPORTED",
        ),
        (
            "alnair_shm.h",
            "uint64_t steps; ",
            "char steps[8]; ",
            "alnair_python_record.steps (alnair_python_steps): alnair_python_record.steps is char[8], not a number",
        ),
        (
            "alnair_shm.h",
            "uint64_t peak_bytes; ",
            "uint64_t peak; ",
            "alnair_cuda_device.peak_bytes (alnair_cuda_memory_peak_bytes): the header has no "
            "alnair_cuda_device.peak_bytes",
        ),
        (
            "alnair_shm.h",
            "uint64_t compute_period_ns; ",
            "uint8_t compute_period_ns[8]; ",
            "alnair_cuda_device.compute_quota_ns (alnair_cuda_compute_quota_ratio): "
            "alnair_cuda_device.compute_period_ns is uint8_t[8], not a number",
        ),
        (
            "fields.py",
            POOL_USED_LINE,
            "",
            "alnair_cuda_device_memory.pool_used_bytes: neither served by a line nor listed in NOT_EXPORTED",
        ),
        (
            "fields.py",
            '("alnair_cuda_kernel", "name"): "the kernel label",',
            "",
            "alnair_cuda_kernel.name: neither served by a line nor listed in NOT_EXPORTED",
        ),
    ],
    ids=[
        "a field without a line",
        "a served field made text",
        "a served field renamed",
        "a unit field made an array",
        "a line removed",
        "a reason removed",
    ],
)
def test_a_copy_with_one_field_or_line_changed_fails_naming_it(scratch_abi, file, old, new, problem):
    scratch_abi.change(file, old, new)
    assert problem in table_problems(*scratch_abi.load())


def test_a_copy_whose_header_leaves_the_subset_does_not_import(scratch_abi):
    scratch_abi.change("alnair_shm.h", "uint64_t seq; ", "double seq; ")
    line = next(n for n, text in enumerate(HEADER.read_text().splitlines(), 1) if "uint64_t seq; " in text)
    with pytest.raises(ValueError, match=rf"alnair_shm.h:{line}: unsupported type 'double'"):
        scratch_abi.load()
