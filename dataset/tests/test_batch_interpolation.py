"""Synthetic rows over batch size: the notebooks' grids and six interpolations; on the published CSV the example of
Table I (linear, InceptionV3 MaGTSAMP) gives the published RMSE and MAE with its swapped pairing, and the
dictionary's corrected values paired right; held-out points score each method."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from alnair_dataset import sources, synthesis


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return sources.load_published()


def test_table_one_is_reproduced_with_and_without_its_swap(table):
    inception = synthesis.by_model(table, "MaGTSAMP")["Inception_v3"]
    swapped = synthesis.published_check(inception, "linear", swap_128_256=True)
    assert (swapped.rmse, swapped.mae) == (pytest.approx(3.1765, abs=1e-4), pytest.approx(2.4475, abs=1e-4))
    paired = synthesis.published_check(inception, "linear")
    assert (round(paired.rmse, 2), round(paired.mae, 2)) == (0.72, 0.61)
    assert paired.mse == pytest.approx(paired.rmse**2)


def test_the_grid_gives_sixteen_synthetic_points_and_seventeen_for_dcgan(table):
    for model, synthetic in (("Inception_v3", 16), ("DCGAN", 17), ("Reinforcement Learning", 16)):
        rows = synthesis.fill(synthesis.by_model(table, "MGUP")[model], "linear")
        assert (len(rows), int(rows.synthetic.sum())) == (21, synthetic), model
    dqn = synthesis.fill(synthesis.by_model(table, "MGUP")["Reinforcement Learning"], "linear")
    assert list(dqn.BS) == synthesis.GRIDS["dqn"]  # BS 3000-7000 are off the notebook's grid, as there
    rows = synthesis.synthetic_rows(table)
    assert (len(rows), int(rows.synthetic.sum())) == (175, 129)  # the clustering notebook's 175 rows


def test_each_method_matches_pandas_interpolation_by_row_position(table):
    mobilenet = synthesis.by_model(table, "MGUP")["MobileNet"]
    grid = synthesis.GRIDS["classify"]
    placed = pd.Series([mobilenet.get(bs, np.nan) for bs in grid], dtype=float)
    for method, pandas_method, extra in (
        ("linear", "linear", {}),
        ("pchip", "pchip", {}),
        ("barycentric", "barycentric", {}),
        ("krogh", "krogh", {}),
        ("cubicspline", "cubicspline", {}),
        ("spline2", "spline", {"order": 2}),
    ):
        expected = placed.interpolate(method=pandas_method, limit_direction="both", **extra)
        ours = synthesis.fill(mobilenet, method)
        assert np.allclose(ours.value, expected, atol=1e-6), method
    # the spreadsheet the clustering notebook read has MobileNet's MGUP at BS 869 and 716 as spline order 2 gives
    spline = synthesis.fill(mobilenet, "spline2").set_index("BS").value
    assert (round(spline[869], 2), round(spline[716], 2)) == (47.50, 48.63)


def test_held_out_points_score_a_method_by_what_it_could_not_see():
    line = pd.Series([10.0, 20.0, 30.0, 40.0], index=[2, 4, 8, 16])  # linear in log2 batch size
    true, predicted = synthesis.held_out(line, "linear")
    assert true == [20.0, 30.0] and np.allclose(predicted, true)
    bent = pd.Series([0.0, 50.0, 60.0, 100.0], index=[2, 4, 8, 16])
    true, predicted = synthesis.held_out(bent, "linear")
    assert np.allclose(predicted, [30.0, 75.0])
    error = synthesis.Errors.of(true, predicted)
    assert (error.mae, error.mse) == (17.5, (20**2 + 15**2) / 2)


def test_scores_cover_every_target_and_method(table):
    scored = synthesis.scores(table)
    assert len(scored) == len(synthesis.TARGETS) * len(synthesis.METHODS)
    assert set(scored.held_out_points) == {26}  # 3 of each of six five-point models, 2 of DCGAN's 4, 6 of the DQN's 8
    # the published check cannot tell exact interpolants apart: a polynomial through 16 synthetic points of a
    # degree-4 polynomial gives the measured points back
    assert scored[scored.method == "barycentric"].check_rmse.max() < 1e-6
    best = scored.loc[scored.groupby("target").held_out_rmse.idxmin()].set_index("target").method.to_dict()
    assert best == {"MGUP": "linear", "MGMAP": "pchip", "MaGTSAMP": "spline2"}


def test_a_model_whose_grid_has_no_synthetic_row_has_no_published_check():
    adjacent = pd.Series({2: 10.0, 8: 20.0})  # next to each other on the classify grid
    off_grid = pd.Series({10: 30.0, 64: 40.0})  # a DQN: 64 is on neither grid
    for measured in (adjacent, off_grid):
        assert synthesis.published_check(measured, "linear").points == 0
    table = pd.DataFrame(
        {"Model": ["a", "a", "b", "b", "b"], "BS": [2, 8, 2, 8, 32], "MGUP": [10.0, 20.0, 10.0, 20.0, 40.0]}
    )
    linear = synthesis.scores(table, targets=("MGUP",)).set_index("method").loc["linear"]
    b_alone = synthesis.published_check(pd.Series({2: 10.0, 8: 20.0, 32: 40.0}), "linear")
    assert b_alone.points == 3 and b_alone.rmse > 0
    # b's check alone, not NaN
    assert linear.models == 2 and linear.checked_models == 1 and linear.check_rmse == pytest.approx(b_alone.rmse)
