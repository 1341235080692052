"""Co-location: a model predicting a job's slowdown beside another from the two jobs' solo profiles, cross-validated by
pair, and candidate pairs ranked by the packing saving it predicts, with its error against the measured pairs. The
definitions are the original project's: slowdown = shared / solo - 1, packing saving = 1 - max(shared times) /
(sum of solo times)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations_with_replacement

import numpy as np
import pandas as pd

from . import modes

# a job's solo profile: what the model knows of each side
PROFILE = (
    "gpu_util_ratio_mean",
    "gpu_util_ratio_max",
    "gpu_memory_busy_ratio_mean",
    "gpu_memory_used_ratio_max",
    "cpu_util_ratio_mean",
    "gpu_power_watts_mean",
    "data_stall_ratio",
)
MIN_PAIRS = 8  # distinct pairs (both modes of one pair count once) below which no model is fitted
SEED = 0
# features a model gets only where they vary over the examples: without share-* pairs every side's promised share is 0,
# and the models are the ones fitted before shares existed
OPTIONAL = ("self_share_min", "other_share_min")


def slowdown(shared_seconds, solo_seconds):
    return np.asarray(shared_seconds, float) / np.asarray(solo_seconds, float) - 1.0


def packing_saving(solo_a, solo_b, shared_a, shared_b):
    return 1.0 - np.maximum(np.asarray(shared_a, float), np.asarray(shared_b, float)) / (
        np.asarray(solo_a, float) + np.asarray(solo_b, float)
    )


def compute_share(limit, share=None) -> tuple[float, float]:
    """The share of the GPU a side was given, as (the most it may get, the least it is promised while the other side
    wants the GPU): ALNAIR_COMPUTE_LIMIT=N, a cap, is (N/100, 0); ALNAIR_COMPUTE_SHARE=N, a share, is (1, N/100),
    since idle time is lent (work-conserving); neither (time-slicing) is (1, 0)."""
    most = 1.0 if limit is None or pd.isna(limit) else float(limit) / 100.0
    least = 0.0 if share is None or pd.isna(share) else float(share) / 100.0
    return most, least


def measured_pairs(runs: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """The ok pairs whose four rows are in runs, with the slowdowns and the saving recomputed from the rows'
    duration_seconds (they must equal the pairs table's)."""
    by_key = runs.set_index("key")
    seconds = by_key["duration_seconds"]
    if pairs.empty:
        return pairs.assign(group=[])
    ok = pairs[pairs["status"] == "ok"].copy()
    keys = ["solo_a_key", "solo_b_key", "shared_a_key", "shared_b_key"]
    ok = ok[ok[keys].isin(seconds.index).all(axis=1)].reset_index(drop=True)
    sa, sb, ha, hb = (seconds.reindex(ok[k]).to_numpy() for k in keys)
    ok["slowdown_a_recomputed"] = slowdown(ha, sa)
    ok["slowdown_b_recomputed"] = slowdown(hb, sb)
    ok["packing_saving_recomputed"] = packing_saving(sa, sb, ha, hb)
    # the pair's configurations, from its key (mode|a|b): its solo keys may name baseline rows (KEY|baseline|GPU)
    parts = ok["pair_key"].str.split("|")
    ok["a"], ok["b"] = parts.str[1], parts.str[2]
    ok["group"] = ["+".join(sorted(p)) for p in zip(ok.a, ok.b)]  # a pair, whatever its mode and baselines
    # the GPU its shared rows ran on (a pair's modes measured on two GPUs are compared across machines)
    gpus = by_key.get("gpu_uuids", pd.Series(dtype=object))
    ok["gpu"] = gpus.reindex(ok["shared_a_key"]).to_numpy()
    # how long the limit held either side's launches (NaN where the rows do not say)
    waits = by_key.get("cuda_throttled_seconds", pd.Series(dtype=float))
    ok["waited_seconds"] = np.fmax(*(waits.reindex(ok[f"shared_{side}_key"]).to_numpy() for side in "ab"))
    return ok


def mode_order(names) -> list[str]:
    """The modes in modes.MODES' order (time-slicing, the caps, the shares), any other after them by name."""
    known = [m for m in modes.MODES if m in set(names)]
    return known + sorted(set(names) - set(known))


BY_MODE_COLUMNS = [
    "mode",
    "pairs",
    "saving_median",
    "saving_min",
    "saving_max",
    "slowdown_median",
    "slowdown_min",
    "slowdown_max",
    "apart_median",
]


def by_mode(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per mode: its measured pairs; their packing saving (median, min, max); each side's slowdown, the two
    sides pooled (median, min, max); and how far apart a pair's two slowdowns are (median of |a - b|)."""
    rows = []
    for mode in mode_order(measured["mode"]) if len(measured) else []:
        m = measured[measured["mode"] == mode]
        sides = pd.concat([m.slowdown_a, m.slowdown_b])
        rows.append(
            {
                "mode": mode,
                "pairs": len(m),
                "saving_median": m.packing_saving.median(),
                "saving_min": m.packing_saving.min(),
                "saving_max": m.packing_saving.max(),
                "slowdown_median": sides.median(),
                "slowdown_min": sides.min(),
                "slowdown_max": sides.max(),
                "apart_median": (m.slowdown_a - m.slowdown_b).abs().median(),
            }
        )
    return pd.DataFrame(rows, columns=BY_MODE_COLUMNS)


AGAINST_COLUMNS = [
    "mode",
    "pairs",
    "same_gpu",
    "saving_median",
    "timeslice_saving_median",
    "difference_median",
    "difference_min",
    "difference_max",
    "lower",
    "at_or_above_timeslice",
    "no_wait",
    "no_wait_difference_min",
    "no_wait_difference_max",
]
NO_WAIT_SECONDS = 0.1  # a pair whose sides' launches waited less than this in all ran as time-slicing does


def against_timeslice(measured: pd.DataFrame) -> pd.DataFrame:
    """Each mode beside time-slicing on the same pairs (the same configurations a and b measured in both): how many,
    how many of them had both modes on one GPU (`same_gpu`: the others compare savings each taken against its own
    GPU's baselines, across machines), the mode's median packing saving and time-slicing's over those pairs, the
    paired difference (mode less time-slicing: median, min, max), how many pairs saved less than time-sliced,
    whether the mode's median is at or above time-slicing's (the sharing issue's target for share-50-50), and how
    many pairs' launches never waited for the limit, with their differences' range: there the mode ran as
    time-slicing does, so those differences are one run against another, the noise the others must exceed."""
    rows = []
    if not len(measured):
        return pd.DataFrame(rows, columns=AGAINST_COLUMNS)
    timesliced = measured[measured["mode"] == "timeslice"].set_index(["a", "b"])
    for mode in mode_order(measured["mode"]):
        if mode == "timeslice":
            continue
        mine = measured[measured["mode"] == mode].set_index(["a", "b"])
        common = mine.index.intersection(timesliced.index)
        if not len(common):
            continue
        mine, theirs = mine.loc[common], timesliced.loc[common]
        difference = mine.packing_saving - theirs.packing_saving
        same_gpu = mine.gpu.notna() & (mine.gpu == theirs.gpu)
        noise = difference[mine.waited_seconds < NO_WAIT_SECONDS]
        rows.append(
            {
                "mode": mode,
                "pairs": len(common),
                "same_gpu": int(same_gpu.sum()),
                "saving_median": mine.packing_saving.median(),
                "timeslice_saving_median": theirs.packing_saving.median(),
                "difference_median": difference.median(),
                "difference_min": difference.min(),
                "difference_max": difference.max(),
                "lower": int((difference < 0).sum()),
                "at_or_above_timeslice": bool(mine.packing_saving.median() >= theirs.packing_saving.median()),
                "no_wait": len(noise),
                "no_wait_difference_min": noise.min(),
                "no_wait_difference_max": noise.max(),
            }
        )
    return pd.DataFrame(rows, columns=AGAINST_COLUMNS)


def examples(runs: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per side of a measured pair: the side's and the other's solo profiles, their GPU shares, the side's
    solo seconds, and its measured slowdown (the target)."""
    profiles = runs.set_index("key")
    rows = []
    for _, pair in measured_pairs(runs, pairs).iterrows():
        for me, other in (("a", "b"), ("b", "a")):
            rows.append(
                _features(
                    profiles.loc[pair[f"solo_{me}_key"]],
                    profiles.loc[pair[f"solo_{other}_key"]],
                    *(
                        compute_share(pair.get(f"compute_limit_{side}"), pair.get(f"compute_share_{side}"))
                        for side in (me, other)
                    ),
                )
                | {
                    "slowdown": pair[f"slowdown_{me}"],
                    "group": pair["group"],
                    "pair_key": pair["pair_key"],
                    "side": me,
                    "mode": pair["mode"],
                }
            )
    return pd.DataFrame(rows)


def _features(me: pd.Series, other: pd.Series, my_share=(1.0, 0.0), other_share=(1.0, 0.0)) -> dict:
    """A side's features; the shares are compute_share's (most, least), time-slicing's by default."""
    found = {f"self_{c}": float(me[c]) for c in PROFILE} | {f"other_{c}": float(other[c]) for c in PROFILE}
    return found | {
        "self_share": my_share[0],
        "other_share": other_share[0],
        "self_log_solo_seconds": float(np.log(me["duration_seconds"])),
        "other_log_solo_seconds": float(np.log(other["duration_seconds"])),
        "self_share_min": my_share[1],
        "other_share_min": other_share[1],
    }


def feature_names(data: pd.DataFrame | None = None) -> list[str]:
    """The model's features: both profiles, the most of the GPU each side may get (`*_share`) and its solo seconds,
    then the least each is promised (`*_share_min`, OPTIONAL: only where it varies over `data`'s examples)."""
    names = (
        [f"self_{c}" for c in PROFILE]
        + [f"other_{c}" for c in PROFILE]
        + ["self_share", "other_share", "self_log_solo_seconds", "other_log_solo_seconds"]
    )
    return names + [n for n in OPTIONAL if data is not None and n in data and data[n].nunique() > 1]


def _models() -> dict:
    from sklearn.dummy import DummyRegressor
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.linear_model import RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return {
        "mean (baseline)": DummyRegressor(),
        "ridge": make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-3, 3, 13))),
        "random forest": RandomForestRegressor(n_estimators=200, min_samples_leaf=2, random_state=SEED, n_jobs=1),
    }


