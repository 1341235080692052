"""Limited pairs made before a fix of the compute limit are marked superseded and planned again; the rest stay."""
from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from alnair.dataset import campaign, superseding
from alnair.dataset.tables import PAIR_COLUMNS, Table, run_columns

PAIRS = ["dqn:dqn:10+dqn:dqn:10", "dqn:dqn:10+dqn:dqn:64"]
SELECTION = ["--device", "cpu", "--families", "dqn", "--pairs", *PAIRS, "--pairs-only",
             "--pair-modes", "timeslice,limit-50-50"]


def git(repo, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture
def history(tmp_path):
    """A checkout with three commits in a line: before the fix, the fix, after it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commits = []
    for name in ("before", "fix", "after"):
        git(repo, "commit", "-q", "--allow-empty", "-m", name)
        commits.append(git(repo, "rev-parse", "HEAD"))
    return repo, dict(zip(("before", "fix", "after"), commits))


def pair_items(out) -> dict:
    options = campaign.build_parser().parse_args(["--out", str(out), *SELECTION])
    configs = campaign.configurations(options)
    return {i.key: i for i in campaign.build_plan(options, configs, campaign.pair_specs(options, configs)) if i.pair}


def write_campaign(out, commits: dict) -> dict:
    """Solo rows, and every pair in both modes: (dqn 10 + dqn 10) at 50/50 before the fix, (dqn 10 + dqn 64) at 50/50
    after it, both time-sliced before it. Returns each pair key's commit."""
    runs = Table(out / "runs.csv", run_columns(), "key")
    pairs = Table(out / "pairs.csv", PAIR_COLUMNS, "pair_key")
    made = {}
    for key, item in pair_items(out).items():
        a, b = item.pair
        for config in dict.fromkeys((a, b)):
            if runs.done(config.key) is None:
                runs.put({"key": config.key, "status": "ok", "role": "solo", "wall_seconds": 30.0,
                          "git_commit": commits["before"]})
        commit = commits["after" if item.mode == "limit-50-50" and b.run.batch_size == 64 else "before"]
        for side in "ab":
            runs.put({"key": f"{key}|{side}", "status": "ok", "role": "shared", "pair_key": key, "mode": item.mode,
                      "git_commit": commit})
        pairs.put({"pair_key": key, "status": "ok", "mode": item.mode, "solo_a_key": a.key, "solo_b_key": b.key,
                   "shared_a_key": f"{key}|a", "shared_b_key": f"{key}|b", "packing_saving": 0.1})
        made[key] = commit
    return made


def listed(out) -> dict[str, str]:
    """`campaign --list`'s state of every pair step (ok, or to do)."""
    result = subprocess.run([sys.executable, "-m", "alnair.dataset.campaign", "--out", str(out), *SELECTION, "--list"],
                            capture_output=True, text=True, check=True)
    return dict(line.split("\t")[:2] for line in result.stdout.splitlines() if line.count("|") == 2)


def test_only_limited_pairs_without_the_fix_are_superseded_and_planned_again(tmp_path, history):
    repo, commits = history
    made = write_campaign(tmp_path, commits)
    assert set(listed(tmp_path).values()) == {"ok"} and len(made) == 4
    assert superseding.main(["--out", str(tmp_path), "--limited-before", commits["fix"], "--repo", str(repo)]) == 0
    stale = {k for k, commit in made.items() if k.startswith("limit-") and commit == commits["before"]}
    assert len(stale) == 1
    state = listed(tmp_path)
    assert {k for k, s in state.items() if s == "to do"} == stale
    pairs = {r["pair_key"]: r["status"] for r in Table(tmp_path / "pairs.csv", PAIR_COLUMNS, "pair_key").rows}
    assert pairs == {k: "superseded" if k in stale else "ok" for k in made}
    runs = Table(tmp_path / "runs.csv", run_columns(), "key").rows
    assert {r["key"] for r in runs if r["status"] == "superseded"} == {f"{k}|{side}" for k in stale for side in "ab"}
    assert pq.read_table(tmp_path / "pairs.parquet").column("status").to_pylist().count("superseded") == 1
    # a second pass finds nothing left to mark
    assert superseding.supersede_limited(tmp_path, commits["fix"], repo) == 0


def test_a_commit_git_does_not_know_exits_2_with_one_line(tmp_path, history, capsys):
    repo, commits = history
    write_campaign(tmp_path, commits)
    with pytest.raises(SystemExit) as stop:
        superseding.main(["--out", str(tmp_path), "--limited-before", "0" * 40, "--repo", str(repo)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot tell whether" in err
    assert {r["status"] for r in Table(tmp_path / "pairs.csv", PAIR_COLUMNS, "pair_key").rows} == {"ok"}
