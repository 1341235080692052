"""Every dashboard validates against Grafana's draft-07 dashboard JSON schema, each panel's options against its
panel type's schema (its field overrides' custom properties too) and each query against the Prometheus query's
(schemas/, vendored from grafana-foundation-sdk)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from dashboard_support import panels

SCHEMAS = Path(__file__).parent / "schemas"
PANEL_SCHEMAS = {"timeseries": "timeseries", "stat": "stat", "table": "table", "state-timeline": "statetimeline"}


# Where the schemas say "object" for what Grafana's model types as any (CUE's `_`): a field override's matcher options
# (byFrameRefID's is the query's refId, a string) and each property's value (custom.fillOpacity's is a number).
# Those are checked here instead: a "custom." property against the panel type's FieldConfig.
ANY = {"MatcherConfig": "options", "DynamicConfigValue": "value"}


def validator(name: str, definition: str | None = None) -> jsonschema.Draft7Validator:
    """The vendored schema `name`, or one of its definitions (the panel schemas have no root)."""
    schema = json.loads((SCHEMAS / f"{name}.jsonschema.json").read_text())
    for kind, field in ANY.items():
        if kind in schema.get("definitions", {}):
            schema["definitions"][kind]["properties"][field] = {}
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
    errors += override_errors(panel, kind)
    for target in panel["targets"]:
        errors += messages(QUERY, target, f"{panel['title']} query {target['refId']}")
    return errors


def override_errors(panel: dict, kind: str) -> list[str]:
    """Each field override names one of the panel's queries (byFrameRefID) and sets custom properties valid for the
    panel type."""
    errors = []
    for override in panel["fieldConfig"].get("overrides", []):
        matcher = override["matcher"]
        if matcher["id"] != "byFrameRefID" or matcher.get("options") not in {t["refId"] for t in panel["targets"]}:
            errors.append(f"{panel['title']} override: {matcher} matches none of its queries")
        for prop in override["properties"]:
            name = prop["id"].removeprefix("custom.")
            if name == prop["id"]:
                errors.append(f"{panel['title']} override {prop['id']}: not a custom property")
            else:
                errors += messages(
                    validator(kind, "FieldConfig"), {name: prop["value"]}, f"{panel['title']} override {prop['id']}"
                )
    return errors


def test_every_dashboard_validates_against_grafanas_schemas(board):
    errors = messages(DASHBOARD, board, board["title"]) + [e for p in panels(board) for e in panel_errors(p)]
    assert errors == []


@pytest.mark.parametrize(
    "break_it",
    [
        lambda b: b.update(rows=[]),  # grafanalib's schemaVersion 12 layout
        lambda b: b["panels"][1].update(unknown=1),
        lambda b: b["templating"]["list"][0].update(refresh="sometimes"),
    ],
)
def test_the_schemas_refuse_what_grafana_refuses(board, break_it):
    break_it(board)
    assert list(DASHBOARD.iter_errors(board))


@pytest.mark.parametrize(
    "override",
    [
        {"matcher": {"id": "byFrameRefID", "options": "Z"}, "properties": [{"id": "custom.fillOpacity", "value": 0}]},
        {
            "matcher": {"id": "byFrameRefID", "options": "A"},
            "properties": [{"id": "custom.fillOpacity", "value": "none"}],
        },
        {
            "matcher": {"id": "byFrameRefID", "options": "A"},
            "properties": [{"id": "custom.lineStyle", "value": {"fill": 3}}],
        },
        {"matcher": {"id": "byFrameRefID", "options": "A"}, "properties": [{"id": "unit", "value": "bytes"}]},
    ],
)
def test_the_override_check_refuses_an_unknown_query_or_a_bad_property(override):
    panel = {"title": "t", "targets": [{"refId": "A"}], "fieldConfig": {"overrides": [override]}}
    assert override_errors(panel, "timeseries")
    override["matcher"]["options"], override["properties"] = "A", [{"id": "custom.fillOpacity", "value": 0}]
    assert override_errors(panel, "timeseries") == []