@dataclass
class Interference:
    pairs: int  # distinct measured pairs
    sides: int  # examples (two per pair and mode)
    fitted: bool
    reason: str = ""
    cv: pd.DataFrame = field(default_factory=pd.DataFrame)  # per model: MAE, RMSE of slowdown, out of fold
    best: str = ""
    ranked: pd.DataFrame = field(default_factory=pd.DataFrame)  # measured pairs: predicted vs measured saving
    ranking_error: dict = field(default_factory=dict)  # MAE of saving, Spearman, top-k hit
    candidates: pd.DataFrame = field(default_factory=pd.DataFrame)  # unmeasured pairs, by predicted saving
    measured: pd.DataFrame = field(default_factory=pd.DataFrame)


def analyse(runs: pd.DataFrame, pairs: pd.DataFrame, min_pairs: int = MIN_PAIRS, top: int = 10) -> Interference:
    from scipy.stats import spearmanr
    from sklearn.base import clone
    from sklearn.model_selection import GroupKFold

    measured = measured_pairs(runs, pairs)
    data = examples(runs, pairs)
    groups = int(measured["group"].nunique()) if len(measured) else 0
    result = Interference(pairs=groups, sides=len(data), fitted=False, measured=measured)
    if groups < min_pairs:
        result.reason = (
            f"{groups} distinct measured pairs ({len(measured)} with their modes): a model needs {min_pairs}"
        )
        return result
    names = feature_names(data)
    features = data[names].astype(float)
    fill = features.median().fillna(0.0)  # a profile value a run lacks is the median of the others
    X, y = features.fillna(fill).to_numpy(float), data["slowdown"].to_numpy(float)
    folds = GroupKFold(n_splits=min(5, groups))
    predictions, rows = {}, []
    for name, model in _models().items():
        oof = np.empty(len(y))
        for train, test in folds.split(X, y, data["group"]):
            oof[test] = clone(model).fit(X[train], y[train]).predict(X[test])
        predictions[name] = oof
        rows.append(
            {"model": name, "mae": float(np.mean(np.abs(oof - y))), "rmse": float(np.sqrt(np.mean((oof - y) ** 2)))}
        )
    result.cv = pd.DataFrame(rows)
    result.best = result.cv.sort_values("mae").iloc[0]["model"]
    data["predicted_slowdown"] = predictions[result.best]
    result.ranked = _ranked(measured, data)
    rho = spearmanr(result.ranked["predicted_saving"], result.ranked["packing_saving"]).statistic
    k = max(1, len(result.ranked) // 4)
    best_measured = set(result.ranked.nlargest(k, "packing_saving").pair_key)
    best_predicted = set(result.ranked.nlargest(k, "predicted_saving").pair_key)
    result.ranking_error = {
        "saving_mae": float((result.ranked.predicted_saving - result.ranked.packing_saving).abs().mean()),
        "spearman": float(rho),
        "top_quarter": k,
        "top_quarter_hits": len(best_measured & best_predicted),
    }
    result.fitted = True
    final = clone(_models()[result.best]).fit(X, y)
    result.candidates = _candidates(runs, measured, final, names, fill).head(top)
    return result


def _ranked(measured: pd.DataFrame, data: pd.DataFrame) -> pd.DataFrame:
    predicted = data.pivot_table(index="pair_key", columns="side", values="predicted_slowdown")
    ranked = measured.set_index("pair_key")[
        ["mode", "a", "b", "solo_a_seconds", "solo_b_seconds", "slowdown_a", "slowdown_b", "packing_saving"]
    ].copy()
    ranked["predicted_slowdown_a"] = predicted["a"]
    ranked["predicted_slowdown_b"] = predicted["b"]
    ranked["predicted_saving"] = packing_saving(
        ranked.solo_a_seconds,
        ranked.solo_b_seconds,
        ranked.solo_a_seconds * (1 + ranked.predicted_slowdown_a),
        ranked.solo_b_seconds * (1 + ranked.predicted_slowdown_b),
    )
    return ranked.sort_values("predicted_saving", ascending=False).reset_index()


def _candidates(runs: pd.DataFrame, measured: pd.DataFrame, model, names: list[str], fill: pd.Series) -> pd.DataFrame:
    """Every pair of solo configurations (repeat 0) not measured together, under time-slicing, by predicted saving."""
    solo = runs[(runs.role == "solo") & (runs.status == "ok") & (runs.run_repeat == 0)]
    solo = solo.dropna(subset=["duration_seconds", "gpu_util_ratio_mean"])
    solo = solo.set_index("key")
    seen = set(measured["group"])
    pairs = [
        (a, b) for a, b in combinations_with_replacement(sorted(solo.index), 2) if "+".join(sorted((a, b))) not in seen
    ]
    if not pairs:
        return pd.DataFrame()
    sides = [_features(solo.loc[me], solo.loc[other]) for a, b in pairs for me, other in ((a, b), (b, a))]
    predicted = model.predict(pd.DataFrame(sides)[names].astype(float).fillna(fill).to_numpy(float))  # one call for all
    sa, sb = predicted[0::2], predicted[1::2]
    ta = solo.loc[[a for a, _ in pairs], "duration_seconds"].to_numpy(float)
    tb = solo.loc[[b for _, b in pairs], "duration_seconds"].to_numpy(float)
    found = pd.DataFrame(
        {
            "a": [a for a, _ in pairs],
            "b": [b for _, b in pairs],
            "predicted_slowdown_a": sa,
            "predicted_slowdown_b": sb,
            "predicted_saving": packing_saving(ta, tb, ta * (1 + sa), tb * (1 + sb)),
        }
    )
    return found.sort_values("predicted_saving", ascending=False, kind="stable").reset_index(drop=True)


def plot(result: Interference, path, title: str = "") -> None:
    """Left: measured slowdowns and savings of every pair and mode; right (when fitted): predicted vs measured
    saving."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5))
    m = result.measured
    if len(m) > 12:  # too many to label: each mode's distribution of slowdowns (both sides) and savings
        names = mode_order(m["mode"])
        slowdowns = [
            100 * np.concatenate([m[m["mode"] == mode].slowdown_a, m[m["mode"] == mode].slowdown_b]) for mode in names
        ]
        savings = [100 * m[m["mode"] == mode].packing_saving.to_numpy() for mode in names]
        x = np.arange(len(names))
        left.boxplot(slowdowns, positions=x - 0.2, widths=0.35, patch_artist=True, boxprops={"facecolor": "C0"})
        left.boxplot(savings, positions=x + 0.2, widths=0.35, patch_artist=True, boxprops={"facecolor": "C2"})
        left.set_xticks(x, [f"{mode}\n({len(v)} pairs)" for mode, v in zip(names, savings)])
        left.set_ylabel("%: slowdown of each side (blue), packing saving (green)")
    elif len(m):
        # one job per line: two jobs on one line run into the next bar's label from 4 bars on
        labels = [f"{r.mode}\n{_short(r.a)}\n+ {_short(r.b)}" for r in m.itertuples()]
        x = np.arange(len(m))
        left.bar(x - 0.27, m.slowdown_a * 100, 0.27, label="slowdown a")
        left.bar(x, m.slowdown_b * 100, 0.27, label="slowdown b")
        left.bar(x + 0.27, m.packing_saving * 100, 0.27, label="packing saving")
        left.set_xticks(x, labels, fontsize=7, rotation=0 if len(m) < 6 else 90)
        left.set_ylabel("%")
        left.legend()
    else:  # no pairs yet: a sentence, not empty axes
        left.text(
            0.5, 0.5, "no pair that counts yet (superseded ones are left out)", ha="center", va="center", fontsize=10
        )
        left.set_axis_off()
    left.set_title(f"{title}measured pairs ({result.pairs} distinct, {len(m)} with their modes)")
    if result.fitted:
        r = result.ranked
        right.scatter(r.packing_saving * 100, r.predicted_saving * 100)
        lo, hi = (
            100 * min(r.packing_saving.min(), r.predicted_saving.min()),
            100 * max(r.packing_saving.max(), r.predicted_saving.max()),
        )
        right.plot([lo, hi], [lo, hi], color="grey", linestyle="--")
        right.set_xlabel("measured packing saving (%)")
        right.set_ylabel("predicted packing saving (%), out of fold")
        e = result.ranking_error
        right.set_title(
            f"{title}{result.best}: saving MAE {100 * e['saving_mae']:.1f} points, Spearman {e['spearman']:.2f}"
        )
    else:
        right.text(0.5, 0.5, "no model: " + result.reason, ha="center", va="center", wrap=True, fontsize=10)
        right.set_axis_off()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _short(key: str) -> str:
    parts = key.split("/")
    return f"{parts[1]} {parts[2]}" if len(parts) > 2 else key
