"""Co-location: the pairs table's slowdowns and savings follow from its runs' durations (the original's definitions);
with the few calibration pairs no model is fitted and the analysis says why; on pairs whose slowdown depends on the
other job's GPU use, the model cross-validated by pair predicts it and ranks the pairs by saving."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from alnair_dataset import analyze, interference, modes, sources


def test_definitions_are_the_originals():
    # the dictionary's example: slowdowns of 24.7% and 4.1% and a saving of 31.6% fit solo times in this ratio
    ta, tb = 1.0, 0.7
    assert interference.slowdown(ta * 1.247, ta) == pytest.approx(0.247)
    saving = interference.packing_saving(ta, tb, ta * 1.247, tb * 1.041)
    assert saving == pytest.approx(1 - 1.247 / 1.7)


@pytest.mark.parametrize(
    "limit, share, given",
    [
        (float("nan"), float("nan"), (1.0, 0.0)),  # time-slicing: all of it, nothing promised
        (30, None, (0.3, 0.0)),  # a cap: at most 30%
        (None, 70, (1.0, 0.7)),  # a share: at least 70% while the other wants it, idle time lent
    ],
)
def test_the_share_of_the_gpu_a_side_was_given(limit, share, given):
    assert interference.compute_share(limit, share) == given


def test_calibration_pairs_follow_from_their_runs():
    campaign = sources.load_campaign(origin="calibration")
    measured = interference.measured_pairs(campaign.runs, campaign.pairs)
    assert len(measured) == len(campaign.pairs[campaign.pairs.status == "ok"])
    for side in ("a", "b"):
        assert np.allclose(measured[f"slowdown_{side}"], measured[f"slowdown_{side}_recomputed"])
    assert np.allclose(measured.packing_saving, measured.packing_saving_recomputed)


def test_too_few_pairs_fit_no_model_and_say_so():
    campaign = sources.load_campaign(origin="calibration")  # 2 distinct pairs
    result = interference.analyse(campaign.runs, campaign.pairs)
    assert not result.fitted and result.cv.empty
    assert result.reason.startswith(f"{result.pairs} distinct measured pairs")
    assert result.sides == 2 * len(result.measured)


def synthetic_campaign(jobs: int = 7, seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Solo runs with random profiles, and every pair of them (time-sliced) whose slowdown is the other's GPU use."""
    generator = np.random.default_rng(seed)
    solo = pd.DataFrame(
        {
            "key": [f"job/m{i}/b1/s1/fp32/w0/cuda/seed{i}/r0" for i in range(jobs)],
            "role": "solo",
            "status": "ok",
            "run_repeat": 0,
            "duration_seconds": generator.uniform(10, 30, jobs),
        }
    )
    for column in interference.PROFILE:
        solo[column] = generator.uniform(0, 1, jobs)
    shared, pairs = [], []
    for i in range(jobs):
        for j in range(i + 1, jobs):
            a, b = solo.iloc[i], solo.iloc[j]
            pair_key = f"timeslice|{a.key}|{b.key}"
            ta = a.duration_seconds * (1 + 0.8 * b.gpu_util_ratio_mean)
            tb = b.duration_seconds * (1 + 0.8 * a.gpu_util_ratio_mean)
            shared += [
                {"key": f"{pair_key}|a", "role": "shared", "status": "ok", "duration_seconds": ta},
                {"key": f"{pair_key}|b", "role": "shared", "status": "ok", "duration_seconds": tb},
            ]
            pairs.append(
                {
                    "pair_key": pair_key,
                    "status": "ok",
                    "mode": "timeslice",
                    "compute_limit_a": np.nan,
                    "compute_limit_b": np.nan,
                    "solo_a_key": a.key,
                    "solo_b_key": b.key,
                    "shared_a_key": f"{pair_key}|a",
                    "shared_b_key": f"{pair_key}|b",
                    "solo_a_seconds": a.duration_seconds,
                    "solo_b_seconds": b.duration_seconds,
                    "shared_a_seconds": ta,
                    "shared_b_seconds": tb,
                    "slowdown_a": ta / a.duration_seconds - 1,
                    "slowdown_b": tb / b.duration_seconds - 1,
                    "packing_saving": 1 - max(ta, tb) / (a.duration_seconds + b.duration_seconds),
                }
            )
    return pd.concat([solo, pd.DataFrame(shared)], ignore_index=True), pd.DataFrame(pairs)


