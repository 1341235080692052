"""What the dashboards' tests share: the generator (dashboards/dashgen) on the path, the committed files."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dashboards"))
try:
    import dashgen.outputs  # noqa: F401  (imports grafana-foundation-sdk)
except ImportError as missing:
    pytest.fail(
        f"{missing.name} is not installed: pip install -e '.[test]' (grafana-foundation-sdk needs Python 3.11)",
        pytrace=False,
    )

DASHBOARD_FILES = sorted((ROOT / "dashboards" / "json").glob("*.json"))
RULE_FILES = sorted((ROOT / "dashboards" / "rules").glob("*.yaml"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(board: dict) -> list[dict]:
    """Every panel of a dashboard but the row headers (rows are never collapsed: their panels follow them)."""
    return [p for p in board["panels"] if p["type"] != "row"]


def targets(board: dict) -> list[tuple[dict, dict]]:
    """(panel, query) for every query of every panel."""
    return [(p, t) for p in panels(board) for t in p["targets"]]
