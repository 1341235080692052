"""How far repeated solo runs of one configuration differ: the variance a measured difference must exceed to mean
anything (a pair's slowdown, a batch size's effect), split by whether the two runs had the same GPU. The campaign's
GPU machine is lent per session, so runs of different sessions ran on different H200s and hosts. A pair's baseline
rows (its configuration run alone again on the pair's GPU) are repeats too."""

from __future__ import annotations

from itertools import combinations

import pandas as pd

from .sources import solo_runs
from .tables import SETTINGS_COLUMNS, row_gpus

METRICS = ("duration_seconds", "step_seconds_p50", "time_to_first_step_seconds", "gpu_util_ratio_mean")


def differences(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per two ok runs alone (solo or baseline) of a configuration: their keys, whether they ran on the same
    GPUs, and each metric's relative difference, later / earlier - 1."""
    rows = []
    for _, group in solo_runs(runs, ("solo", "baseline")).groupby(list(SETTINGS_COLUMNS), dropna=False, sort=False):
        for (_, first), (_, second) in combinations(group.iterrows(), 2):  # in the order they started
            row = {
                "key": first["key"],
                "other_key": second["key"],
                "same_gpu": row_gpus(first.to_dict()) == row_gpus(second.to_dict()),
            }
            for metric in METRICS:
                row[metric] = second[metric] / first[metric] - 1 if first[metric] else float("nan")
            rows.append(row)
    return pd.DataFrame(rows, columns=["key", "other_key", "same_gpu", *METRICS])


def summary(found: pd.DataFrame) -> pd.DataFrame:
    """Per metric and GPU match: how many pairs of runs, and the median, 90th percentile and largest |difference|."""
    rows = []
    for same, group in found.groupby("same_gpu"):
        for metric in METRICS:
            size = group[metric].abs().dropna()
            rows.append(
                {
                    "runs_on": "one GPU" if same else "two GPUs",
                    "metric": metric,
                    "pairs_of_runs": len(size),
                    "median_abs": size.median(),
                    "p90_abs": size.quantile(0.9),
                    "max_abs": size.max(),
                }
            )
    return pd.DataFrame(rows, columns=["runs_on", "metric", "pairs_of_runs", "median_abs", "p90_abs", "max_abs"])


def machines(runs: pd.DataFrame, metric: str = "duration_seconds") -> pd.DataFrame:
    """Per GPU: its ok runs alone against the same configurations' runs on other GPUs, each run's `metric` / the
    median of the others - 1; how many runs had a comparison, the median, the range and the share that were lower.
    A machine that is faster for every configuration shows here, where the pairwise differences only widen."""
    alone = solo_runs(runs, ("solo", "baseline"))
    gpus = pd.Series([",".join(sorted(row_gpus(row))) for row in alone.to_dict("records")], index=alone.index)
    ratios = []
    for _, group in alone.groupby(list(SETTINGS_COLUMNS), dropna=False, sort=False):
        for index, value in group[metric].items():
            others = group.loc[gpus[group.index] != gpus[index], metric]
            if len(others) and others.median():
                ratios.append({"gpu": gpus[index], "ratio": value / others.median() - 1})
    columns = ["gpu", "runs", "median", "min", "max", "share_lower"]
    if not ratios:
        return pd.DataFrame(columns=columns)
    by_gpu = pd.DataFrame(ratios).groupby("gpu")["ratio"]
    table = by_gpu.agg(
        runs="size", median="median", min="min", max="max", share_lower=lambda ratio: (ratio < 0).mean()
    ).reset_index()
    return table.sort_values("median", kind="stable").reset_index(drop=True)[columns]


def plot(found: pd.DataFrame, path, title: str = "") -> None:
    """Each metric's |relative difference| between repeats, one point per two runs, by whether they shared a GPU."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for offset, (same, colour) in zip((-0.12, 0.12), ((True, "tab:blue"), (False, "tab:orange"))):
        group = found[found.same_gpu == same]
        for i, metric in enumerate(METRICS):
            values = 100 * group[metric].abs().dropna()
            ax.scatter(
                [i + offset] * len(values),
                values,
                color=colour,
                alpha=0.7,
                label=("one GPU" if same else "two GPUs") if i == 0 else None,
            )
    ax.set_xticks(range(len(METRICS)), METRICS, fontsize=8)
    ax.set_ylabel("|later / earlier - 1| (%)")
    ax.set_title(f"{title}repeats of one configuration ({len(found)} pairs of runs)")
    ax.legend(title="the two runs on")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
