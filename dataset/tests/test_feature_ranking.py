"""Feature ranking on the published CSV reproduces what its column dictionary says the notebook published: the r²
(Pearson) of the three best features for MGUP and MGMAP, and the top three of MGUP by average rank."""

from __future__ import annotations

import pandas as pd
import pytest

from alnair_dataset import analyze, ranking, sources

ONE_FOREST = {"max_depth": [6], "max_features": [10], "n_estimators": [100]}  # the test's grid: one fit per fold


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return sources.load_published()


@pytest.mark.parametrize("target", ["MGUP", "MGMAP"])
def test_pearson_r2_of_the_best_three_are_the_published(table, target):
    X, y = ranking.features(table, target)
    r2 = ranking.determination(X, y, "pearson").sort_values(ascending=False)
    assert list(r2.index[:3]) == list(analyze.PUBLISHED_R2[target])
    for feature, value in analyze.PUBLISHED_R2[target].items():
        assert r2[feature] == pytest.approx(value, abs=0.006)


def test_spearman_and_kendall_rank_the_same_features_for_mgup(table):
    X, y = ranking.features(table, "MGUP")
    for method in ("spearman", "kendall"):
        best = ranking.determination(X, y, method).sort_values(ascending=False).index[:3]
        assert set(best) == {"MaGTSAMP", "Min_GPU_Util_%", "MiGTSAMP"}


def test_the_average_rank_puts_the_published_three_first_for_mgup(table):
    result = ranking.rank(table, "MGUP", forest_grid=ONE_FOREST)
    assert list(result.ranks.index[:3]) == analyze.PUBLISHED_TOP_MGUP
    assert result.rows == 49
    # the average is of r² (Pearson), forest, Ridge and Lasso ranks
    best = result.ranks.iloc[0]
    assert best.mean_rank == pytest.approx((best.r2_pearson + best.random_forest + best.ridge + best.lasso) / 4)


def test_features_drop_the_notebooks_columns_and_those_that_never_vary(table):
    X, _ = ranking.features(table, "MGUP")
    assert not set(ranking.DROPPED) & set(X.columns)
    assert "SCT_irq" not in X.columns and "NIO_errin" not in X.columns  # always 0
    assert X["Model"].max() == table["Model"].nunique()  # text as integers, in order of first appearance


def test_a_column_equal_to_the_target_in_every_row_is_not_ranked(table):
    # the campaign's case: every job's GPU idles at 0% before its first step, so its range is its maximum
    campaign_like = table.assign(**{"Min_GPU_Util_%": 0.0, "GPU_Util_%_ran": table["MGUP"]})
    X, y = ranking.features(campaign_like, "MGUP")
    assert "GPU_Util_%_ran" not in X.columns and "Min_GPU_Util_%" not in X.columns and len(y) == len(X)
    assert "GPU_Util_%_ran" in ranking.features(table, "MGUP")[0].columns  # the published range varies on its own


def test_ranks_put_the_largest_signed_weight_first():
    ranks = ranking.ranks_of(pd.Series({"a": -3.0, "b": 2.0, "c": 0.5}))
    assert ranks.to_dict() == {"b": 0, "c": 1, "a": 2}


def test_weights_equal_but_for_rounding_noise_tie_in_column_order():
    # collinear columns: Ridge splits their weight with differences of 1e-10 that vary with the BLAS
    ranks = ranking.ranks_of(pd.Series({"range": -0.119702410271, "max": -0.119702410141, "other": 0.5}))
    assert ranks.to_dict() == {"other": 0, "range": 1, "max": 2}
