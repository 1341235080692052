"""Where the dataset's committed files are, and how each table loads: the published CSV as-is, and the campaign's
runs and pairs (the H200 campaign's when dataset/data/h200/ has them, else the calibration blocks; the rows of another
GPU model, such as the H100 share campaign's in dataset/data/h100/, by name)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import tables

DATA = Path(__file__).resolve().parent / "data"
PUBLISHED = DATA / "published"
PUBLISHED_CSV = PUBLISHED / "alnair-open-data-gpu-sharing.csv"
PUBLISHED_COLUMNS = PUBLISHED / "alnair-open-data-columns.md"
H200 = DATA / "h200"
GPU_MODELS = ("h200", "h100")  # a folder of campaign rows each (tests/gpu/run_campaign.sh); the first is the campaign
CALIBRATION = DATA / "calibration"
CONVERTED = DATA / "published-schema"
ANALYSIS = DATA / "analysis"

# the published CSV's text columns; every other column is a number
PUBLISHED_TEXT = ("Model", "Dataset", "Run_Env")


def load_published(path: Path = PUBLISHED_CSV) -> pd.DataFrame:
    """The published table with its text stripped ("Resnet50 " is "Resnet50"); numbers as floats or ints."""
    table = pd.read_csv(path)
    for column in PUBLISHED_TEXT:
        table[column] = table[column].str.strip()
    return table


@dataclass(frozen=True)
class Campaign:
    """The campaign's rows: every attempt (runs) and every pair and mode (pairs), with where they came from."""

    runs: pd.DataFrame
    pairs: pd.DataFrame
    origin: str  # a GPU model's folder (GPU_MODELS) or "calibration"
    files: tuple[Path, ...]


def campaign_files(data: Path = DATA, origin: str | None = None) -> tuple[str, list[Path], list[Path]]:
    """(origin, runs files, pairs files): dataset/data/h200/{runs,pairs}.csv once the campaign has committed rows
    there, else (or with origin "calibration") every calibration block's files; with origin a GPU model, its folder's
    (none where it has no rows)."""
    if origin is None and (data / GPU_MODELS[0] / "runs.csv").is_file():
        origin = GPU_MODELS[0]
    if origin not in GPU_MODELS:
        calibration = data / "calibration"
        return "calibration", sorted(calibration.glob("*-runs.csv")), sorted(calibration.glob("*-pairs.csv"))
    runs, pairs = data / origin / "runs.csv", data / origin / "pairs.csv"
    return origin, [runs] if runs.is_file() else [], [pairs] if pairs.is_file() else []


def other_models(data: Path, main: str) -> list[str]:
    """The GPU models besides `main` (the campaign's origin) whose folders hold runs and pairs (the H100 share
    campaign's)."""
    return [m for m in GPU_MODELS if m != main and all((data / m / f).is_file() for f in ("runs.csv", "pairs.csv"))]


def _concat(files: list[Path], key: str) -> pd.DataFrame:
    frames = [pd.read_csv(f) for f in files if f.stat().st_size]  # an empty file (a table with no rows yet): none
    frames = [f for f in frames if not f.empty]
    if not frames:
        return pd.DataFrame()
    table = pd.concat(frames, ignore_index=True)
    # a block resumes from the rows before it: a key in two files is one attempt, and the later file's row wins
    return table.drop_duplicates(subset=key, keep="last").reset_index(drop=True)


def load_campaign(data: Path = DATA, origin: str | None = None) -> Campaign:
    origin, runs_files, pairs_files = campaign_files(data, origin)
    if not runs_files:
        where = f"{origin}/runs.csv" if origin in GPU_MODELS else "neither h200/runs.csv nor calibration/*-runs.csv"
        raise FileNotFoundError(f"no campaign rows under {data}: {where}")
    runs = _every_column(_concat(runs_files, "key"), tables.run_columns())
    pairs = _every_column(_concat(pairs_files, "pair_key"), tables.PAIR_COLUMNS)
    return Campaign(runs=runs, pairs=pairs, origin=origin, files=tuple(runs_files + pairs_files))


def _every_column(table: pd.DataFrame, columns: list[tuple[str, type, str]]) -> pd.DataFrame:
    """The table with the columns rows written before a column existed lack, empty (a table without rows as is)."""
    missing = [name for name, _, _ in columns if name not in table.columns] if len(table) else []
    return table.reindex(columns=[*table.columns, *missing])


def solo_runs(runs: pd.DataFrame, roles: tuple[str, ...] = ("solo",)) -> pd.DataFrame:
    """The solo attempts (or those of other `roles`) that ran to their end (status ok), in the order they started."""
    chosen = runs[runs["role"].isin(roles) & (runs["status"] == "ok")]
    return chosen.sort_values("started_at", kind="stable").reset_index(drop=True)


def command_line(module: str, description: str, out: str | None = None) -> argparse.ArgumentParser:
    """The data commands' shared flags: --data (the data folder) and, for those that write a folder of it, --out."""
    parser = argparse.ArgumentParser(prog=f"python -m alnair_dataset.{module}", description=description)
    parser.add_argument("--data", type=Path, default=DATA, help="the data folder (default: the committed one)")
    if out:
        parser.add_argument(
            "--out", type=Path, default=None, help=f"default: DATA/{out}; the folder's earlier outputs are replaced"
        )
    return parser
