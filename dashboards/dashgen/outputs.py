"""Every generated file, by its path in the repository: the dashboards' JSON, the rules files, docs/dashboards.md,
dashboards/README.md with its list of recorded series and docs/dcgm-migration.md with its table of names."""

from __future__ import annotations

from pathlib import Path

from . import dataset_cache, docs, exporter_health, gpu_sharing, node_gpus, rulefiles, training
from .render import render

ROOT = Path(__file__).resolve().parents[2]  # the repository: dashboards/dashgen/outputs.py
DASHBOARDS = (
    node_gpus.DASHBOARD,
    gpu_sharing.DASHBOARD,
    training.DASHBOARD,
    dataset_cache.DASHBOARD,
    exporter_health.DASHBOARD,
)
README = "dashboards/README.md"
DCGM_MIGRATION = "docs/dcgm-migration.md"


def outputs() -> dict[str, str]:
    files = {f"dashboards/json/{docs.file_name(d)}": render(d) for d in DASHBOARDS}
    files["dashboards/rules/recording.yaml"] = rulefiles.recording_rules()
    files["dashboards/rules/alerts.yaml"] = rulefiles.alert_rules()
    files["dashboards/rules/v04-compat.yaml"] = rulefiles.compatibility_rules()
    files["dashboards/rules/dcgm-names.yaml"] = rulefiles.dcgm_name_rules()
    files["docs/dashboards.md"] = docs.page(DASHBOARDS)
    files[README] = docs.with_recorded_list((ROOT / README).read_text())
    files[DCGM_MIGRATION] = docs.with_dcgm_table((ROOT / DCGM_MIGRATION).read_text())
    return files
