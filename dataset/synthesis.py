"""Synthetic rows by interpolation over batch size, after the published notebooks: each model's measured values of a
column placed on a 21-point batch-size grid, the gaps filled by one of six interpolations (scipy), and two scores:
the published check (regenerate the measured points from the synthetic ones) and held-out points (each interior
measured point predicted from the others)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import interpolate as si

# the notebooks' grids: measured batch sizes at every fifth row, four synthetic ones between
GRIDS = {
    "classify": [1024, 869, 716, 562, 409, 256, 230, 205, 180, 154, 128, 109, 90, 70, 51, 32, 26, 20, 14, 8, 2],
    "dqn": [1024, 869, 716, 562, 409, 256, 230, 205, 180, 154, 128, 109, 90, 70, 51, 32, 28, 23, 19, 14, 10],
}
METHODS = ("linear", "pchip", "barycentric", "krogh", "cubicspline", "spline2")
TARGETS = ("MGUP", "MGMAP", "MaGTSAMP")  # the columns the notebooks made synthetic


def curve(x: np.ndarray, y: np.ndarray, method: str):
    """A function through the points (x, y) by `method`; linear holds the end values beyond the ends (pandas'
    limit_direction="both"), the others extrapolate as scipy does. With too few points for a method (a cubic needs
    3, spline2 3) it is linear."""
    order = np.argsort(x)
    x, y = np.asarray(x, float)[order], np.asarray(y, float)[order]
    if method == "linear" or len(x) < 3:
        return lambda at: np.interp(at, x, y)
    makers = {
        "pchip": lambda: si.PchipInterpolator(x, y, extrapolate=True),
        "barycentric": lambda: si.BarycentricInterpolator(x, y),
        "krogh": lambda: si.KroghInterpolator(x, y),
        "cubicspline": lambda: si.CubicSpline(x, y),
        # pandas' method="spline", order=2, which the notebooks used: scipy's smoothing spline with its default
        # smoothing (s = the number of points), so it need not pass through them
        "spline2": lambda: si.UnivariateSpline(x, y, k=2),
    }
    return makers[method]()


def grid_for(batch_sizes: list[int]) -> list[int]:
    """The published grid that holds most of the measured batch sizes, cut to their range (no extrapolation)."""
    grid = max(GRIDS.values(), key=lambda g: len(set(g) & set(batch_sizes)))
    measured = [b for b in batch_sizes if b in grid]
    return [b for b in grid if min(measured) <= b <= max(measured)] if measured else []


def fill(measured: pd.Series, method: str, grid: list[int] | None = None) -> pd.DataFrame:
    """measured: one model's values indexed by batch size. Returns the grid's rows (BS, value, synthetic), the
    values placed by row position on the grid as the notebooks did (pandas interpolates over the row number)."""
    measured = measured.groupby(level=0).mean()
    grid = grid or grid_for(list(measured.index))
    position = {bs: i for i, bs in enumerate(grid)}
    known = [bs for bs in grid if bs in measured.index]
    f = curve(np.array([position[b] for b in known]), measured[known].to_numpy(), method)
    values = [measured[bs] if bs in measured.index else float(f(position[bs])) for bs in grid]
    return pd.DataFrame({"BS": grid, "value": values, "synthetic": [bs not in measured.index for bs in grid]})


@dataclass(frozen=True)
class Errors:
    rmse: float
    mse: float
    mae: float
    points: int

    @classmethod
    def of(cls, true, predicted) -> Errors:
        error = np.asarray(predicted, float) - np.asarray(true, float)
        mse = float(np.mean(error**2)) if len(error) else float("nan")
        return cls(float(np.sqrt(mse)), mse, float(np.mean(np.abs(error))) if len(error) else float("nan"), len(error))


def published_check(measured: pd.Series, method: str, swap_128_256: bool = False) -> Errors:
    """The notebooks' check: drop the measured points from the filled grid, fill them back from the synthetic ones
    alone, and compare. swap_128_256 pairs them as the notebook did (y_true lists BS 128 before 256, y_pred after).
    No points (NaN errors) when the grid has no synthetic row to fill from: batch sizes adjacent on it (2 and 8),
    or only one of them on it (a DQN at 10 and 64)."""
    rows = fill(measured, method)
    synthetic = rows[rows.synthetic]
    if synthetic.empty:
        return Errors.of([], [])
    position = {bs: i for i, bs in enumerate(rows.BS)}
    f = curve(np.array([position[b] for b in synthetic.BS]), synthetic.value.to_numpy(), method)
    real = rows[~rows.synthetic]
    predicted = [float(f(position[bs])) for bs in real.BS]
    true = list(real.value)
    if swap_128_256 and {128, 256} <= set(real.BS):
        i, j = list(real.BS).index(128), list(real.BS).index(256)
        true[i], true[j] = true[j], true[i]
    return Errors.of(true, predicted)


def held_out(measured: pd.Series, method: str) -> tuple[list[float], list[float]]:
    """Each interior measured point (not the smallest or largest batch size) predicted from the others, over
    log2(batch size): (true, predicted)."""
    measured = measured.groupby(level=0).mean().sort_index()
    true, predicted = [], []
    for bs in measured.index[1:-1]:
        rest = measured.drop(bs)
        f = curve(np.log2(rest.index.to_numpy(float)), rest.to_numpy(), method)
        true.append(float(measured[bs]))
        predicted.append(float(f(np.log2(bs))))
    return true, predicted


def by_model(table: pd.DataFrame, column: str) -> dict[str, pd.Series]:
    """Each model's measured values of `column` by batch size, for the models measured at 2 or more batch sizes."""
    found = {}
    for model, rows in groups(table.dropna(subset=[column])):
        series = rows.set_index("BS")[column].astype(float)
        if series.index.nunique() >= 2:
            found[model] = series
    return found


