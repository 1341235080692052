"""Marks pairs whose measurement a later finding made wrong as superseded, so that the campaign measures them again:
the rows stay (the tables are the campaign's history), their status says they no longer count, and the re-measured
rows, appended under the same keys, win wherever the tables are read (sources._concat keeps the last).

    python -m alnair_dataset.superseding --out dataset/data/h200 --limited-before 781c624 --baselines-elsewhere

--limited-before COMMIT: a limit-* or share-* pair (both run under the intercept's compute limiter: caps and shares
are debts of GPU time kept by the same code) whose shared rows' git_commit lacks the fix (git merge-base
--is-ancestor, in this checkout); solo runs and time-sliced pairs are never held back, so no fix of the limiter
changes them. The fixes so far: 781c624 (caps on GPU time; share-* pairs are all newer) and 9c0f5e9 (a share is
owed only while the GPU is saturated: the H100 rows' share-* pairs before it, 15 of them, were marked with
--out dataset/data/h100 --limited-before 9c0f5e9).
--baselines-elsewhere: a pair whose solo rows ran on other GPUs than its shared rows (the H200s lent for different
blocks differ by up to a third in one configuration's time, which a slowdown would take for interference).
A superseded pair's two shared rows go with it."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path

from alnair.commandline import OneLineParser, fail

from . import modes
from .tables import PAIR_COLUMNS, Table, row_gpus, run_columns

PROG = "python -m alnair_dataset.superseding"
STATUS = "superseded"


@functools.cache  # every row of a block names the same commit
def has_fix(commit: str, fix: str, repo: Path) -> bool:
    """Whether `commit` contains `fix`; ValueError when git does not know one of them (a shallow or foreign clone)."""
    found = subprocess.run(
        ["git", "-C", str(repo), "merge-base", "--is-ancestor", fix, commit], capture_output=True, text=True
    )
    if found.returncode not in (0, 1):
        raise ValueError(f"git cannot tell whether {commit} contains {fix}: {found.stderr.strip() or 'unknown commit'}")
    return found.returncode == 0


def supersede(out: Path, fix: str | None = None, repo: Path | None = None, baselines_elsewhere: bool = False) -> int:
    """Marks DIR's ok pairs that either rule finds wrong, and their shared rows; returns how many pairs."""
    runs = Table(out / "runs.csv", run_columns(), "key")
    pairs = Table(out / "pairs.csv", PAIR_COLUMNS, "pair_key")
    latest = {row["key"]: row for row in runs.rows if row["status"] == "ok"}  # a key measured again: its last row
    stale = []
    for pair in pairs.rows:
        if pair["status"] != "ok":
            continue
        shared, solo = ([latest.get(pair[f"{role}_{side}_key"]) for side in "ab"] for role in ("shared", "solo"))
        if None in shared or None in solo:
            raise ValueError(f"pair {pair['pair_key']}: its solo and shared rows are not all ok rows of {runs.path}")
        before_fix = (
            fix is not None
            and modes.limited(pair["mode"])
            and not all(side["git_commit"] and has_fix(side["git_commit"], fix, repo or Path.cwd()) for side in shared)
        )
        elsewhere = baselines_elsewhere and any(row_gpus(s) != row_gpus(h) for s, h in zip(solo, shared))
        if before_fix or elsewhere:
            stale.append((pair, shared))
    for pair, shared in stale:
        for row in (pair, *shared):
            row["status"] = STATUS
    problems = [table.rewrite() for table in (runs, pairs)] if stale else []
    if any(problems):
        raise ValueError(f"the CSV files are marked, the Parquet ones are not: {next(filter(None, problems))}")
    return len(stale)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description="Marks a campaign's pairs that a later finding made wrong as "
        "superseded; the next campaign block measures them again.",
    )
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="The campaign's directory.")
    parser.add_argument(
        "--limited-before",
        metavar="COMMIT",
        help="The commit that fixed the compute limiter: limit-* and share-* pairs whose shared rows "
        "lack it are superseded.",
    )
    parser.add_argument(
        "--baselines-elsewhere",
        action="store_true",
        help="Pairs whose solo rows ran on other GPUs than their shared rows are superseded.",
    )
    parser.add_argument(
        "--repo", type=Path, default=Path.cwd(), help="The git checkout that knows the commits (default: .)."
    )
    options = parser.parse_args(argv)
    if options.limited_before is None and not options.baselines_elsewhere:
        fail(PROG, "give --limited-before COMMIT, --baselines-elsewhere or both")
    if not (options.out / "pairs.csv").is_file():
        fail(PROG, f"--out: no pairs.csv in {options.out}")
    try:
        count = supersede(options.out, options.limited_before, options.repo, options.baselines_elsewhere)
    except ValueError as e:
        fail(PROG, str(e))
    print(
        f"{PROG}: {count} pairs are superseded (they and their {2 * count} shared rows); the next campaign blocks "
        "measure them again"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
