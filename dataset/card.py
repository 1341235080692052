"""The data card: dataset/data/datapackage.json, a Frictionless Data Package listing every committed data file with
its sha256, size, license, origin and (tables) schema with each column's meaning. `python -m alnair_dataset.card`
rewrites it; `--check` validates it with frictionless (schemas, checksums) and exits 1 when it is not valid."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

from alnair_dataset import published, sources, tables

CARD = "datapackage.json"
NOT_DATA = ("analysis",)  # figures and the report are made from the data by alnair_dataset.analyze, not data
# Tables are the CSVs. A Parquet copy of one is a file (size, sha256): frictionless reads Parquet through pandas,
# building a row's dict once per cell (rows x columns², 37 s for h200/runs.parquet's 358 x 161 in 2026-12)
TABLE = ".csv"
APACHE = {"name": "Apache-2.0", "path": "https://www.apache.org/licenses/LICENSE-2.0", "title": "Apache License 2.0"}
ORIGINAL = {
    "title": "CentaurusInfra/alnair, open-data/gpu-sharing (commit 185cbb5)",
    "path": "https://github.com/CentaurusInfra/alnair/tree/185cbb537abcbacfc48c04a891437a585e205766/open-data/gpu-sharing",
}
ALNAIR = {"title": "Alnair's dataset campaign (python -m alnair_dataset.campaign)", "path": "docs/dataset.md"}


def data_files(data: Path = sources.DATA) -> list[Path]:
    """Every committed data file under DATA, the card and the analyses' outputs aside, in a fixed order."""
    found = [p for p in data.rglob("*") if p.is_file() and p.name != CARD and not p.name.startswith(".")]
    return sorted((p for p in found if p.relative_to(data).parts[0] not in NOT_DATA), key=lambda p: p.as_posix())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _resource_name(relative: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", relative.lower().replace("/", "-").replace(".", "-"))


def _meanings(relative: str) -> dict[str, str]:
    """Column meanings from the code that writes each table (the column dictionaries of the project)."""
    name = Path(relative).name
    if relative.startswith("published-schema/") and name.startswith("runs."):
        return {c.name: c.how for c in published.COLUMNS}
    if name.endswith("pairs.csv"):
        return {n: m for n, _, m in tables.PAIR_COLUMNS}
    if name.endswith("runs.csv"):
        return {n: m for n, _, m in tables.run_columns()}
    if relative.startswith("published-schema/keys"):
        return {"ID": "the row's ID in runs.csv", "key": "the campaign's key of the run (runs.csv of its origin)"}
    return {}


def _resource(path: Path, data: Path) -> dict:
    from frictionless import Detector, Resource

    relative = path.relative_to(data).as_posix()
    is_published = relative.startswith("published/")
    if path.suffix == TABLE:
        # every row read to infer types: a column is an integer only if every value is one
        resource = Resource(
            path=relative, basepath=str(data), detector=Detector(sample_size=10**9, field_confidence=1.0)
        )
        resource.infer(stats=True)
        descriptor = resource.to_descriptor()
        for stat in ("stats", "fields", "rows"):  # the inference's counts: kept out of the card
            descriptor.pop(stat, None)
        meanings = _meanings(relative)
        for field in descriptor["schema"]["fields"]:
            if field["name"] in meanings:
                field["description"] = meanings[field["name"]]
    else:
        descriptor = {"path": relative, "type": "file", "format": path.suffix.lstrip(".") or "txt"}
        if path.suffix == ".parquet" and path.with_suffix(TABLE).is_file():
            descriptor["description"] = f"the rows of {path.with_suffix(TABLE).name} with their types (Apache Parquet)"
    descriptor["name"] = _resource_name(relative)
    descriptor["hash"] = "sha256:" + sha256(path)
    descriptor["bytes"] = path.stat().st_size
    descriptor["sources"] = [ORIGINAL if is_published else ALNAIR]
    descriptor["licenses"] = [APACHE]
    return {k: descriptor[k] for k in sorted(descriptor, key=_order)}


_KEY_ORDER = [
    "name",
    "type",
    "path",
    "scheme",
    "format",
    "mediatype",
    "encoding",
    "bytes",
    "hash",
    "sources",
    "licenses",
    "dialect",
    "schema",
]


def _order(key: str) -> int:
    return _KEY_ORDER.index(key) if key in _KEY_ORDER else len(_KEY_ORDER)


def build(data: Path = sources.DATA) -> dict:
    origin, _, _ = sources.campaign_files(data)
    return {
        "name": "alnair-workload-dataset",
        "title": "Alnair: AI workloads' resource use, solo and co-located on one GPU",
        "description": (
            "The original project's published dataset (published/, 49 runs x 66 columns, TensorFlow on a Colab P100) "
            "as-is, and Alnair's campaign of PyTorch workloads measured by the Alnair exporter and Prometheus "
            f"(now: the {origin} rows): the rich runs and pairs tables, and the runs in the published 66-column "
            "schema (published-schema/). Column dictionaries: published/alnair-open-data-columns.md, "
            "published-schema/columns.md, docs/dataset.md (the rich table)."
        ),
        "homepage": "https://github.com/CentaurusInfra/alnair",
        "licenses": [APACHE],
        "sources": [ORIGINAL, ALNAIR],
        "resources": [_resource(p, data) for p in data_files(data)],
    }


def write(data: Path = sources.DATA) -> Path:
    path = data / CARD
    path.write_text(json.dumps(build(data), indent=1) + "\n")
    return path


def problems(data: Path = sources.DATA) -> list[str]:
    """What is wrong with the committed card: frictionless's errors (schema, row or checksum), and data files it
    does not list or lists but are gone."""
    from frictionless import Package

    card = data / CARD
    if not card.is_file():
        return [f"{card} is missing: run python -m alnair_dataset.card"]
    descriptor = json.loads(card.read_text())
    listed = {r["path"] for r in descriptor["resources"]}
    present = {p.relative_to(data).as_posix() for p in data_files(data)}
    found = [f"not in the card: {p}" for p in sorted(present - listed)]
    found += [f"in the card but missing: {p}" for p in sorted(listed - present)]
    if found:
        return found
    # a changed file in one line, before frictionless's errors
    found = [
        f"{r['path']}: sha256 is {sha256(data / r['path'])}, the card says {r['hash']}"
        for r in descriptor["resources"]
        if r["hash"] != "sha256:" + sha256(data / r["path"])
    ]
    report = Package(str(card)).validate()
    return found + [
        f"{task.name}: {' '.join(error)}" for task in report.tasks for error in task.flatten(["type", "note"])
    ]


def main(argv: list[str] | None = None) -> int:
    parser = sources.command_line("card", __doc__)
    parser.add_argument("--check", action="store_true", help="validate the committed card instead of rewriting it")
    args = parser.parse_args(argv)
    if args.check:
        found = problems(args.data)
        for line in found:
            print(line, file=sys.stderr)
        print("valid" if not found else f"{len(found)} problems")
        return 1 if found else 0
    path = write(args.data)
    print(f"{path}: {len(json.loads(path.read_text())['resources'])} resources")
    return 0


if __name__ == "__main__":
    sys.exit(main())