def groups(table: pd.DataFrame):
    """(label, rows) per model and run environment (the campaign's Run_Env holds the precision and workers): the
    label is the model, with its environment when the model ran in several."""
    keys = ["Model", "Run_Env"] if "Run_Env" in table.columns else ["Model"]
    envs = table.groupby("Model", sort=False)[keys[-1]].nunique()
    for key, rows in table.groupby(keys, sort=False):
        model = key[0] if isinstance(key, tuple) else key
        yield (f"{model} [{key[1]}]" if len(keys) == 2 and envs[model] > 1 else str(model)), rows


def scores(table: pd.DataFrame, targets=TARGETS) -> pd.DataFrame:
    """One row per target and method: the published check and the held-out errors, pooled over the models."""
    out = []
    for target in targets:
        models = by_model(table, target)
        for method in METHODS:
            checks = [c for c in (published_check(s, method) for s in models.values()) if c.points]
            true, predicted = [], []
            for series in models.values():
                t, p = held_out(series, method)
                true += t
                predicted += p
            held = Errors.of(true, predicted)
            check_mse = float(np.mean([c.mse for c in checks])) if checks else float("nan")
            out.append(
                {
                    "target": target,
                    "method": method,
                    "models": len(models),
                    "checked_models": len(checks),
                    "check_rmse": float(np.mean([c.rmse for c in checks])) if checks else float("nan"),
                    "check_mse": check_mse,
                    "check_mae": float(np.mean([c.mae for c in checks])) if checks else float("nan"),
                    "held_out_points": held.points,
                    "held_out_rmse": held.rmse,
                    "held_out_mse": held.mse,
                    "held_out_mae": held.mae,
                }
            )
    return pd.DataFrame(out)


def synthetic_rows(table: pd.DataFrame, method: str = "spline2", targets=TARGETS) -> pd.DataFrame:
    """Measured and synthetic rows of the targets, as the clustering notebook's input: for each model measured at
    2 or more batch sizes its grid (measured points on it, synthetic ones between, clipped to 0-100), else its
    measured rows."""
    rows = []
    for model, group in groups(table.dropna(subset=list(targets))):
        measured = {t: group.set_index("BS")[t].astype(float) for t in targets}
        if group.BS.nunique() < 2:
            for _, row in group.iterrows():
                rows.append({"Model": model, "BS": row.BS, **{t: row[t] for t in targets}, "synthetic": False})
            continue
        filled = {t: fill(measured[t], method) for t in targets}
        first = filled[targets[0]]
        for i in range(len(first)):
            rows.append(
                {
                    "Model": model,
                    "BS": int(first.BS[i]),
                    **{t: filled[t].value[i] for t in targets},
                    "synthetic": bool(first.synthetic[i]),
                }
            )
    found = pd.DataFrame(rows)
    # a curve may overshoot between or beyond measured points; the targets are percentages
    found[list(targets)] = found[list(targets)].clip(0.0, 100.0)
    return found


def plot(table: pd.DataFrame, scored: pd.DataFrame, path, target: str = "MaGTSAMP", title: str = "") -> None:
    """Left: every method's curve through one model's measured points; right: held-out RMSE by method and target."""
    import matplotlib.pyplot as plt

    models = by_model(table, target)
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    if models:
        # the model whose values vary most, among those measured at the most batch sizes (up to 5, the notebooks')
        model, series = max(models.items(), key=lambda kv: (min(kv[1].index.nunique(), 5), np.ptp(kv[1].to_numpy())))
        for method in METHODS:
            rows = fill(series, method)
            left.plot(rows.BS, rows.value, marker=".", label=method, alpha=0.8)
        measured = series.groupby(level=0).mean()
        left.scatter(measured.index, measured.values, color="black", zorder=5, s=40, label="measured")
        left.set_xscale("log", base=2)
        left.set_xlabel("batch size")
        left.set_ylabel(target)
        left.set_title(f"{title}{model}:\n{target} on the batch-size grid")
        left.legend(fontsize=8)
    pivot = scored.pivot(index="method", columns="target", values="held_out_rmse").reindex(list(METHODS))
    pivot.plot.bar(ax=right, rot=0)
    points = scored.groupby("target").held_out_points.first().to_dict()
    right.set_ylabel("held-out RMSE (percentage points)")
    right.set_title(f"{title}held-out interior points:\n" + ", ".join(f"{t} {n}" for t, n in points.items()))
    right.legend(title="target", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
