"""docs/dataset.md's data section opens with the superseded rows and the pandas line that drops them; the line, run
as written on the committed campaign files, leaves no superseded row and one row per key, the rows
alnair_dataset.sources.load_campaign counts."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from alnair_dataset import sources

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "dataset.md"


def data_section() -> str:
    return re.search(r"^## The data\n(.*?)^## ", DOC.read_text(), re.S | re.M).group(1)


def pandas_lines() -> str:
    [code] = re.findall(r"^```python\n(.*?)^```", data_section(), re.S | re.M)
    return code


def test_the_data_section_opens_with_the_superseded_rows():
    first_paragraph = data_section().strip().split("\n\n")[0]
    assert "superseded" in first_paragraph.lower() and "runs.csv" in first_paragraph
    assert data_section().index("```python") < data_section().index("```sh")  # before the commands


@pytest.mark.parametrize("table, key", [("runs", "key"), ("pairs", "pair_key")])
def test_the_documented_filter_leaves_one_counted_row_per_key(table, key, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = pandas_lines().replace("runs.csv", f"{table}.csv")
    scope = {"pd": pd}
    exec(code, scope)
    rows = scope["runs"]
    read = pd.read_csv(ROOT / "dataset" / "data" / "h200" / f"{table}.csv")
    assert (read["status"] == "superseded").any()  # the files have some: the filter is tested on them
    assert "superseded" not in set(rows["status"]) and rows[key].is_unique
    loaded = getattr(sources.load_campaign(), table)
    assert sorted(rows[key]) == sorted(loaded.loc[loaded["status"] != "superseded", key])
