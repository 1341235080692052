"""`python -m alnair_dataset.analyze`: the committed report embeds every committed figure, and a run writes the
report, its figures and tables, with the published values reproduced beside the dictionary's."""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest

from alnair_dataset import analyze, card, published, ranking, sources


def linked_figures(report: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)


def test_the_committed_report_embeds_every_committed_figure():
    report = (sources.ANALYSIS / "report.md").read_text()
    linked = linked_figures(report)
    assert sorted(linked) == sorted(p.name for p in sources.ANALYSIS.glob("*.png"))
    for name in linked:
        assert (sources.ANALYSIS / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def h200(tmp_path_factory):
    """A data folder whose h200/ holds the calibration rows as one campaign, plus rows the converter must skip or
    cope with: a failed run, an incomplete one and a CPU run without GPU values."""
    data = tmp_path_factory.mktemp("data")
    shutil.copytree(sources.DATA, data, dirs_exist_ok=True, ignore=shutil.ignore_patterns("analysis", "h200"))
    campaign = sources.load_campaign(data)  # the calibration blocks: the copy has no h200/ yet
    assert campaign.origin == "calibration"
    extra = campaign.runs[campaign.runs.role == "solo"].iloc[[0, 0, 0]].copy()
    extra["key"] = ["x/failed", "x/incomplete", "x/cpu"]
    extra["status"] = ["failed", "incomplete", "ok"]
    gpu = [c for c in extra.columns if c.startswith("gpu_")]
    extra.loc[extra.key == "x/cpu", gpu] = float("nan")
    (data / "h200").mkdir()
    pd.concat([campaign.runs, extra]).to_csv(data / "h200" / "runs.csv", index=False)
    campaign.pairs.to_csv(data / "h200" / "pairs.csv", index=False)
    return data


def test_a_run_writes_the_report_figures_and_tables(h200, monkeypatch):
    # the feature ranking's searches are most of the run (test_feature_ranking checks them): the smallest ones here
    monkeypatch.setattr(ranking, "FOREST_GRID", {"max_depth": [6], "max_features": [10], "n_estimators": [10]})
    monkeypatch.setattr(ranking, "ALPHAS", [0.1, 10])
    monkeypatch.setattr(ranking, "FOLDS", 3)
    assert sources.load_campaign(h200).origin == "h200"
    table = published.write(h200 / "published-schema", h200)
    assert len(table) == 17 and table.MGUP.isna().sum() == 1  # 16 calibration runs and the CPU run
    out = h200 / "analysis"
    report = analyze.run(out, h200).read_text()
    assert "the h200 campaign's 17 solo runs" in report
    assert len(linked_figures(report)) == 10 and len(list(out.glob("*.png"))) == 10
    assert "pairs of ok runs alone of one configuration" in report and (out / "repeats.csv").is_file()
    assert "MaGTSAMP 0.81 / 0.81, Min_GPU_Util_% 0.80 / 0.80, MiGTSAMP 0.70 / 0.70" in report
    assert "ours 3.177 and 2.448; paired correctly 0.723 and 0.608" in report
    assert "No slowdown model: 2 distinct measured pairs" in report  # the calibration pairs
    assert "No `share-50-50` pair measured with its time-sliced mode yet" in report  # nor any share
    # the H100 share campaign's rows, apart: its own pairs, modes and each mode against time-slicing there
    h100 = sources.load_campaign(h200, "h100")
    assert h100.origin == "h100" and len(h100.pairs)
    assert report.count("## Co-location on the H100") == 1 and "`share-50-50` saved a median" in report
    against = pd.read_csv(out / "h100-pairs-against-timeslice.csv").set_index("mode")
    measured = pd.read_csv(out / "h100-pairs-measured.csv")
    shared = measured[measured["mode"] == "share-50-50"]
    assert against.loc["share-50-50", "pairs"] == len(shared) > 0
    assert against.loc["share-50-50", "saving_median"] == pytest.approx(shared.packing_saving.median(), abs=1e-6)
    for name in (
        "ranking-published-MGUP.csv",
        "interpolation-campaign.csv",
        "clusters-published.csv",
        "pairs-measured.csv",
        "pairs-by-mode.csv",
        "h100-pairs-by-mode.csv",
    ):
        assert (out / name).stat().st_size > 0
    ranked = pd.read_csv(out / "ranking-campaign-MGUP.csv")
    assert len(ranked) > 5 and "MGUP" not in set(ranked.feature)


def test_the_card_of_a_new_campaign_validates(h200):
    card.write(h200)
    assert card.problems(h200) == []
    paths = {r["path"] for r in json.loads((h200 / card.CARD).read_text())["resources"]}
    assert {"h200/runs.csv", "h200/pairs.csv"} <= paths


def test_a_gpu_model_without_rows_says_so(tmp_path):
    assert sources.campaign_files(tmp_path, "h100") == ("h100", [], [])
    with pytest.raises(FileNotFoundError, match="h100/runs.csv"):
        sources.load_campaign(tmp_path, "h100")
    assert sources.other_models(tmp_path, "calibration") == []
