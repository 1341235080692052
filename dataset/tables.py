"""The campaign's rows on disk: runs.csv's and pairs.csv's columns with their meanings (the data card's column
dictionary reads them), and the CSV table a campaign rewrites in place as its jobs end."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from alnair.profiler import row_columns

from . import modes, process_sampler

CAMPAIGN_COLUMNS = [
    ("key", str, "the configuration's key: its settings, seed and repeat (solo) or its pair, mode and side (shared)"),
    (
        "status",
        str,
        "ok; failed (the job exited non-zero or left no record); incomplete (cut before its end); "
        "superseded (a shared row of a pair made wrong by a later finding: measured again under the same key)",
    ),
    (
        "role",
        str,
        "solo; shared (one side of a pair run together); baseline (a pair side's configuration run alone "
        "on the pair's GPU because its solo run was on another: not one of the dataset's solo runs)",
    ),
    ("pair_key", str, "shared rows: the pair's key in pairs.csv"),
    ("mode", str, f"shared rows: the pair's mode ({modes.names()})"),
    ("run_family", str, "workload family"),
    ("run_model", str, "model"),
    ("run_batch_size", int, "batch size"),
    ("run_steps", int, "steps the job was told to train"),
    ("run_precision", str, "fp32, bf16 or fp16"),
    ("run_workers", int, "DataLoader workers"),
    ("run_device", str, "cuda or cpu"),
    ("run_seed", int, "seed"),
    ("run_repeat", int, "repeat number"),
    (
        "compute_limit_percent",
        int,
        "ALNAIR_COMPUTE_LIMIT given to the job: a cap, at most this percent of the GPU's time (empty: none)",
    ),
    (
        "compute_share_percent",
        int,
        "ALNAIR_COMPUTE_SHARE given to the job: a share, at least this percent while the "
        "other side wants the GPU, idle time lent (empty: none)",
    ),
    ("started_at", float, "Unix seconds: the job's process started (as the campaign saw it)"),
    ("ended_at", float, "Unix seconds: the job's process was reaped"),
    ("wall_seconds", float, "ended_at - started_at"),
    ("exit_code", int, "the job's exit status (negative: killed by that signal)"),
    ("gpu_name", str, "nvidia-smi's GPU name (empty: none)"),
    ("nvidia_driver", str, "nvidia-smi's driver version"),
    ("cuda_version", str, "torch.version.cuda"),
    ("torch_version", str, "torch.__version__"),
    ("python_version", str, "the jobs' Python"),
    ("package_version", str, "the alnair package's version"),
    ("git_commit", str, "the checkout's git commit (ALNAIR_GIT_COMMIT, else git; empty: unknown)"),
    ("hostname", str, "the machine"),
]
PAIR_COLUMNS = [
    ("pair_key", str, "mode|solo key a|solo key b"),
    (
        "status",
        str,
        "ok; superseded (made wrong by a later finding, see superseding.py: measured again under the same key)",
    ),
    ("mode", str, modes.names()),
    ("compute_limit_a", int, "ALNAIR_COMPUTE_LIMIT of a (empty: none)"),
    ("compute_limit_b", int, "of b"),
    ("compute_share_a", int, "ALNAIR_COMPUTE_SHARE of a (empty: none)"),
    ("compute_share_b", int, "of b"),
    ("solo_a_key", str, "runs.csv key of a's solo (or baseline) row, on the GPU of the shared rows"),
    ("solo_b_key", str, "of b's solo row"),
    ("shared_a_key", str, "runs.csv key of a's shared row"),
    ("shared_b_key", str, "of b's shared row"),
    ("solo_a_seconds", float, "a's solo duration_seconds"),
    ("solo_b_seconds", float, "b's solo duration_seconds"),
    ("shared_a_seconds", float, "a's shared duration_seconds"),
    ("shared_b_seconds", float, "b's shared duration_seconds"),
    ("slowdown_a", float, "shared_a_seconds / solo_a_seconds - 1"),
    ("slowdown_b", float, "shared_b_seconds / solo_b_seconds - 1"),
    ("packing_saving", float, "1 - max(shared_a_seconds, shared_b_seconds) / (solo_a_seconds + solo_b_seconds)"),
    ("measured_at", float, "Unix seconds: the shared run ended"),
]


# a configuration without its seed and repeat: the runs.csv columns Config.settings gives, in its order
SETTINGS_COLUMNS = (
    "run_family",
    "run_model",
    "run_batch_size",
    "run_steps",
    "run_precision",
    "run_workers",
    "run_device",
)


def row_gpus(row: dict) -> set[str]:
    """The GPUs a runs.csv row's job used (its gpu_uuids); none for a CPU job (empty: None, or NaN from pandas)."""
    value = row.get("gpu_uuids")
    return set(filter(None, value.split(","))) if isinstance(value, str) else set()


def run_columns() -> list[tuple[str, type, str]]:
    """runs.csv's columns: the campaign's, `alnair profile`'s, then psutil's of the job (process_sampler)."""
    return CAMPAIGN_COLUMNS + row_columns() + process_sampler.COLUMNS


class Table:
    """A CSV of rows keyed by one column, rewritten whole and renamed into place on every change (a few hundred
    rows: milliseconds), so the file is never torn and a row can go from incomplete to ok in place."""

    def __init__(self, path: Path, columns: list[tuple[str, type, str]], id_column: str):
        self.path, self.columns, self.id_column = path, columns, id_column
        self.names = [name for name, _, _ in columns]
        self.rows: list[dict] = []
        if path.exists():
            with open(path, newline="") as f:
                self.rows = [self._typed(r) for r in csv.DictReader(f)]

    def _typed(self, raw: dict) -> dict:
        out = {}
        for name, kind, _ in self.columns:
            text = raw.get(name, "")
            out[name] = None if text in ("", None) else kind(float(text)) if kind is int else kind(text)
        return out

    def put(self, row: dict) -> None:
        """Replaces the row with the same id (the last one: the attempt in progress), or appends it."""
        full = {name: row.get(name) for name in self.names}
        for i in range(len(self.rows) - 1, -1, -1):
            if self.rows[i][self.id_column] == full[self.id_column] and self.rows[i].get("status") == "incomplete":
                self.rows[i] = full
                break
        else:
            self.rows.append(full)
        self._write()

    def _write(self) -> None:
        partial = self.path.with_suffix(".csv.partial")
        with open(partial, "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(self.names)
            for row in self.rows:
                writer.writerow(
                    [
                        "" if row[n] is None else repr(row[n]) if isinstance(row[n], float) else str(row[n])
                        for n in self.names
                    ]
                )
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, self.path)

    def rewrite(self) -> str | None:
        """Writes the rows as they are now, edited in place: the CSV, then the Parquet (see parquet())."""
        self._write()
        return self.parquet()

    def done(self, key: str, statuses=("ok", "failed")) -> dict | None:
        """The last finished row of a key, if any."""
        found = [r for r in self.rows if r[self.id_column] == key and r["status"] in statuses]
        return found[-1] if found else None

    def parquet(self) -> str | None:
        """Writes the rows next to the CSV as Parquet; the reason when it cannot (no pyarrow)."""
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            return "pyarrow is missing: pip install 'alnair-gpu[parquet]'"
        kinds = {str: pa.string(), int: pa.int64(), float: pa.float64()}
        schema = pa.schema([pa.field(name, kinds[kind]) for name, kind, _ in self.columns])
        pq.write_table(pa.Table.from_pylist(self.rows, schema=schema), self.path.with_suffix(".parquet"))
        return None
