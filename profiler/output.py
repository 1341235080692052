"""Rows to CSV (the standard library) or Parquet (pyarrow, the `parquet` extra), with typed columns."""

from __future__ import annotations

import csv
import io
import sys

from .columns import columns
from .prometheus import ProfileError


def write(rows: list[dict], path: str, form: str) -> None:
    if form == "parquet":
        _parquet(rows, path)
    elif path == "-":
        _csv(rows, sys.stdout)
    else:
        with open(path, "w", newline="") as out:
            _csv(rows, out)


def _csv(rows: list[dict], out: io.TextIOBase) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([name for name, _, _ in columns()])
    for row in rows:
        writer.writerow(["" if row[name] is None else _text(row[name]) for name, _, _ in columns()])


def _text(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)  # repr: floats round-trip exactly


def _parquet(rows: list[dict], path: str) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ProfileError("Parquet needs pyarrow: pip install 'alnair-gpu[parquet]'") from None
    kinds = {str: pa.string(), int: pa.int64(), float: pa.float64()}
    schema = pa.schema([pa.field(name, kinds[kind]) for name, kind, _ in columns()])
    try:
        table = pa.Table.from_pylist(rows, schema=schema)
    except (OverflowError, pa.ArrowException) as e:  # a server's absurd value: a CPU count of 1e300
        raise ProfileError(f"a value does not fit its Parquet column: {e}") from None
    pq.write_table(table, path)
