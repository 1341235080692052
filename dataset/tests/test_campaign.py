"""The campaign runner end to end on the CPU: two configurations (two repeats of one, each with its seed) and a pair
run under alnair-run while the real exporter serves their records and a real Prometheus scrapes them; the rows are
checked against the runner's own wall times, a second campaign resumes past everything, and a budget either stops before
a job or ends one, its row marked incomplete."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from alnair_dataset import campaign, modes, superseding
from alnair_dataset.tables import Table, run_columns

# Some 13 s a job on this 2-CPU VM (1.05 ms a step after 2.5 s of start-up), so the interpreter's teardown after its
# last publish, which the runner's wall time holds and the record cannot see (torch's own: 0.5-0.7 s for a bare
# `python3 -c "import torch"`, 0.95 s seen here under load), stays under 10% of the wall time. 5,000 steps (7.7 s)
# passed only while the start time was read up to 1 s early from /proc/stat's btime, which hid the teardown.
STEPS = 10000
GRID = [
    "--device",
    "cpu",
    "--families",
    "dqn",
    "--batch-sizes",
    "10",
    "--precisions",
    "fp32",
    "--repeats",
    "2",
    "--steps",
    str(STEPS),
]
PAIR = ["--pairs", "dqn:dqn:10+dqn:dqn:10", "--pair-modes", "timeslice"]


def prometheus_binary() -> str:
    """A clear failure (never a skip) without Prometheus."""
    return shutil.which("prometheus") or pytest.fail("prometheus is not installed: .ci/run installs it")


def run_campaign(out, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "alnair_dataset.campaign",
            "--out",
            str(out),
            *args,
            "--prometheus-binary",
            prometheus_binary(),
        ],
        capture_output=True,
        text=True,
        timeout=400,
        # two jobs of one thread each share 2 cores
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def rows(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    out = tmp_path_factory.mktemp("campaign")
    result = run_campaign(out, *GRID, *PAIR)
    assert result.returncode == 0, result.stderr
    return out, result.stderr


def test_each_configuration_is_one_row_with_exact_steps_and_its_wall_time(measured):
    out, log = measured
    solo = [r for r in rows(out / "runs.csv") if r["role"] == "solo"]
    assert [(r["run_repeat"], r["status"]) for r in solo] == [("0", "ok"), ("1", "ok")], log
    for r in solo:
        assert float(r["steps"]) == int(r["run_steps"]) == STEPS
        assert float(r["samples"]) == STEPS * 10
        assert r["duration_source"] == "record" and r["exit_code"] == "0"
        wall = float(r["wall_seconds"])
        assert abs(float(r["duration_seconds"]) - wall) <= 0.1 * wall, (r["duration_seconds"], wall)
        assert r["key"] == f"dqn/dqn/b10/s{STEPS}/fp32/w0/cpu/seed{r['run_seed']}/r{r['run_repeat']}"
        assert r["python_version"] and r["torch_version"] and r["package_version"] and r["git_commit"]
        assert r["gpu_name"] == "" and r["compute_limit_percent"] == "" and r["pid"]
        # the interpreter the campaign runs jobs with (python3 in make test)
        assert r["comm"] == Path(sys.executable).name[:15]
        # psutil's samples of the job's process (every 0.5 s): torch's interpreter holds 100s of MiB, one thread or more
        assert int(r["proc_samples"]) >= 0.5 * wall / 0.5 and r["proc_processes_max"] == "1"
        assert 100 * 2**20 < float(r["proc_rss_bytes_max"]) < 4 * 2**30 and float(r["proc_rss_bytes_min"]) > 0
        assert float(r["proc_threads_max"]) >= 1 and float(r["proc_cpu_percent_max"]) > 10
        assert 0.3 * wall < float(r["proc_cpu_user_seconds"]) + float(r["proc_cpu_system_seconds"]) < 2.5 * wall
        assert float(r["sys_cpu_user_seconds"]) > 0 and 0 < float(r["disk_percent"]) <= 100
    assert len({r["run_seed"] for r in solo}) == 2
    typed = pq.read_table(out / "runs.parquet").to_pylist()
    assert [r["key"] for r in typed] == [r["key"] for r in rows(out / "runs.csv")]
    assert typed[0]["run_steps"] == STEPS and isinstance(typed[0]["duration_seconds"], float)


def test_a_pair_names_its_four_rows_and_follows_the_original_definitions(measured):
    out, log = measured
    by_key = {r["key"]: r for r in rows(out / "runs.csv")}
    [pair] = rows(out / "pairs.csv")
    assert pair["status"] == "ok" and pair["mode"] == "timeslice", log
    solo_a, solo_b = by_key[pair["solo_a_key"]], by_key[pair["solo_b_key"]]
    shared_a, shared_b = by_key[pair["shared_a_key"]], by_key[pair["shared_b_key"]]
    assert solo_a is solo_b and (solo_a["role"], solo_a["run_repeat"]) == ("solo", "0")  # a job beside a copy of itself
    assert {shared_a["role"], shared_b["role"], shared_a["status"], shared_b["status"]} == {"shared", "ok"}
    assert shared_a["pair_key"] == shared_b["pair_key"] == pair["pair_key"]
    assert float(shared_a["steps"]) == float(shared_b["steps"]) == STEPS
    sa, sb = float(solo_a["duration_seconds"]), float(solo_b["duration_seconds"])
    ta, tb = float(shared_a["duration_seconds"]), float(shared_b["duration_seconds"])
    assert float(pair["slowdown_a"]) == pytest.approx(ta / sa - 1)
    assert float(pair["slowdown_b"]) == pytest.approx(tb / sb - 1)
    assert float(pair["packing_saving"]) == pytest.approx(1 - max(ta, tb) / (sa + sb))
    # the two ran together, not one after the other: their runs overlap (times, not speeds: a loaded CI machine)
    start_a, end_a, start_b, end_b = (float(r[k]) for r in (shared_a, shared_b) for k in ("start_time", "end_time"))
    assert start_a < end_b and start_b < end_a
    shared_start = {float(shared_a["started_at"]), float(shared_b["started_at"])}
    assert max(shared_start) - min(shared_start) < 1


def test_a_second_campaign_skips_what_is_measured(measured):
    out, _ = measured
    before = (out / "runs.csv").read_text(), (out / "pairs.csv").read_text()
    result = run_campaign(out, *GRID, *PAIR)
    assert result.returncode == 0, result.stderr
    assert "0 ok, 0 failed, 0 incomplete, 3 already measured, 0 pairs" in result.stderr  # 2 configurations, 1 pair
    assert "exporter at" not in result.stderr  # nothing started
    assert ((out / "runs.csv").read_text(), (out / "pairs.csv").read_text()) == before


def moved_elsewhere(measured, to: Path, role: str) -> None:
    """The measured rows copied to `to`, those of the role as if they had run on another GPU."""
    out, _ = measured
    for name in ("runs.csv", "pairs.csv"):
        shutil.copy(out / name, to / name)
    table = Table(to / "runs.csv", run_columns(), "key")
    for row in table.rows:
        if row["role"] == role:
            row["gpu_uuids"] = "GPU-elsewhere"
    table.rewrite()


def test_a_pair_whose_solo_ran_on_another_gpu_measures_its_baseline_here(measured, tmp_path):
    """A pair's slowdown compares times on one GPU: when its solo row ran elsewhere, the pair runs a baseline first."""
    moved_elsewhere(measured, tmp_path, "solo")
    assert superseding.main(["--out", str(tmp_path), "--baselines-elsewhere"]) == 0
    result = run_campaign(tmp_path, *GRID, *PAIR)
    assert result.returncode == 0, result.stderr
    old, new = rows(tmp_path / "pairs.csv")
    assert (old["status"], new["status"], new["pair_key"]) == ("superseded", "ok", old["pair_key"]), result.stderr
    by_key = {r["key"]: r for r in rows(tmp_path / "runs.csv")}  # a key measured again: its last row
    baseline, shared = by_key[new["solo_a_key"]], by_key[new["shared_a_key"]]
    assert new["solo_a_key"] == new["solo_b_key"] == old["solo_a_key"] + "|baseline|cpu"
    assert (baseline["role"], baseline["status"], float(baseline["steps"])) == ("baseline", "ok", STEPS)
    assert shared["status"] == "ok" and float(shared["started_at"]) > float(baseline["ended_at"])
    assert float(new["slowdown_a"]) == pytest.approx(
        float(shared["duration_seconds"]) / float(baseline["duration_seconds"]) - 1
    )
    # the dataset's solo runs are still the two configurations' rows
    assert sum(r["role"] == "solo" for r in rows(tmp_path / "runs.csv")) == 2


