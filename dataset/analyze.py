"""The analyses on the published table and on the campaign's runs in its schema: feature ranking, synthetic rows by
interpolation, K-means with the elbow, and (campaign only) co-location interference. `python -m alnair_dataset.analyze`
writes the figures (PNG), their tables (CSV) and report.md under dataset/data/analysis/."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pandas as pd

from alnair_dataset import clustering, interference, published, ranking, repeatability, sources, superseding, synthesis

TARGETS = ("MGUP", "MGMAP")
MIN_ROWS = 6  # a table with fewer rows than this gets no feature ranking or clustering

# what the column dictionary (published/alnair-open-data-columns.md) says the original published, to set beside ours
PUBLISHED_R2 = {
    "MGUP": {"MaGTSAMP": 0.81, "Min_GPU_Util_%": 0.80, "MiGTSAMP": 0.70},
    "MGMAP": {"SMU_used": 0.51, "GTSAMPR": 0.48, "GPUPR": 0.42},
}
PUBLISHED_TOP_MGUP = ["Min_GPU_Util_%", "MaGTSAMP", "MiGTSAMP"]
PUBLISHED_TABLE_I = {"swapped": (3.17, 2.44), "paired": (0.72, 0.61)}  # linear, Inception_v3 MaGTSAMP: RMSE, MAE
PUBLISHED_CLUSTERS = {"sizes": [46, 82, 47], "centroids": [(21, 9, 5), (62, 43, 25), (89, 56, 51)]}


def _cell(value, digits: int) -> str:
    if pd.isna(value):
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.{digits}f}"
    return str(value)


def _table(frame: pd.DataFrame, digits: int = 3, index: bool = True) -> str:
    head = ([frame.index.name or ""] if index else []) + [str(c) for c in frame.columns]
    lines = ["|" + "|".join(head) + "|", "|" + "|".join("-" for _ in head) + "|"]
    for i, row in frame.iterrows():
        cells = ([str(i)] if index else []) + [_cell(v, digits) for v in row.tolist()]
        lines.append("|" + "|".join(cells) + "|")
    return "\n".join(lines)


class Report:
    """report.md and the figures and tables beside it. A run replaces the folder's earlier ones, so nothing a run no
    longer makes (the pairs' tables once every pair is superseded) stays there looking current."""

    def __init__(self, out: Path):
        self.out = out
        self.lines: list[str] = []
        for old in [*out.glob("*.csv"), *out.glob("*.png"), out / "report.md"]:
            old.unlink(missing_ok=True)

    def add(self, *lines: str) -> None:
        self.lines += list(lines)

    def figure(self, name: str, caption: str) -> Path:
        self.add(f"![{caption}]({name})", "")
        return self.out / name

    def save(self, frame: pd.DataFrame, name: str) -> None:
        # 6 decimals: a rerun writes the same file (an exact interpolant's check error is ~1e-11 of float noise)
        frame.round(6).to_csv(self.out / name, index=False)


def rank_section(report: Report, table: pd.DataFrame, label: str, tag: str, published_values: bool) -> None:
    report.add(f"### {label}", "")
    if len(table) < MIN_ROWS:
        report.add(f"{len(table)} rows: too few to rank features.", "")
        return
    for target in TARGETS:
        result = ranking.rank(table, target)
        ranks = result.ranks.join(result.weights.add_prefix("weight_"))
        report.save(ranks.reset_index(names="feature"), f"ranking-{tag}-{target}.csv")
        top = result.weights.loc[result.ranks.index[:6], [f"r2_{m}" for m in ranking.CORRELATIONS]]
        top["mean_rank"] = result.ranks["mean_rank"]
        top.index.name = "feature"
        report.add(
            f"**{target}** ({result.rows} rows, {result.weights.shape[0]} features that vary), the six best by "
            "average rank (r² Pearson, forest, Ridge, Lasso):",
            "",
            _table(top),
            "",
        )
        if published_values:
            r2 = result.weights["r2_pearson"]
            report.add(
                "Published r² (Pearson) against ours: "
                + ", ".join(f"{f} {v:.2f} / {r2[f]:.2f}" for f, v in PUBLISHED_R2[target].items())
                + "."
            )
            if target == "MGUP":
                report.add(
                    f"Published top three by average rank: {', '.join(PUBLISHED_TOP_MGUP)}; ours: "
                    f"{', '.join(result.ranks.index[:3])}."
                )
            report.add("")
        ranking.plot(result, report.figure(f"ranking-{tag}-{target}.png", f"{label}: {target} feature ranking"))


def synthesis_section(
    report: Report, table: pd.DataFrame, label: str, tag: str, published_values: bool
) -> pd.DataFrame:
    report.add(f"### {label}", "")
    scored = synthesis.scores(table)
    report.save(scored, f"interpolation-{tag}.csv")
    models = synthesis.by_model(table, "MGUP")
    if not models:
        report.add("No model was measured at two batch sizes or more: nothing to interpolate.", "")
        return synthesis.synthetic_rows(table)
    view = scored.set_index(["target", "method"])[
        ["models", "checked_models", "check_rmse", "check_mae", "held_out_points", "held_out_rmse", "held_out_mae"]
    ]
    view.index = [f"{t} {m}" for t, m in view.index]
    view.index.name = "target, method"
    report.add(
        f"Models measured at 2 or more batch sizes: {len(models)} ({', '.join(models)}).",
        "",
        "`check_*`: the notebooks' check (the measured points regenerated from the synthetic ones), mean over the "
        "checked models (those whose grid has a synthetic row between measured ones); `held_out_*`: each "
        "interior measured point predicted from the model's other points over log2 batch size, pooled over the "
        "models.",
        "",
        _table(view, 2),
        "",
    )
    most = max(s.index.nunique() for s in models.values())
    if most <= 3:
        report.add(
            f"No model here has more than {most} batch sizes: a held-out point is predicted from 2, where every "
            "method is the straight line, so the held-out columns cannot tell the methods apart yet.",
            "",
        )
    if published_values:
        series = synthesis.by_model(table, "MaGTSAMP")["Inception_v3"]
        swapped = synthesis.published_check(series, "linear", swap_128_256=True)
        paired = synthesis.published_check(series, "linear")
        report.add(
            f"Table I (linear, Inception_v3 MaGTSAMP): published RMSE {PUBLISHED_TABLE_I['swapped'][0]}, MAE "
            f"{PUBLISHED_TABLE_I['swapped'][1]} with BS 128 and 256 swapped, ours {swapped.rmse:.3f} and "
            f"{swapped.mae:.3f}; paired correctly {paired.rmse:.3f} and {paired.mae:.3f} (the dictionary: "
            f"{PUBLISHED_TABLE_I['paired'][0]} and {PUBLISHED_TABLE_I['paired'][1]}).",
            "",
        )
    synthesis.plot(
        table,
        scored,
        report.figure(f"interpolation-{tag}.png", f"{label}: interpolation over batch size"),
        title=f"{label}: ",
    )
    rows = synthesis.synthetic_rows(table)
    report.save(rows, f"synthetic-rows-{tag}.csv")
    return rows


def clustering_section(report: Report, rows: pd.DataFrame, label: str, tag: str, published_values: bool) -> None:
    report.add(f"### {label}", "")
    rows = rows.dropna(subset=list(clustering.FEATURES)).reset_index(drop=True)
    if len(rows) < MIN_ROWS:
        report.add(f"{len(rows)} rows: too few to cluster.", "")
        return
    inertia = clustering.elbow(rows)
    clusters = clustering.kmeans(rows, k=3)
    out = rows.assign(cluster=clusters.labels, distance=clusters.distance.round(3))
    report.save(out, f"clusters-{tag}.csv")
    centroids = clusters.centroids.round(1)
    centroids.index.name = "cluster"
    centroids["rows"] = clusters.sizes
    report.add(
        f"{len(rows)} rows ({int(rows.synthetic.sum())} synthetic, spline of order 2 as the notebook's input), "
        f"features {', '.join(clustering.FEATURES)}. Elbow (Kneedle: the k farthest below the chord of the scaled "
        f"inertia curve): k = {clustering.elbow_k(inertia)}; k = 3 as the notebook:",
        "",
        _table(centroids, 1),
        "",
    )
    if published_values:
        report.add(
            f"The notebook's own 175 rows (its spreadsheet, not in the CSV) gave {PUBLISHED_CLUSTERS['sizes']} "
            f"rows around {PUBLISHED_CLUSTERS['centroids']}; the rows regenerated here from the CSV differ "
            "(the spreadsheet copies NasnetMobile's MaGTSAMP from MobileNet and did not fill every column by "
            "the same method), so sizes differ while the centroids stay within a few points.",
            "",
        )
    clustering.plot(
        rows, clusters, inertia, report.figure(f"clusters-{tag}.png", f"{label}: K-means"), title=f"{label}: "
    )


def repeatability_section(report: Report, runs: pd.DataFrame, label: str) -> None:
    found = repeatability.differences(runs)
    if found.empty:
        report.add("No configuration has two ok runs alone yet.", "")
        return
    report.save(found, "repeats.csv")
    table = repeatability.summary(found)
    report.add(
        f"{len(found)} pairs of ok runs alone of one configuration (its solo runs, and the baselines a pair "
        "measured on its own GPU), each metric's |later / earlier - 1|; the GPU machine is lent per session, "
        "so runs of different sessions ran on different H200s and hosts:",
        "",
        _table(table, 3, index=False),
        "",
    )
    repeatability.plot(found, report.figure("repeats.png", "repeatability"), title=f"{label}: ")
    machines = repeatability.machines(runs)
    if len(machines):
        report.save(machines, "repeats-by-gpu.csv")
        report.add(
            "Each GPU's runs alone against the same configurations' runs on other GPUs (duration / the others' "
            "median - 1; `share_lower`: the share of its runs that were shorter). A machine faster for every "
            "configuration is a factor of its host, not noise; a pair's slowdowns are taken against baselines "
            "on the pair's own GPU for this reason:",
            "",
            _table(machines, 3, index=False),
            "",
        )


TARGET_MODE = "share-50-50"  # the sharing issue's target: its packing saving at or above time-slicing's median


def modes_section(report: Report, measured: pd.DataFrame, prefix: str = "") -> None:
    """The packing saving and slowdowns of each mode, and each mode against time-slicing on the same pairs (tables
    named with `prefix`: another GPU model's)."""
    summary = interference.by_mode(measured)
    report.save(summary, f"{prefix}pairs-by-mode.csv")
    report.add(
        "By mode (`modes.py`: `limit-*` caps each side, `share-*` promises each side its share and lends idle "
        "time; slowdowns of both sides pooled, `apart`: a pair's two slowdowns apart):",
        "",
        _table(summary, 3, index=False),
        "",
    )
    against = interference.against_timeslice(measured)
    if len(against):
        report.save(against, f"{prefix}pairs-against-timeslice.csv")
        report.add(
            "Each mode against time-slicing on the same pairs (`difference`: the mode's saving less the "
            "time-sliced one, pair by pair; `lower`: pairs that saved less; `same_gpu`: pairs whose two modes "
            "ran on one GPU, the others each against baselines of its own GPU):",
            "",
            _table(against, 3, index=False),
            "",
        )
    target = against[against["mode"] == TARGET_MODE]
    if target.empty:
        report.add(
            f"No `{TARGET_MODE}` pair measured with its time-sliced mode yet: the sharing issue's target (its "
            "packing saving at or above time-slicing's median on the same pairs) is not measured.",
            "",
        )
    else:
        t = target.iloc[0]
        report.add(
            f"The sharing issue's target: `{TARGET_MODE}` saved a median {t.saving_median:+.3f} against "
            f"time-slicing's {t.timeslice_saving_median:+.3f} on the same {t.pairs} pairs ({t.same_gpu} with "
            f"both modes on one GPU): {'at or above' if t.at_or_above_timeslice else 'below'} time-slicing's "
            f"median; pair by pair {t.difference_median:+.3f} (median), {t.lower} of {t.pairs} lower.",
            "",
        )
        if t.no_wait:
            report.add(
                f"In {t.no_wait} of the {t.pairs} no launch waited for the share, so the pair ran as time-slicing "
                f"does: their differences, {t.no_wait_difference_min:+.3f} to {t.no_wait_difference_max:+.3f}, are "
                "one run against another, the noise a difference must exceed.",
                "",
            )
        if t.same_gpu < t.pairs:
            report.add(
                f"{t.pairs - t.same_gpu} of the {t.pairs} compare savings taken on two GPUs, each against its own "
                "GPU's baselines: the target counts a pair whose modes ran on one GPU.",
                "",
            )


def measured_section(report: Report, measured: pd.DataFrame, prefix: str = "") -> None:
    """The measured pairs, one row per pair and mode, then the modes' summaries."""
    report.save(measured, f"{prefix}pairs-measured.csv")
    view = measured[["mode", "a", "b", "slowdown_a", "slowdown_b", "packing_saving"]].copy()
    report.add(
        f"{len(measured)} measured pairs and modes ({measured['group'].nunique()} distinct pairs):",
        "",
        _table(view, 3, index=False),
        "",
    )
    modes_section(report, measured, prefix)


def interference_section(report: Report, campaign: sources.Campaign) -> None:
    result = interference.analyse(campaign.runs, campaign.pairs)
    if len(result.measured):
        measured_section(report, result.measured)
    superseded = int((campaign.pairs.get("status") == superseding.STATUS).sum()) if len(campaign.pairs) else 0
    if superseded:
        report.add(
            f"Not counted: {superseded} pairs marked `{superseding.STATUS}` in pairs.csv (made before the "
            "compute limit's launch-cost fix, or against solo runs on another GPU: docs/dataset.md); the "
            "campaign measures them again.",
            "",
        )
    if not result.fitted:
        report.add(
            f"No slowdown model: {result.reason}. The model (features: both jobs' solo "
            f"{', '.join(interference.PROFILE)}, their GPU shares and solo durations; mean, Ridge and a random forest, "
            "cross-validated by pair so no pair's modes are split between training and test) runs once the campaign's "
            "pairs are in dataset/data/h200/.",
            "",
        )
    else:
        report.save(result.cv, "slowdown-cv.csv")
        report.save(result.ranked, "pairs-ranked.csv")
        report.save(result.candidates, "pairs-candidates.csv")
        e = result.ranking_error
        report.add(
            f"Slowdown models, out of fold ({min(5, result.pairs)}-fold by pair, {result.sides} sides):",
            "",
            _table(result.cv.set_index("model"), 3),
            "",
            f"Best: {result.best}. Ranking the measured pairs by its predicted packing saving: MAE "
            f"{100 * e['saving_mae']:.1f} points of saving, Spearman {e['spearman']:.2f} against the measured "
            f"ranking, {e['top_quarter_hits']} of the {e['top_quarter']} best measured pairs in the predicted "
            "top quarter.",
            "",
        )
        if len(result.candidates):
            report.add(
                "Unmeasured candidate pairs (time-slicing), best predicted saving first; a configuration beside "
                "a copy of itself (a sweep's trials) is a candidate too, though no measured pair is one:",
                "",
                _table(result.candidates, 3, index=False),
                "",
            )
    interference.plot(
        result,
        report.figure("interference.png", "co-location: slowdowns and packing saving"),
        title=f"{campaign.origin}: ",
    )


def gpu_model_section(report: Report, data: Path, model: str) -> None:
    """Co-location measured on another GPU model (the H100 share campaign): its pairs and modes, each pair against
    baselines of its own GPU; too few for a slowdown model of their own, and never pooled with the campaign's."""
    campaign = sources.load_campaign(data, model)
    measured = interference.measured_pairs(campaign.runs, campaign.pairs)
    report.add(
        f"## Co-location on the {model.upper()}",
        "",
        f"The rows in dataset/data/{model}/ ({len(campaign.pairs)} pair rows), apart from the {sources.GPU_MODELS[0]} "
        "campaign's: another GPU model, whose jobs run at other speeds.",
        "",
    )
    if len(measured):
        measured_section(report, measured, f"{model}-")


def run(out: Path = sources.ANALYSIS, data: Path = sources.DATA) -> Path:
    import matplotlib

    matplotlib.use("Agg")

    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    report = Report(out)
    original = sources.load_published(data / "published" / sources.PUBLISHED_CSV.name)
    campaign = sources.load_campaign(data)
    converted, _ = published.convert(campaign.runs)
    new_label = f"campaign ({campaign.origin})"
    report.add(
        "# The analyses",
        "",
        f"Made by `python -m alnair_dataset.analyze` (do not edit: rerun it). Inputs: the published table "
        f"({len(original)} runs, P100) and the {campaign.origin} campaign's {len(converted)} solo runs in the "
        f"published schema ({len(published.MEASURED)} of 66 columns measured) with "
        f"{len(campaign.pairs)} pair rows. Every table below is also a CSV beside this file.",
        "",
    )
    if campaign.origin == "calibration":
        report.add(
            "The campaign rows are the H200 calibration blocks (dataset/data/calibration/): smoke tests of "
            "the runner, not the campaign; their numbers show the analyses run, not what the workloads do.",
            "",
        )
    report.add("## Feature ranking", "")
    rank_section(report, original, "published", "published", True)
    rank_section(report, converted, new_label, "campaign", False)
    report.add("## Synthetic rows by interpolation over batch size", "")
    original_rows = synthesis_section(report, original, "published", "published", True)
    new_rows = synthesis_section(report, converted, new_label, "campaign", False)
    report.add("## K-means", "")
    clustering_section(report, original_rows, "published", "published", True)
    clustering_section(report, new_rows, new_label, "campaign", False)
    report.add("## Repeatability", "")
    repeatability_section(report, campaign.runs, new_label)
    report.add("## Co-location: slowdown and packing saving", "")
    interference_section(report, campaign)
    for model in sources.other_models(data, campaign.origin):
        gpu_model_section(report, data, model)
    path = out / "report.md"
    path.write_text("\n".join(report.lines).rstrip() + "\n")
    print(f"{path}: {len(list(out.glob('*.png')))} figures in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return path


def main(argv: list[str] | None = None) -> int:
    args = sources.command_line("analyze", __doc__, "analysis").parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    run(args.out or args.data / "analysis", args.data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
