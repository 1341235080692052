"""The data card (dataset/data/datapackage.json): frictionless validates it (schemas and checksums), it lists every
committed data file with the sha256 of its bytes and a license, it is what `python -m alnair_dataset.card` makes
from the files now, and a changed file is caught."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from alnair_dataset import card, sources


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads((sources.DATA / card.CARD).read_text())


def test_frictionless_finds_the_card_valid():
    assert card.problems() == []


def test_every_data_file_is_listed_with_its_sha256(committed):
    listed = {r["path"]: r for r in committed["resources"]}
    files = {p.relative_to(sources.DATA).as_posix(): p for p in card.data_files()}
    assert set(listed) == set(files)
    assert "published/alnair-open-data-gpu-sharing.csv" in listed and "published-schema/runs.csv" in listed
    for path, resource in listed.items():
        assert resource["hash"] == "sha256:" + hashlib.sha256(files[path].read_bytes()).hexdigest(), path
        assert resource["licenses"][0]["name"] == "Apache-2.0"
    assert not any(p.startswith("analysis/") for p in listed)


def test_tables_carry_schemas_and_meanings(committed):
    by_path = {r["path"]: r for r in committed["resources"]}
    original = by_path["published/alnair-open-data-gpu-sharing.csv"]
    assert original["sources"][0]["path"].startswith("https://github.com/CentaurusInfra/alnair/")
    assert len(original["schema"]["fields"]) == 66
    converted = {f["name"]: f for f in by_path["published-schema/runs.csv"]["schema"]["fields"]}
    assert converted["MGUP"]["description"] == "`gpu_util_ratio_max` x 100"
    assert converted["BS"]["type"] == "integer"
    runs = next(r for p, r in by_path.items() if p.endswith("runs.csv") and not p.startswith("published"))
    fields = {f["name"]: f for f in runs["schema"]["fields"]}
    assert "description" in fields["duration_seconds"] and "description" in fields["run_batch_size"]
    copy = by_path["published-schema/runs.parquet"]  # a file naming its table: its schema is the CSV's
    assert copy["type"] == "file" and "schema" not in copy and "runs.csv" in copy["description"]
    assert committed["licenses"][0]["name"] == "Apache-2.0"


def test_the_card_is_current(committed):
    assert card.build() == committed, "the data changed: run python -m alnair_dataset.card"


def test_a_changed_or_unlisted_file_is_caught(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(sources.DATA, data, ignore=shutil.ignore_patterns("analysis"))  # valid: as the committed card
    with open(data / "published-schema" / "runs.csv", "a") as f:
        f.write("\n")
    (data / "published" / "extra.csv").write_text("a\n1\n")
    found = card.problems(data)
    assert found == ["not in the card: published/extra.csv"]
    (data / "published" / "extra.csv").unlink()
    found = card.problems(data)
    assert any(p.startswith("published-schema/runs.csv: sha256 is") for p in found), found