def test_a_pair_measures_its_modes_on_one_gpu(measured, tmp_path):
    """A pair time-sliced on another GPU, whose other mode is still to measure, is time-sliced again here beside it;
    a pair whose modes all ran on one other GPU is held as it is."""
    moved_elsewhere(measured, tmp_path, "shared")
    held = run_campaign(tmp_path, *GRID, *PAIR)  # its one mode ran elsewhere: held
    assert held.returncode == 0 and "0 pairs" in held.stderr and "exporter at" not in held.stderr, held.stderr
    both = [*GRID, "--pairs", "dqn:dqn:10+dqn:dqn:10", "--pair-modes", "timeslice,share-50-50"]
    result = run_campaign(tmp_path, *both)
    assert result.returncode == 0 and "2 pairs" in result.stderr, result.stderr
    pairs = rows(tmp_path / "pairs.csv")
    assert [(p["mode"], p["status"]) for p in pairs] == [("timeslice", "ok")] * 2 + [("share-50-50", "ok")]
    runs = {r["key"]: r for r in rows(tmp_path / "runs.csv")}  # a key measured again: its last row
    assert {runs[p["shared_a_key"]]["gpu_uuids"] for p in pairs[1:]} == {""}  # both modes here (a CPU job: none)
    again = run_campaign(tmp_path, *both)
    assert again.returncode == 0 and "0 pairs" in again.stderr and "exporter at" not in again.stderr, again.stderr


