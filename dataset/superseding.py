"""Marks the limited pairs made before a fix of the compute limit as superseded, so that the campaign measures them
again: the rows stay (the tables are the campaign's history), their status says they no longer count, and the
re-measured rows, appended under the same keys, win wherever the tables are read (sources._concat keeps the last).

    python -m alnair.dataset.superseding --out dataset/data/h200 --limited-before 781c624

A pair is superseded when its mode is limit-* and the fix is not an ancestor of either shared row's git_commit
(git merge-base --is-ancestor, in this checkout); its two shared rows go with it. Solo rows and time-sliced pairs
run without turns, so no fix of the limiter changes them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alnair.commandline import OneLineParser, fail

from .tables import PAIR_COLUMNS, Table, run_columns

PROG = "python -m alnair.dataset.superseding"
STATUS = "superseded"


def has_fix(commit: str, fix: str, repo: Path) -> bool:
    """Whether `commit` contains `fix`; ValueError when git does not know one of them (a shallow or foreign clone)."""
    found = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", fix, commit],
                           capture_output=True, text=True)
    if found.returncode not in (0, 1):
        raise ValueError(f"git cannot tell whether {commit} contains {fix}: {found.stderr.strip() or 'unknown commit'}")
    return found.returncode == 0


def supersede_limited(out: Path, fix: str, repo: Path) -> int:
    """Marks DIR's ok limit-* pairs made before `fix`, and their shared rows; returns how many pairs."""
    runs = Table(out / "runs.csv", run_columns(), "key")
    pairs = Table(out / "pairs.csv", PAIR_COLUMNS, "pair_key")
    shared = {row["key"]: row for row in runs.rows if row["role"] == "shared" and row["status"] == "ok"}
    stale = []
    for pair in pairs.rows:
        if pair["status"] != "ok" or not pair["mode"].startswith("limit-"):
            continue
        sides = [shared.get(pair[f"shared_{side}_key"]) for side in "ab"]
        if any(side is None for side in sides):
            raise ValueError(f"pair {pair['pair_key']}: its shared rows are not ok rows of {runs.path}")
        if not all(side["git_commit"] and has_fix(side["git_commit"], fix, repo) for side in sides):
            stale.append((pair, sides))
    for pair, sides in stale:
        for row in (pair, *sides):
            row["status"] = STATUS
    problems = [table.rewrite() for table in (runs, pairs)] if stale else []
    if any(problems):
        raise ValueError(f"the CSV files are marked, the Parquet ones are not: {next(filter(None, problems))}")
    return len(stale)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog=PROG, description="Marks a campaign's limited pairs made before a fix of the compute "
                           "limit as superseded; the next campaign block measures them again.")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="The campaign's directory.")
    parser.add_argument("--limited-before", required=True, metavar="COMMIT",
                        help="The commit that fixed the limit: limit-* pairs whose rows lack it are superseded.")
    parser.add_argument("--repo", type=Path, default=Path.cwd(), help="The git checkout that knows the commits (default: .).")
    options = parser.parse_args(argv)
    if not (options.out / "pairs.csv").is_file():
        fail(PROG, f"--out: no pairs.csv in {options.out}")
    try:
        count = supersede_limited(options.out, options.limited_before, options.repo)
    except ValueError as e:
        fail(PROG, str(e))
    print(f"{PROG}: {count} limited pairs made before {options.limited_before} are superseded "
          f"(they and their {2 * count} shared rows); the next campaign block measures them again")
    return 0


if __name__ == "__main__":
    sys.exit(main())
