"""The number of alerts a doc states ("19 alerts") is the number of alert rules shipped (dashboards/rules/alerts.yaml,
which the chart's PrometheusRule renders with its default values: tests/helm/test_chart_rules.py), so the count
cannot go stale when an alert is added or removed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "dashboards" / "rules" / "alerts.yaml"
DOCS = [
    ROOT / "README.md",
    ROOT / "helm" / "README.md",
    ROOT / "dashboards" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]


def shipped_alerts() -> int:
    return sum(
        1 for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"] if "alert" in rule
    )


def test_the_alerts_are_counted():
    assert shipped_alerts() > 0


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_stated_number_of_alerts_is_the_number_shipped(doc):
    stated = [int(n) for n in re.findall(r"\b(\d+) alerts\b", doc.read_text())]
    assert all(n == shipped_alerts() for n in stated), (
        f"{doc.name} states {stated} alerts; {ALERTS.name} has {shipped_alerts()}"
    )


def test_the_kubernetes_doc_states_the_number():
    assert re.search(r"\b\d+ alerts\b", (ROOT / "docs" / "kubernetes.md").read_text())