def test_a_budget_too_small_for_the_next_job_starts_nothing(tmp_path):
    result = run_campaign(tmp_path, *GRID, "--budget-seconds", "20")
    assert result.returncode == 0, result.stderr
    assert "budget: stopping before dqn/dqn/b10/" in result.stderr and "stopped by the budget" in result.stderr
    assert not (tmp_path / "runs.csv").exists()


def test_a_job_outliving_the_budget_is_ended_and_its_row_marked_incomplete(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(campaign, "STACK_STARTUP", 0.0)
    monkeypatch.setattr(campaign, "PROFILE_RESERVE", 0.0)
    monkeypatch.setattr(campaign, "SHUTDOWN_RESERVE", 2.0)
    code = campaign.main(
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--families",
            "dqn",
            "--batch-sizes",
            "10",
            "--precisions",
            "fp32",
            "--steps",
            "100000",
            "--estimate-seconds",
            "1",
            "--budget-seconds",
            "14",
            "--prometheus-binary",
            prometheus_binary(),
        ]
    )
    assert code == 0
    assert "stopped by the budget: 0 ok, 0 failed, 1 incomplete" in capsys.readouterr().err
    [row] = rows(tmp_path / "runs.csv")
    assert (
        row["status"] == "incomplete"
        and row["exit_code"] == "-15"
        and row["steps"] == ""
        and float(row["wall_seconds"]) > 0
    )
    assert not (tmp_path / "pairs.csv").exists()
    campaign.main(
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--families",
            "dqn",
            "--batch-sizes",
            "10",
            "--precisions",
            "fp32",
            "--steps",
            "100000",
            "--list",
        ]
    )
    assert capsys.readouterr().out.split("\t")[1] == "to do"  # an incomplete row is run again


@pytest.mark.parametrize(
    "mode, side, variables",
    [
        ("timeslice", 0, {}),
        ("limit-50-50", 1, {"ALNAIR_COMPUTE_LIMIT": "50"}),
        ("limit-30-70", 0, {"ALNAIR_COMPUTE_LIMIT": "30"}),
        ("share-50-50", 0, {"ALNAIR_COMPUTE_SHARE": "50"}),
        ("share-30-70", 0, {"ALNAIR_COMPUTE_SHARE": "30"}),
        ("share-30-70", 1, {"ALNAIR_COMPUTE_SHARE": "70"}),
    ],
)
def test_a_pair_side_gets_its_modes_variable_and_never_the_other(mode, side, variables):
    # the campaign's own environment sets both: a job keeps neither unless its mode gives it
    inherited = {"PATH": "/usr/bin", "ALNAIR_COMPUTE_LIMIT": "10", "ALNAIR_COMPUTE_SHARE": "20"}
    env = campaign.job_environment(inherited, "/tmp/shm", modes.MODES[mode].side(side))
    assert {k: v for k, v in env.items() if k.startswith("ALNAIR_COMPUTE_")} == variables
    assert (env["PATH"], env["ALNAIR_SHM_DIR"], env["PYTHONUNBUFFERED"]) == ("/usr/bin", "/tmp/shm", "1")
    assert inherited["ALNAIR_COMPUTE_LIMIT"] == "10"  # the campaign's own is untouched


@pytest.mark.parametrize(
    "mode, settings",
    [
        ("timeslice", (None, None, None, None)),
        ("limit-30-70", (30, 70, None, None)),
        ("share-50-50", (None, None, 50, 50)),
        ("share-30-70", (None, None, 30, 70)),
    ],
)
def test_a_pair_row_records_each_sides_setting_of_its_mode(mode, settings):
    solo_a, solo_b = {"key": "a", "duration_seconds": 20.0}, {"key": "b", "duration_seconds": 30.0}
    shared_a, shared_b = {"key": "p|a", "duration_seconds": 25.0}, {"key": "p|b", "duration_seconds": 36.0}
    row = campaign.pair_row("p", mode, solo_a, solo_b, shared_a, shared_b)
    assert (
        tuple(row[k] for k in ("compute_limit_a", "compute_limit_b", "compute_share_a", "compute_share_b")) == settings
    )
    assert (row["mode"], row["slowdown_a"], row["slowdown_b"]) == (mode, 0.25, pytest.approx(0.2))
    assert row["packing_saving"] == pytest.approx(1 - 36 / 50)