def test_a_model_learns_the_slowdown_and_ranks_pairs_by_saving():
    runs, pairs = synthetic_campaign()
    result = interference.analyse(runs, pairs)
    assert result.fitted and result.pairs == 21 and result.sides == 42
    cv = result.cv.set_index("model")
    baseline = cv.loc["mean (baseline)", "mae"]
    assert cv.loc[result.best, "mae"] < 0.3 * baseline  # slowdown is linear in one feature: Ridge finds it
    assert result.best == "ridge"
    assert result.ranking_error["spearman"] > 0.9
    assert result.ranking_error["saving_mae"] < 0.02
    # every pair of two of the seven was measured: the candidates left are each job beside a copy of itself
    assert len(result.candidates) == 7 and (result.candidates.a == result.candidates.b).all()
    assert list(result.ranked.predicted_saving) == sorted(result.ranked.predicted_saving, reverse=True)


def test_unmeasured_pairs_are_ranked_as_candidates():
    runs, pairs = synthetic_campaign()
    keep = pairs.iloc[:-4]  # four pairs not measured: they and the jobs' pairs with themselves are the candidates
    result = interference.analyse(runs, keep, top=100)
    assert len(result.candidates) == 4 + 7
    best = result.candidates.iloc[0]
    lows = runs[runs.role == "solo"].set_index("key").gpu_util_ratio_mean
    # the best predicted saving pairs jobs that use the GPU little
    assert lows[best.a] + lows[best.b] < lows.median() * 2


def test_a_pair_measured_against_baseline_rows_is_one_pair_of_its_configurations():
    # the campaign's baseline rows (KEY|baseline|GPU: the solo run was on another GPU) stand in for the solo rows
    runs, pairs = synthetic_campaign()
    first = pairs.index[0]
    for side in ("a", "b"):
        solo = runs[runs.key == pairs.at[first, f"solo_{side}_key"]].assign(role="baseline", run_repeat=np.nan)
        solo["key"] = solo.key + "|baseline|GPU-1"
        runs = pd.concat([runs, solo], ignore_index=True)
        pairs.at[first, f"solo_{side}_key"] = solo.key.iloc[0]
    result = interference.analyse(runs, pairs)
    configurations = pairs.pair_key[first].split("|")[1:3]
    assert result.pairs == 21 and result.measured.at[first, "group"] == "+".join(sorted(configurations))
    # so it is no candidate: the candidates are still each job beside a copy of itself
    assert len(result.candidates) == 7 and (result.candidates.a == result.candidates.b).all()


# A small campaign in every kind of sharing: x, y and z alone take 10, 20 and 40 s; each pair and mode's shared
# seconds (a, b) and the GPU of its shared rows. Savings: P1 (x+y) timeslice 0.2, limit-50-50 2/15, share-50-50 0.3,
# share-30-70 0.25; P2 (x+z) timeslice 0.1 (on another GPU), share-50-50 0.12; P3 (y+z) timeslice 0.3.
SOLO = {"x": 10.0, "y": 20.0, "z": 40.0}
SHARED = {
    ("timeslice", "x", "y"): (12.0, 24.0, "GPU-1"),
    ("limit-50-50", "x", "y"): (20.0, 26.0, "GPU-1"),
    ("share-50-50", "x", "y"): (15.0, 21.0, "GPU-1"),
    ("share-30-70", "x", "y"): (18.0, 22.5, "GPU-1"),
    ("timeslice", "x", "z"): (15.0, 45.0, "GPU-2"),
    ("share-50-50", "x", "z"): (11.0, 44.0, "GPU-1"),
    ("timeslice", "y", "z"): (30.0, 42.0, "GPU-1"),
}


@pytest.fixture
def every_kind() -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = [
        {"key": k, "role": "solo", "status": "ok", "duration_seconds": v, "gpu_uuids": "GPU-1"} for k, v in SOLO.items()
    ]
    pairs = []
    for (mode, a, b), (ta, tb, gpu) in SHARED.items():
        key = f"{mode}|{a}|{b}"
        runs += [
            {"key": f"{key}|{side}", "role": "shared", "status": "ok", "duration_seconds": t, "gpu_uuids": gpu}
            for side, t in (("a", ta), ("b", tb))
        ]
        setting = modes.MODES[mode].pair_columns()
        pairs.append(
            {
                "pair_key": key,
                "status": "ok",
                "mode": mode,
                **setting,
                "solo_a_key": a,
                "solo_b_key": b,
                "shared_a_key": f"{key}|a",
                "shared_b_key": f"{key}|b",
                "slowdown_a": ta / SOLO[a] - 1,
                "slowdown_b": tb / SOLO[b] - 1,
                "packing_saving": 1 - max(ta, tb) / (SOLO[a] + SOLO[b]),
            }
        )
    runs = pd.DataFrame(runs)
    for column in interference.PROFILE:
        runs[column] = 0.5
    # the limit held launches in one run only: share-50-50's x+y, side a
    runs["cuda_throttled_seconds"] = np.where(runs.key == "share-50-50|x|y|a", 1.5, 0.0)
    return runs, pd.DataFrame(pairs)


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("timeslice", [3, 0.2, 0.1, 0.3, 0.2, 0.05, 0.5, 0.375]),
        ("limit-50-50", [1, 2 / 15, 2 / 15, 2 / 15, 0.65, 0.3, 1.0, 0.7]),
        ("share-50-50", [2, 0.21, 0.12, 0.3, 0.1, 0.05, 0.5, 0.225]),
        ("share-30-70", [1, 0.25, 0.25, 0.25, 0.4625, 0.125, 0.8, 0.675]),
    ],
)
def test_the_packing_saving_of_each_mode(every_kind, mode, expected):
    table = interference.by_mode(interference.measured_pairs(*every_kind))
    assert list(table["mode"]) == ["timeslice", "limit-50-50", "share-50-50", "share-30-70"]  # the modes' order
    row = table.set_index("mode").loc[mode]
    assert list(row) == pytest.approx(expected)  # pairs, saving median/min/max, slowdown median/min/max, apart


