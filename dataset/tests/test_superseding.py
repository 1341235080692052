"""Pairs made before a fix of the compute limiter (capped and shared pairs alike), or against baselines from another
GPU, are marked superseded and planned again; the rest stay."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from alnair_dataset import campaign, superseding
from alnair_dataset.tables import PAIR_COLUMNS, Table, run_columns

PAIRS = ["dqn:dqn:10+dqn:dqn:10", "dqn:dqn:10+dqn:dqn:64"]
LIMITED = ["limit-50-50", "share-50-50"]  # the modes under the limiter: a cap and a share


def selection(mode: str) -> list[str]:
    """The campaign's flags: the two pairs, time-sliced and in `mode`."""
    return [
        "--device",
        "cpu",
        "--families",
        "dqn",
        "--pairs",
        *PAIRS,
        "--pairs-only",
        "--pair-modes",
        f"timeslice,{mode}",
    ]


def git(repo, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


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


def pair_items(out, mode: str) -> dict:
    options = campaign.build_parser().parse_args(["--out", str(out), *selection(mode)])
    configs = campaign.configurations(options)
    return {i.key: i for i in campaign.build_plan(options, configs, campaign.pair_specs(options, configs)) if i.pair}


def write_campaign(out, commits: dict, mode: str = "limit-50-50") -> dict:
    """Solo rows on GPU-1, and every pair time-sliced and in `mode`. (dqn 10 + dqn 10): time-sliced before the fix
    on GPU-1, in `mode` before the fix on GPU-1. (dqn 10 + dqn 64): time-sliced before the fix on GPU-2, in `mode`
    after the fix on GPU-1. Returns each pair key's (commit, GPU)."""
    runs = Table(out / "runs.csv", run_columns(), "key")
    pairs = Table(out / "pairs.csv", PAIR_COLUMNS, "pair_key")
    made = {}
    for key, item in pair_items(out, mode).items():
        a, b = item.pair
        for config in dict.fromkeys((a, b)):
            if runs.done(config.key) is None:
                runs.put(
                    {
                        "key": config.key,
                        "status": "ok",
                        "role": "solo",
                        "wall_seconds": 30.0,
                        "git_commit": commits["before"],
                        "gpu_uuids": "GPU-1",
                    }
                )
        later = b.run.batch_size == 64
        commit = commits["after" if later and item.mode == mode else "before"]
        gpu = "GPU-2" if later and item.mode == "timeslice" else "GPU-1"
        for side in "ab":
            runs.put(
                {
                    "key": f"{key}|{side}",
                    "status": "ok",
                    "role": "shared",
                    "pair_key": key,
                    "mode": item.mode,
                    "git_commit": commit,
                    "gpu_uuids": gpu,
                }
            )
        pairs.put(
            {
                "pair_key": key,
                "status": "ok",
                "mode": item.mode,
                "solo_a_key": a.key,
                "solo_b_key": b.key,
                "shared_a_key": f"{key}|a",
                "shared_b_key": f"{key}|b",
                "packing_saving": 0.1,
            }
        )
        made[key] = (commit, gpu)
    return made


def listed(out, mode: str = "limit-50-50") -> dict[str, str]:
    """`campaign --list`'s state of every pair step (ok, or to do)."""
    result = subprocess.run(
        [sys.executable, "-m", "alnair_dataset.campaign", "--out", str(out), *selection(mode), "--list"],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(line.split("\t")[:2] for line in result.stdout.splitlines() if line.count("|") == 2)


def supersede_and_check(out, args: list[str], stale: set[str], made: dict, mode: str = "limit-50-50") -> None:
    """Runs the command, then: exactly `stale` is to do again, superseded in both tables and their Parquet copies."""
    assert superseding.main(["--out", str(out), *args]) == 0
    state = listed(out, mode)
    assert {k for k, s in state.items() if s == "to do"} == stale
    pairs = {r["pair_key"]: r["status"] for r in Table(out / "pairs.csv", PAIR_COLUMNS, "pair_key").rows}
    assert pairs == {k: "superseded" if k in stale else "ok" for k in made}
    runs = Table(out / "runs.csv", run_columns(), "key").rows
    assert {r["key"] for r in runs if r["status"] == "superseded"} == {f"{k}|{side}" for k in stale for side in "ab"}
    assert pq.read_table(out / "pairs.parquet").column("status").to_pylist().count("superseded") == len(stale)


@pytest.mark.parametrize("mode", LIMITED)
def test_only_limited_pairs_without_the_fix_are_superseded_and_planned_again(tmp_path, history, mode):
    repo, commits = history
    made = write_campaign(tmp_path, commits, mode)
    assert set(listed(tmp_path, mode).values()) == {"ok"} and len(made) == 4
    stale = {k for k, (commit, _) in made.items() if k.startswith(f"{mode}|") and commit == commits["before"]}
    assert len(stale) == 1
    supersede_and_check(tmp_path, ["--limited-before", commits["fix"], "--repo", str(repo)], stale, made, mode)
    # a second pass finds nothing left to mark
    assert superseding.supersede(tmp_path, commits["fix"], repo) == 0


def test_pairs_whose_baselines_ran_on_another_gpu_are_superseded_and_planned_again(tmp_path, history):
    _, commits = history
    made = write_campaign(tmp_path, commits)
    stale = {k for k, (_, gpu) in made.items() if gpu != "GPU-1"}
    assert len(stale) == 1 and next(iter(stale)).startswith("timeslice|")
    supersede_and_check(tmp_path, ["--baselines-elsewhere"], stale, made)


def test_no_rule_exits_2_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        superseding.main(["--out", str(tmp_path)])
    assert stop.value.code == 2 and capsys.readouterr().err.count("\n") == 1


def test_a_commit_git_does_not_know_exits_2_with_one_line(tmp_path, history, capsys):
    repo, commits = history
    write_campaign(tmp_path, commits)
    with pytest.raises(SystemExit) as stop:
        superseding.main(["--out", str(tmp_path), "--limited-before", "0" * 40, "--repo", str(repo)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot tell whether" in err
    assert {r["status"] for r in Table(tmp_path / "pairs.csv", PAIR_COLUMNS, "pair_key").rows} == {"ok"}
