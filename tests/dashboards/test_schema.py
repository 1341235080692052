"""Every dashboard validates against Grafana's draft-07 dashboard JSON schema, each panel's options against its
panel type's schema and each query against the Prometheus query's (schemas/, vendored from grafana-foundation-sdk)."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dashboard_support import panels

SCHEMAS = Path(__file__).parent / "schemas"
PANEL_SCHEMAS = {"timeseries": "timeseries", "stat": "stat", "table": "table", "state-timeline": "statetimeline"}


def validator(name: str, definition: str | None = None) -> jsonschema.Draft7Validator:
    """The vendored schema `name`, or one of its definitions (the panel schemas have no root)."""
    schema = json.loads((SCHEMAS / f"{name}.jsonschema.json").read_text())
    if definition is not None:
        schema = {"definitions": schema["definitions"], "$ref": f"#/definitions/{definition}"}
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


DASHBOARD = validator("dashboard")
QUERY = validator("prometheus")


def messages(v: jsonschema.Draft7Validator, instance, where: str) -> list[str]:
    return [f"{where} {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(instance)]


def panel_errors(panel: dict) -> list[str]:
    kind = PANEL_SCHEMAS.get(panel["type"])
    if kind is None:
        return [f"{panel['title']}: no schema vendored for panel type {panel['type']}"]
    errors = messages(validator(kind, "Options"), panel.get("options", {}), f"{panel['title']} options")
    custom = panel["fieldConfig"]["defaults"].get("custom")
    if custom is not None:
        errors += messages(validator(kind, "FieldConfig"), custom, f"{panel['title']} fieldConfig.defaults.custom")
    for target in panel["targets"]:
        errors += messages(QUERY, target, f"{panel['title']} query {target['refId']}")
    return errors


def test_every_dashboard_validates_against_grafanas_schemas(board):
    errors = messages(DASHBOARD, board, board["title"]) + [e for p in panels(board) for e in panel_errors(p)]
    assert errors == []


@pytest.mark.parametrize("break_it", [
    lambda b: b.update(rows=[]),  # grafanalib's schemaVersion 12 layout
    lambda b: b["panels"][1].update(unknown=1),
    lambda b: b["templating"]["list"][0].update(refresh="sometimes"),
])
def test_the_schemas_refuse_what_grafana_refuses(board, break_it):
    break_it(board)
    assert list(DASHBOARD.iter_errors(board))
