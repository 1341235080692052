"""`python -m alnair.dataset.analyze`: the committed report embeds every committed figure, and a run writes the
report, its figures and tables, with the published values reproduced beside the dictionary's."""
from __future__ import annotations

import re

from alnair.dataset import analyze, ranking, sources


def linked_figures(report: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report)


def test_the_committed_report_embeds_every_committed_figure():
    report = (sources.ANALYSIS / "report.md").read_text()
    linked = linked_figures(report)
    assert sorted(linked) == sorted(p.name for p in sources.ANALYSIS.glob("*.png"))
    for name in linked:
        assert (sources.ANALYSIS / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_writes_the_report_figures_and_tables(tmp_path, monkeypatch):
    # the feature ranking's searches are most of the run (test_feature_ranking checks them): the smallest ones here
    monkeypatch.setattr(ranking, "FOREST_GRID", {"max_depth": [6], "max_features": [10], "n_estimators": [10]})
    monkeypatch.setattr(ranking, "ALPHAS", [0.1, 10])
    monkeypatch.setattr(ranking, "FOLDS", 3)
    path = analyze.run(tmp_path)
    report = path.read_text()
    assert len(linked_figures(report)) == 9 and len(list(tmp_path.glob("*.png"))) == 9
    assert "MaGTSAMP 0.81 / 0.81, Min_GPU_Util_% 0.80 / 0.80, MiGTSAMP 0.70 / 0.70" in report
    assert "ours 3.177 and 2.448; paired correctly 0.723 and 0.608" in report
    assert "No slowdown model: 2 distinct measured pairs" in report  # the calibration pairs
    for table in ("ranking-published-MGUP.csv", "interpolation-campaign.csv", "clusters-published.csv",
                  "pairs-measured.csv"):
        assert (tmp_path / table).stat().st_size > 0
