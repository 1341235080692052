"""Co-location: the pairs table's slowdowns and savings follow from its runs' durations (the original's definitions);
with the few calibration pairs no model is fitted and the analysis says why; on pairs whose slowdown depends on the
other job's GPU use, the model cross-validated by pair predicts it and ranks the pairs by saving."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from alnair.dataset import interference, sources


def test_definitions_are_the_originals():
    # the dictionary's example: slowdowns of 24.7% and 4.1% and a saving of 31.6% fit solo times in this ratio
    ta, tb = 1.0, 0.7
    assert interference.slowdown(ta * 1.247, ta) == pytest.approx(0.247)
    saving = interference.packing_saving(ta, tb, ta * 1.247, tb * 1.041)
    assert saving == pytest.approx(1 - 1.247 / 1.7)
    assert interference.compute_share(float("nan")) == 1.0 and interference.compute_share(30) == 0.3


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
    solo = pd.DataFrame({"key": [f"job/m{i}/b1/s1/fp32/w0/cuda/seed{i}/r0" for i in range(jobs)], "role": "solo",
                         "status": "ok", "run_repeat": 0, "duration_seconds": generator.uniform(10, 30, jobs)})
    for column in interference.PROFILE:
        solo[column] = generator.uniform(0, 1, jobs)
    shared, pairs = [], []
    for i in range(jobs):
        for j in range(i + 1, jobs):
            a, b = solo.iloc[i], solo.iloc[j]
            pair_key = f"timeslice|{a.key}|{b.key}"
            ta = a.duration_seconds * (1 + 0.8 * b.gpu_util_ratio_mean)
            tb = b.duration_seconds * (1 + 0.8 * a.gpu_util_ratio_mean)
            shared += [{"key": f"{pair_key}|a", "role": "shared", "status": "ok", "duration_seconds": ta},
                       {"key": f"{pair_key}|b", "role": "shared", "status": "ok", "duration_seconds": tb}]
            pairs.append({"pair_key": pair_key, "status": "ok", "mode": "timeslice", "compute_limit_a": np.nan,
                          "compute_limit_b": np.nan, "solo_a_key": a.key, "solo_b_key": b.key,
                          "shared_a_key": f"{pair_key}|a", "shared_b_key": f"{pair_key}|b",
                          "solo_a_seconds": a.duration_seconds, "solo_b_seconds": b.duration_seconds,
                          "shared_a_seconds": ta, "shared_b_seconds": tb,
                          "slowdown_a": ta / a.duration_seconds - 1, "slowdown_b": tb / b.duration_seconds - 1,
                          "packing_saving": 1 - max(ta, tb) / (a.duration_seconds + b.duration_seconds)})
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
