"""The rules files pass `promtool check rules`, and their unit tests (rules/*.yaml) pass `promtool test rules`; those
tests cover every alert (it fires, it stays silent, it waits out its for:) and every recorded series."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from dashboard_support import RULE_FILES
from support import require_binary

UNIT_TESTS = sorted((Path(__file__).parent / "rules").glob("*_test.yaml"))


def rules(kind: str) -> dict[str, dict]:
    """Every rule of the committed rules files with `kind` (alert or record), by name."""
    return {
        r[kind]: r
        for path in RULE_FILES
        for g in yaml.safe_load(path.read_text())["groups"]
        for r in g["rules"]
        if kind in r
    }


def cases(kind: str) -> list[dict]:
    """The unit tests' alert_rule_test or promql_expr_test entries."""
    return [c for path in UNIT_TESTS for test in yaml.safe_load(path.read_text())["tests"] for c in test.get(kind, [])]


def minutes(duration: str) -> float:
    value, unit = re.fullmatch(r"(\d+)([smh])", duration).groups()
    return int(value) * {"s": 1 / 60, "m": 1, "h": 60}[unit]


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_promtool_check_rules_is_clean(path):
    check = subprocess.run([require_binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS" in check.stdout and "WARN" not in check.stdout + check.stderr, (
        check.stdout + check.stderr
    )


def test_promtool_unit_tests_pass():
    run = subprocess.run(
        [require_binary("promtool"), "test", "rules", *map(str, UNIT_TESTS)],
        capture_output=True,
        text=True,
        cwd=UNIT_TESTS[0].parent,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("SUCCESS") == len(UNIT_TESTS)


def test_every_alert_is_tested_firing_silent_and_pending():
    untested, tested = [], cases("alert_rule_test")
    for name, rule in rules("alert").items():
        mine = [c for c in tested if c["alertname"] == name]
        firing = [minutes(c["eval_time"]) for c in mine if c["exp_alerts"]]
        silent = [minutes(c["eval_time"]) for c in mine if not c["exp_alerts"]]
        hold = minutes(rule["for"])
        # honours for: silent less than `for` before it fires, while the condition already held
        pending = hold == 0 or any(0 < f - s < hold for f in firing for s in silent)
        if not (firing and silent and pending):
            untested.append(f"{name}: firing at {firing}, silent at {silent}, for {rule['for']}")
    assert untested == []


def test_every_recorded_series_is_tested_with_its_labels_and_value():
    tested = {c["expr"].split()[0] for c in cases("promql_expr_test") if c["exp_samples"]}
    assert sorted(set(rules("record")) - tested) == []
