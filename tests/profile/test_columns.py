"""The row's schema: unique names, and docs/dataset.md describes every column."""

from __future__ import annotations

from pathlib import Path

from alnair.profiler.columns import NAMES, STATISTICS, columns

DOC = (Path(__file__).resolve().parents[2] / "docs" / "dataset.md").read_text()


def test_columns_are_unique_and_typed():
    assert len(NAMES) == len(set(NAMES))
    assert {kind for _, kind, _ in columns()} == {str, int, float}


def test_the_docs_describe_every_column():
    statistics = {f"{prefix}_{stat}" for prefix, _ in STATISTICS for stat in ("min", "max", "mean", "range")}
    missing = [n for n in NAMES if n not in statistics and f"`{n}`" not in DOC]
    missing += [p for p, _ in STATISTICS if f"`{p}_min`, `_max`, `_mean`, `_range`" not in DOC]
    assert missing == []
