"""Repeats of one configuration, compared two by two, split by whether they ran on the same GPU."""

from __future__ import annotations

import pandas as pd
import pytest

from alnair_dataset import repeatability

SETTINGS = {
    "run_family": "dqn",
    "run_model": "dqn",
    "run_batch_size": 10,
    "run_steps": 5700,
    "run_precision": "fp32",
    "run_workers": 0,
    "run_device": "cuda",
}


def run(key, started, seconds, gpu, status="ok", role="solo", **settings) -> dict:
    return {
        "key": key,
        "status": status,
        "role": role,
        "started_at": started,
        "gpu_uuids": gpu,
        **SETTINGS,
        **settings,
        "duration_seconds": seconds,
        "step_seconds_p50": seconds / 10_000,
        "time_to_first_step_seconds": 8.0,
        "gpu_util_ratio_mean": 0.04,
    }


def test_every_two_repeats_are_compared_in_the_order_they_ran():
    runs = pd.DataFrame(
        [
            run("a/r2", 3, 36.3, "GPU-2"),
            run("a/r0", 1, 30.0, "GPU-1"),
            run("a/r1", 2, 33.0, "GPU-2"),
            run("a/failed", 4, 99.0, "GPU-2", status="failed"),
            run("a/shared", 5, 60.0, "GPU-2", role="shared"),
            run("b/r0", 1, 20.0, "GPU-1", run_batch_size=64),  # alone: nothing to compare
            run("c/r0", 1, 20.0, "GPU-1", run_batch_size=32),
            # a pair's baseline: a repeat
            run("c/r0|baseline|GPU-2", 6, 25.0, "GPU-2", role="baseline", run_batch_size=32),
        ]
    )
    found = repeatability.differences(runs).set_index(["key", "other_key"])
    assert sorted(found.index) == [
        ("a/r0", "a/r1"),
        ("a/r0", "a/r2"),
        ("a/r1", "a/r2"),
        ("c/r0", "c/r0|baseline|GPU-2"),
    ]
    assert found.loc[("c/r0", "c/r0|baseline|GPU-2"), "duration_seconds"] == pytest.approx(0.25)
    found = found.drop(("c/r0", "c/r0|baseline|GPU-2"))
    assert found.loc[("a/r0", "a/r1"), "duration_seconds"] == pytest.approx(0.1)
    assert found.loc[("a/r0", "a/r2"), "step_seconds_p50"] == pytest.approx(0.21)
    assert found.loc[("a/r1", "a/r2"), "duration_seconds"] == pytest.approx(0.1)
    assert found.loc[("a/r0", "a/r1"), "time_to_first_step_seconds"] == 0
    assert list(found.same_gpu) == [False, False, True]
    table = repeatability.summary(found.reset_index()).set_index(["runs_on", "metric"])
    assert table.loc[("two GPUs", "duration_seconds")].tolist() == pytest.approx([2, 0.155, 0.199, 0.21])
    assert table.loc[("one GPU", "duration_seconds")].tolist() == pytest.approx([1, 0.1, 0.1, 0.1])


def test_a_machine_faster_for_every_configuration_shows_in_its_own_row():
    runs = pd.DataFrame(
        [
            run("a/r0", 1, 30.0, "GPU-1"),
            run("a/r1", 2, 33.0, "GPU-2"),
            run("a/r2", 3, 24.0, "GPU-3"),
            run("b/r0", 1, 20.0, "GPU-1", run_batch_size=64),
            run("b/r1", 3, 16.0, "GPU-3", run_batch_size=64),
            run("b/r2", 4, 17.0, "GPU-3", run_batch_size=64),
            run("c/r0", 1, 50.0, "GPU-1", run_batch_size=32),
            run("c/r1", 2, 50.0, "GPU-1", run_batch_size=32),  # one GPU
            run("a/shared", 5, 60.0, "GPU-3", role="shared"),  # shared runs are not runs alone
        ]
    )
    table = repeatability.machines(runs).set_index("gpu")
    assert list(table.index) == ["GPU-3", "GPU-1", "GPU-2"]  # fastest first
    # GPU-3: a 24 against median(30, 33); b 16 and 17 against 20
    assert table.loc["GPU-3", "runs"] == 3
    assert table.loc["GPU-3", "median"] == pytest.approx(16 / 20 - 1)
    assert table.loc["GPU-3", ["min", "max", "share_lower"]].tolist() == pytest.approx([24 / 31.5 - 1, 17 / 20 - 1, 1])
    # GPU-1: a 30 against median(33, 24); b 20 against median(16, 17); c has no run elsewhere
    assert table.loc["GPU-1", "runs"] == 2
    assert table.loc["GPU-1", "median"] == pytest.approx((30 / 28.5 - 1 + 20 / 16.5 - 1) / 2)
    assert table.loc["GPU-2", ["runs", "median", "share_lower"]].tolist() == pytest.approx([1, 33 / 27 - 1, 0])


def test_no_machine_table_without_a_configuration_on_two_gpus():
    runs = pd.DataFrame([run("a/r0", 1, 30.0, "GPU-1"), run("a/r1", 2, 33.0, "GPU-1")])
    assert repeatability.machines(runs).empty
