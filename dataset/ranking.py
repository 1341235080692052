"""Feature ranking for a target column (MGUP, MGMAP), after the published Feature_Selection notebook: r² of Pearson,
Spearman and Kendall correlation, random-forest importance, and the Ridge and Lasso coefficients (RobustScaler,
10-fold grid searches), and their average rank."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

# the notebook's input: the published table minus these, its text columns as integers
DROPPED = ("ID", "SMU_total", "SMU_available", "DU_total", "DU_used", "DU_free")
TEXT = ("Model", "Dataset", "Run_Env")
CORRELATIONS = ("pearson", "spearman", "kendall")
MODELS = ("random_forest", "ridge", "lasso")
ALPHAS = [0.001, 0.01, 0.1, 1, 10, 100, 1000]  # the notebook's Ridge and Lasso grid
# The notebook's forest grid is 7 depths x 7 max_features x 3 sizes (1,470 fits a target); this one spans its range
# in 4 points (the published top three for MGUP are the same under both)
FOREST_GRID = {"max_depth": [4, 15], "max_features": [6, 20], "n_estimators": [100]}
SEED = 42
FOLDS = 10  # the notebook's; fewer when a table has fewer rows
MOSTLY_PRESENT = 0.9  # a feature is ranked when at least this share of the rows has it


def features(table: pd.DataFrame, target: str) -> tuple[pd.DataFrame, pd.Series]:
    """(X, y) as the notebook made them, less the columns that carry no information here: empty in more than a tenth
    of the rows (the rows without one of the others are left out), one value (their r² is undefined; the notebook
    ranked those NaNs first), or the target's values in every row (a range beside its maximum when the minimum never
    varies: the campaign's GPU_Util_%_ran is MGUP, since every job's GPU idles at 0% before its first step)."""
    data = table.drop(columns=[c for c in DROPPED if c in table.columns]).copy()
    for column in TEXT:
        if column in data.columns:
            data[column] = pd.factorize(data[column].astype(str))[0] + 1  # in order of first appearance
    data = data.dropna(subset=[target])
    X = data.drop(columns=[target]).apply(pd.to_numeric, errors="coerce")
    X = X.loc[:, X.notna().mean() >= MOSTLY_PRESENT]  # a column mostly empty is left out, then rows with a gap
    X = X.dropna()
    X = X.loc[:, X.nunique() > 1]
    y = data.loc[X.index, target].astype(float)
    return X.loc[:, [c for c in X.columns if not np.allclose(X[c], y)]], y


def ranks_of(weights: pd.Series) -> pd.Series:
    """0 for the largest weight, as the notebook ranked (signed: Ridge and Lasso by their signed coefficient). Weights
    equal to 8 significant digits tie, in column order: collinear columns (a range beside a max whose min is fixed)
    get coefficients that differ only by BLAS rounding, which would otherwise order them differently per machine."""
    significant = np.array([float(f"{w:.8g}") for w in weights.to_numpy()])
    order = np.argsort(-significant, kind="stable")
    ranks = np.empty(len(order), dtype=int)
    ranks[order] = np.arange(len(order))
    return pd.Series(ranks, index=weights.index)


def determination(X: pd.DataFrame, y: pd.Series, method: str) -> pd.Series:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a feature constant within a table gives NaN, filled below
        return X.corrwith(y, method=method).pow(2).fillna(0.0)


def model_weights(X: pd.DataFrame, y: pd.Series, forest_grid: dict | None = None) -> dict[str, pd.Series]:
    """Random-forest importances and Ridge / Lasso coefficients, each from a grid search of 10-fold (or fewer when
    the table has fewer rows) cross-validated MSE."""
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import Lasso, Ridge
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import RobustScaler

    folds = max(2, min(FOLDS, len(y)))
    grid = forest_grid or FOREST_GRID
    forest = GridSearchCV(
        RandomForestRegressor(random_state=SEED, n_jobs=1),
        {k: [min(v, X.shape[1]) if k == "max_features" else v for v in vs] for k, vs in grid.items()},
        cv=folds,
        scoring="neg_mean_squared_error",
    ).fit(X, y)
    weights = {"random_forest": pd.Series(forest.best_estimator_.feature_importances_, index=X.columns)}
    for name, model in (("ridge", Ridge), ("lasso", Lasso)):
        pipe = Pipeline([("scaler", RobustScaler()), ("model", model(random_state=SEED, max_iter=100_000))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Lasso's convergence notes at the smallest alphas
            search = GridSearchCV(pipe, {"model__alpha": ALPHAS}, cv=folds, scoring="neg_mean_squared_error").fit(X, y)
        weights[name] = pd.Series(search.best_estimator_.named_steps["model"].coef_, index=X.columns)
    return weights


@dataclass(frozen=True)
class Ranking:
    target: str
    weights: pd.DataFrame  # a column per method: r2_pearson ... lasso
    ranks: pd.DataFrame  # the same, ranked (0 best), plus mean_rank (r², forest, Ridge, Lasso), sorted by it
    rows: int


def rank(table: pd.DataFrame, target: str, correlation: str = "pearson", forest_grid: dict | None = None) -> Ranking:
    """Every method's weight and rank; the average rank is the notebook's: r² (of `correlation`), forest, Ridge,
    Lasso."""
    X, y = features(table, target)
    weights = pd.DataFrame({f"r2_{m}": determination(X, y, m) for m in CORRELATIONS})
    for name, w in model_weights(X, y, forest_grid).items():
        weights[name] = w
    ranks = weights.apply(ranks_of)
    ranks["mean_rank"] = ranks[[f"r2_{correlation}", *MODELS]].mean(axis=1)
    return Ranking(target, weights, ranks.sort_values(["mean_rank", f"r2_{correlation}"], kind="stable"), len(y))


def plot(ranking: Ranking, path, top: int = 15) -> None:
    """Two panels: r² of the three correlations for the top features, and the average rank with each method's."""
    import matplotlib.pyplot as plt

    best = ranking.weights[[f"r2_{m}" for m in CORRELATIONS]].sort_values("r2_pearson", ascending=False).head(top)
    order = ranking.ranks.head(top)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5))
    best.iloc[::-1].plot.barh(ax=left, width=0.8)
    left.set_xlabel("r² with " + ranking.target)
    left.set_title(f"{ranking.target}: r² of the {top} most correlated features ({ranking.rows} rows)")
    left.set_xlim(0, 1)
    for column, marker in zip(["r2_pearson", *MODELS], "osD^"):
        right.scatter(order[column], range(len(order)), marker=marker, label=column, alpha=0.7, zorder=3)
    right.barh(range(len(order)), order["mean_rank"], color="lightgrey", label="mean rank")
    right.set_yticks(range(len(order)), order.index)
    right.invert_yaxis()
    right.set_xlim(left=-0.6)  # a rank-0 marker would sit on the axis line, half hidden
    right.set_xlabel("rank (0 = best)")
    right.set_title(f"{ranking.target}: features by average rank (r², forest, Ridge, Lasso)")
    right.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)  # inside, it hid the low ranks' markers
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
