"""The chart rendered by Helm's own engine (helm-python-sdk bundles Helm v4's Go SDK), its objects, and their
validation: the built-in kinds by kubernetes-validate's offline schemas, the custom resources by the schemas
vendored in schemas/ (README there)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "alnair"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
SCHEMAS = Path(__file__).resolve().parent / "schemas"
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
RELEASE, NAMESPACE = "alnair", "monitoring"
CUSTOM = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-v1.json",
    ("cert-manager.io/v1", "Certificate"): "certificate-v1.json",
    ("cert-manager.io/v1", "Issuer"): "issuer-v1.json",
}


def ci_values(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def render_files(values: dict | None = None, name: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    """Template path -> rendered text, as `helm template` would print them (schema checked first)."""
    with helm.Chart.load(str(CHART)) as chart:
        return chart.render(values or {}, name=name, namespace=namespace)


def objects(values: dict | None = None, **release) -> list[dict]:
    """Every object the chart renders, in template order, NOTES.txt left out."""
    found = []
    for path, text in sorted(render_files(values, **release).items()):
        if path.endswith("NOTES.txt"):
            continue
        found += [o for o in yaml.safe_load_all(text) if o]
    return found


def notes(values: dict | None = None) -> str:
    return next(t for p, t in render_files(values).items() if p.endswith("NOTES.txt"))


def one(found: list[dict], kind: str, name: str | None = None) -> dict:
    matches = [o for o in found if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, (
        f"{len(matches)} {kind} {name or ''} in {[(o['kind'], o['metadata']['name']) for o in found]}"
    )
    return matches[0]


def closed(schema):
    """The schema with every object that lists its properties closed to others, unless it preserves unknown
    fields: what strict field validation refuses, the API server's structural schema would drop silently."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    result = {k: closed(v) if k not in ("enum", "required", "default", "example") else v for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        result["additionalProperties"] = False
    return result


@functools.cache
def custom_validator(file: str):
    schema = closed(json.loads((SCHEMAS / file).read_text()))
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta: checked for the built-in kinds
    return jsonschema.Draft7Validator(schema)


def validation_errors(obj: dict, version: str) -> list[str]:
    """Why `obj` would not be accepted by a Kubernetes `version` API server (with its CRDs), or []."""
    custom = CUSTOM.get((obj.get("apiVersion"), obj.get("kind")))
    if custom:
        return [
            f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in custom_validator(custom).iter_errors(obj)
        ]
    try:
        kubernetes_validate.validate(copy.deepcopy(obj), version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'/'.join(map(str, e.path))}: {e.message}"]
    return []