@pytest.mark.parametrize(
    "mode, expected",
    [
        # pairs, same GPU, saving median, time-sliced median, difference median/min/max, lower, at or above, pairs
        # that never waited and their difference's min/max
        ("limit-50-50", [1, 1, 2 / 15, 0.2, -1 / 15, -1 / 15, -1 / 15, 1, False, 1, -1 / 15, -1 / 15]),
        ("share-50-50", [2, 1, 0.21, 0.15, 0.06, 0.02, 0.1, 0, True, 1, 0.02, 0.02]),
        ("share-30-70", [1, 1, 0.25, 0.2, 0.05, 0.05, 0.05, 0, True, 1, 0.05, 0.05]),
    ],
)
def test_each_mode_against_time_slicing_on_the_same_pairs(every_kind, mode, expected):
    table = interference.against_timeslice(interference.measured_pairs(*every_kind))
    assert list(table["mode"]) == ["limit-50-50", "share-50-50", "share-30-70"]
    assert list(table.set_index("mode").loc[mode]) == pytest.approx(expected)


def test_the_report_says_whether_the_50_50_share_meets_time_slicings_median(every_kind, tmp_path):
    report = analyze.Report(tmp_path)
    analyze.modes_section(report, interference.measured_pairs(*every_kind))
    assert (
        "The sharing issue's target: `share-50-50` saved a median +0.210 against time-slicing's +0.150 on the same "
        "2 pairs (1 with both modes on one GPU): at or above time-slicing's median; pair by pair +0.060 (median), "
        "0 of 2 lower."
    ) in report.lines
    assert (
        "In 1 of the 2 no launch waited for the share, so the pair ran as time-slicing does: their differences, "
        "+0.020 to +0.020, are one run against another, the noise a difference must exceed."
    ) in report.lines
    assert len(pd.read_csv(tmp_path / "pairs-by-mode.csv")) == 4
    assert len(pd.read_csv(tmp_path / "pairs-against-timeslice.csv")) == 3
    (tmp_path / "none").mkdir()
    without = analyze.Report(tmp_path / "none")
    runs, pairs = every_kind
    analyze.modes_section(without, interference.measured_pairs(runs, pairs[~pairs["mode"].str.startswith("share")]))
    assert any(
        line.startswith("No `share-50-50` pair measured with its time-sliced mode yet") for line in without.lines
    )


@pytest.mark.parametrize(
    "pair_key, side, features",
    [
        # self_share, other_share (the most each may get), self_share_min, other_share_min (the least each is promised)
        ("timeslice|x|y", "a", (1.0, 1.0, 0.0, 0.0)),
        ("limit-50-50|x|y", "b", (0.5, 0.5, 0.0, 0.0)),
        ("share-30-70|x|y", "a", (1.0, 1.0, 0.3, 0.7)),
        ("share-30-70|x|y", "b", (1.0, 1.0, 0.7, 0.3)),
    ],
)
def test_a_sides_features_hold_the_share_it_and_the_other_were_given(every_kind, pair_key, side, features):
    found = interference.examples(*every_kind).set_index(["pair_key", "side"]).loc[(pair_key, side)]
    assert tuple(found[["self_share", "other_share", "self_share_min", "other_share_min"]]) == features


def test_the_promised_share_is_a_feature_only_where_some_pair_had_one(every_kind):
    runs, pairs = every_kind
    with_shares = interference.examples(runs, pairs)
    without = interference.examples(runs, pairs[~pairs["mode"].str.startswith("share")])
    assert interference.feature_names(with_shares)[-2:] == ["self_share_min", "other_share_min"]
    assert interference.feature_names(without) == interference.feature_names()  # the model before shares existed
