"""The PrometheusRule is dashgen's rules: templates/_rules.tpl is generated from dashboards/dashgen (and current),
the rendered rules with default values are exactly dashboards/rules/*.yaml, with other settings exactly what
dashgen makes of those settings, and they pass promtool check rules."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml

from chart_support import CHART, ROOT, objects, one

sys.path.insert(0, str(ROOT / "dashboards"))  # not helm/: its alnair/ (the chart) would shadow the package
from chartgen import rules as chart_rules  # noqa: E402
from dashgen import alerts  # noqa: E402

RULES = ROOT / "dashboards" / "rules"
ALL_GROUPS = {"prometheusRule": {"enabled": True, "v04Compat": True, "dcgmNames": True}}


def rule_groups(values: dict) -> list[dict]:
    return one(objects(values), "PrometheusRule")["spec"]["groups"]


def committed(*files: str) -> list[dict]:
    return [g for f in files for g in yaml.safe_load((RULES / f).read_text())["groups"]]


def values_settings() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]["settings"]


def test_the_generated_template_is_current():
    assert (CHART / "templates" / "_rules.tpl").read_text() == chart_rules.template(), "run make chart"


def test_the_values_table_is_dashgens_table_of_defaults():
    assert values_settings() == alerts.DEFAULTS


def test_default_rules_are_the_committed_rules_files():
    assert rule_groups({"prometheusRule": {"enabled": True}}) == committed("recording.yaml", "alerts.yaml")
    assert rule_groups(ALL_GROUPS) == committed("recording.yaml", "v04-compat.yaml", "dcgm-names.yaml", "alerts.yaml")


def test_other_settings_give_what_dashgen_makes_of_them():
    overrides = {
        "AlnairGpuTemperatureHigh": {"threshold": 78.5, "for": "10m", "severity": "critical"},
        "AlnairProcessNearMemoryLimit": {"threshold": 0.75},
        "AlnairGpuXidError": {"threshold": 3, "window": "1h"},
        "AlnairGpuMissing": {"lookback": "6h"},
        "AlnairGpuHardwareThrottling": {"reasons": "hw_slowdown|sw_thermal_slowdown"},
        "AlnairCacheHitRatioLow": {"threshold": 1, "for": "1h", "severity": "page"},
    }
    rendered = rule_groups(
        {
            "prometheusRule": {"enabled": True, "recording": False, "settings": overrides},
            "scrape": {"job": "gpu-exporters"},
        }
    )
    assert rendered == alerts.groups(overrides, job="gpu-exporters")
    temperature = next(r for g in rendered for r in g["rules"] if r["alert"] == "AlnairGpuTemperatureHigh")
    assert temperature["expr"].startswith("(alnair_nvml_temperature_celsius > 78.5)")
    assert (temperature["for"], temperature["labels"]["severity"]) == ("10m", "critical")
    down = next(r for g in rendered for r in g["rules"] if r["alert"] == "AlnairExporterDown")
    assert down["expr"] == 'up{job="gpu-exporters"} == 0'


def test_disabled_alerts_are_left_out_and_an_emptied_group_with_them():
    cache_alerts = [name for name in alerts.GROUPS["alnair-cache"]]
    groups = rule_groups(
        {
            "prometheusRule": {
                "enabled": True,
                "recording": False,
                "disabledAlerts": ["AlnairComputeThrottled", *cache_alerts],
            }
        }
    )
    names = {g["name"]: [r["alert"] for r in g["rules"]] for g in groups}
    assert "alnair-cache" not in names
    expected = {
        g["name"]: [r["alert"] for r in g["rules"] if r["alert"] != "AlnairComputeThrottled"]
        for g in alerts.groups()
        if g["name"] != "alnair-cache"
    }
    assert names == expected


def test_a_setting_dashgen_does_not_have_is_refused_by_the_schema():
    from helm_python import HelmValuesError

    with pytest.raises(HelmValuesError, match="AlnairGpuTemperatureHigh"):
        rule_groups({"prometheusRule": {"enabled": True, "settings": {"AlnairGpuTemperatureHigh": {"window": "5m"}}}})


@pytest.mark.parametrize(
    "values",
    [
        ALL_GROUPS,
        {
            "prometheusRule": {
                "enabled": True,
                "settings": {
                    "AlnairGpuTemperatureHigh": {"threshold": 90.25},
                    "AlnairTrainingDataStallHigh": {"for": "1h"},
                },
            }
        },
    ],
    ids=["all-groups", "other-settings"],
)
def test_rendered_rules_pass_promtool(values, tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus (make system-packages)"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_groups(values)}, sort_keys=False))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in rule_groups(values))
    assert f"SUCCESS: {count} rules found" in result.stdout
