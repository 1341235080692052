"""The committed dashboards, rules files and docs are what the code generates, byte for byte; the alerts render
with other thresholds when asked (the Helm chart's values), and refuse settings they do not have."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from dashboard_support import ROOT
from dashgen import alerts
from dashgen.outputs import outputs


def test_every_generated_file_is_committed_as_generated():
    stale = [
        path for path, text in outputs().items() if not (ROOT / path).is_file() or (ROOT / path).read_text() != text
    ]
    assert stale == [], "regenerate with `make dashboards` and commit: " + ", ".join(stale)


def test_the_command_checks_without_writing():
    check = subprocess.run(
        [sys.executable, "-m", "dashgen", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "dashboards"), "PATH": ""},
    )
    assert (check.returncode, check.stdout, check.stderr) == (0, "", "")


def alert(groups: list[dict], name: str) -> dict:
    return next(r for g in groups for r in g["rules"] if r.get("alert") == name)


def test_thresholds_for_durations_and_the_job_can_be_overridden():
    groups = alerts.groups(
        {
            "AlnairGpuTemperatureHigh": {"threshold": 80, "for": "10m", "severity": "critical"},
            "AlnairGpuXidError": {"window": "30m"},
        },
        job="gpu-exporters",
    )
    hot = alert(groups, "AlnairGpuTemperatureHigh")
    assert "alnair_nvml_temperature_celsius > 80" in hot["expr"] and hot["for"] == "10m"
    assert hot["labels"] == {"severity": "critical"} and "above 80 °C for 10m" in hot["annotations"]["description"]
    assert "[30m]" in alert(groups, "AlnairGpuXidError")["expr"]
    assert alert(groups, "AlnairExporterDown")["expr"] == 'up{job="gpu-exporters"} == 0'
    assert alert(groups, "AlnairRedisDown") == alert(alerts.groups(), "AlnairRedisDown")


def test_a_threshold_may_be_a_template_another_tool_fills_in():
    """The chart can render the rules once with Helm placeholders as the values."""
    groups = alerts.groups({"AlnairTrainingDataStallHigh": {"threshold": "{{ .Values.dataStall }}"}})
    assert alert(groups, "AlnairTrainingDataStallHigh")["expr"].endswith("> {{ .Values.dataStall }}")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"AlnairGpuTooHot": {"threshold": 80}}, "no alert named 'AlnairGpuTooHot'"),
        ({"AlnairGpuTemperatureHigh": {"treshold": 80}}, "AlnairGpuTemperatureHigh has no setting 'treshold'"),
    ],
)
def test_an_unknown_alert_or_setting_is_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        alerts.groups(overrides)


def test_the_table_of_defaults_and_the_alerts_name_the_same_alerts():
    defined = [name for group in alerts.GROUPS.values() for name in group]
    assert sorted(defined) == sorted(alerts.DEFAULTS)
    assert all({"for", "severity"} <= set(settings) for settings in alerts.DEFAULTS.values())


def test_every_alert_has_a_severity_and_says_what_to_do():
    rules = [
        r for g in yaml.safe_load((ROOT / "dashboards/rules/alerts.yaml").read_text())["groups"] for r in g["rules"]
    ]
    assert len(rules) == len(alerts.DEFAULTS)
    incomplete = [
        r["alert"]
        for r in rules
        if r["labels"]["severity"] not in ("critical", "warning", "info")
        or set(r["annotations"]) != {"summary", "description", "action"}
        or not all(r["annotations"].values())
    ]
    assert incomplete == []
