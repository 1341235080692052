"""values.schema.json is strict: every object with fixed keys refuses others, at every level, and each kind of bad
value is refused by Helm itself before anything renders (a test per rejection); cross-value rules the schema
cannot say fail the render with one line."""

from __future__ import annotations

import json

import helm_python as helm
import pytest
import yaml

from chart_support import CHART, render_files

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
FREE_MAPS = {"global"}  # Helm's own key: a parent chart's globals, whatever they hold


def resolved(schema: dict) -> dict:
    """The schema, or the definition its $ref names."""
    return SCHEMA["definitions"][schema["$ref"].removeprefix("#/definitions/")] if "$ref" in schema else schema


def object_schemas(schema: dict, path: str = ""):
    schema = resolved(schema)
    if schema.get("type") == "object" or "properties" in schema:
        yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from object_schemas(child, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from object_schemas(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        yield from object_schemas(schema["items"], f"{path}[]")


def test_every_object_is_closed_or_a_typed_map():
    loose = [
        path
        for path, schema in object_schemas(SCHEMA)
        if path.lstrip(".") not in FREE_MAPS
        and not (
            schema.get("additionalProperties") is False
            or isinstance(schema.get("additionalProperties"), dict)
            and "type" in schema["additionalProperties"]
        )
    ]
    assert loose == []


def test_closed_objects_list_every_default_and_only_those():
    """values.yaml sets every key the schema knows (so a reader sees every setting), and the schema every key
    values.yaml has."""

    def walk(schema, value, path):
        schema = resolved(schema)
        if schema.get("additionalProperties") is False and isinstance(value, dict):
            assert set(value) <= set(schema["properties"]), path
            optional = path.startswith(".web.config") or path.endswith((".requests", ".limits"))
            assert optional or set(schema["properties"]) - set(value) <= {"global"}, path
            for name, child in value.items():
                walk(schema["properties"][name], child, f"{path}.{name}")

    walk(SCHEMA, yaml.safe_load((CHART / "values.yaml").read_text()), "")


def test_the_defaults_pass():
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema({})


REJECTED = {
    "unknown top-level key": ({"replicaCount": 2}, "replicaCount"),
    "unknown nested key": ({"exporter": {"collectors": {"gpu": {"enabled": True, "interval": "1s"}}}}, "gpu"),
    "unknown key in a list item": (
        {"exporter": {"tolerations": [{"key": "a", "operator": "Exists", "efect": "NoSchedule"}]}},
        "efect",
    ),
    "bad type: boolean as string": ({"serviceMonitor": {"enabled": "yes"}}, "enabled"),
    "bad type: port as string": ({"web": {"port": "9876"}}, "port"),
    "port out of range": ({"service": {"port": 70000}}, "port"),
    "bad enum: pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    "bad enum: log level": ({"exporter": {"logLevel": "verbose"}}, "logLevel"),
    "bad enum: log format": ({"injector": {"logFormat": "text"}}, "logFormat"),
    "bad enum: scrape scheme": ({"scrape": {"scheme": "ftp"}}, "scheme"),
    "bad enum: eviction policy": ({"redis": {"maxmemoryPolicy": "lru"}}, "maxmemoryPolicy"),
    "bad enum: probe type": ({"exporter": {"probes": {"type": "exec"}}}, "type"),
    "bad enum: issuer kind": ({"injector": {"tls": {"certManager": {"issuerRef": {"kind": "Vault"}}}}}, "kind"),
    "bad duration": ({"exporter": {"collectors": {"nvml": {"interval": "2 seconds"}}}}, "interval"),
    "bad duration in an alert": ({"prometheusRule": {"settings": {"AlnairExporterDown": {"for": "2min"}}}}, "for"),
    "alert threshold as string": (
        {"prometheusRule": {"settings": {"AlnairGpuTemperatureHigh": {"threshold": "85"}}}},
        "threshold",
    ),
    "unknown alert": ({"prometheusRule": {"settings": {"AlnairGpuOnFire": {"for": "1m"}}}}, "AlnairGpuOnFire"),
    "unknown alert disabled": ({"prometheusRule": {"disabledAlerts": ["AlnairGpuOnFire"]}}, "disabledAlerts"),
    "relative host path": ({"hostPaths": {"segments": "run/alnair/shm"}}, "segments"),
    "host path with a trailing slash": ({"hostPaths": {"library": "/opt/alnair/"}}, "library"),
    "telemetry path of another endpoint": ({"web": {"telemetryPath": "/healthz"}}, "telemetryPath"),
    "web config key the toolkit does not have": ({"web": {"config": {"tls_config": {}}}}, "tls_config"),
    "bcrypt hash of cost 4": (
        {"web": {"config": {"basic_auth_users": {"p": "$2b$04$" + "a" * 53}}}},
        "basic_auth_users",
    ),
    "plain password instead of a hash": (
        {"web": {"config": {"basic_auth_users": {"p": "secret"}}}},
        "basic_auth_users",
    ),
    "redis URL with a password": (
        {"exporter": {"collectors": {"cache": {"redisUrls": ["redis://:pw@r:6379/0"]}}}},
        "redisUrls",
    ),
    "cluster URL with a password": (
        {"exporter": {"collectors": {"cache": {"redisUrls": ["redis+cluster://:pw@a:6379,b:6379"]}}}},
        "redisUrls",
    ),
    "cluster URL without seeds": (
        {"exporter": {"collectors": {"cache": {"redisUrls": ["redis+cluster://"]}}}},
        "redisUrls",
    ),
    "two servers in one URL": (
        {"exporter": {"collectors": {"cache": {"redisUrls": ["redis://a:6379,b:6379"]}}}},
        "redisUrls",
    ),
    "bad image digest": ({"image": {"digest": "sha256:abc"}}, "digest"),
    "webhook timeout over 30 s": ({"injector": {"timeoutSeconds": 31}}, "timeoutSeconds"),
    "bad caBundle": ({"injector": {"tls": {"caBundle": "not base64!"}}}, "caBundle"),
    "bad label value": ({"commonLabels": {"team": "a b"}}, "team"),
    "bad resource quantity": ({"exporter": {"resources": {"limits": {"memory": "lots"}}}}, "memory"),
    "unknown resource": ({"exporter": {"resources": {"limits": {"nvidia.com/gpu": 1}}}}, "nvidia.com/gpu"),
    "extra arg that is not a flag": ({"exporter": {"extraArgs": ["collector.cache"]}}, "extraArgs"),
    "job with a quote": ({"scrape": {"job": 'a"b'}}, "job"),
    "job that is no label value": ({"scrape": {"job": "gpu nodes"}}, "job"),
    "network policy peer with an unknown key": (
        {"exporter": {"networkPolicy": {"from": [{"podSelectr": {}}]}}},
        "podSelectr",
    ),
    "network policy peer that is empty": ({"exporter": {"networkPolicy": {"from": [{}]}}}, "minProperties"),
    "ipBlock with a selector": (
        {"injector": {"networkPolicy": {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}}},
        "maxProperties",
    ),
    "CIDR without its length": ({"injector": {"networkPolicy": {"from": [{"ipBlock": {"cidr": "10.0.0.1"}}]}}}, "cidr"),
    "bad selector operator": (
        {
            "exporter": {
                "networkPolicy": {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchExpressions": [{"key": "team", "operator": "Equals", "values": ["ml"]}]
                            }
                        }
                    ]
                }
            }
        },
        "operator",
    ),
}


@pytest.mark.parametrize("values,named", REJECTED.values(), ids=REJECTED.keys())
def test_schema_rejects(values, named):
    with helm.Chart.load(str(CHART)) as chart:
        with pytest.raises(helm.HelmValuesError) as refused:
            chart.validate_schema(values)
    assert named in str(refused.value)
    with pytest.raises(helm.HelmValuesError):  # and a render refuses them the same way
        render_files(values)


FAILED = {
    "web config twice": (
        {"web": {"existingSecret": "mine", "config": {"rate_limit": {"interval": "1s", "burst": 5}}}},
        "give the web config one way",
    ),
    "webhook without a certificate": ({"injector": {"enabled": True}}, "give its serving certificate one way"),
    "webhook with two certificates": (
        {
            "injector": {
                "enabled": True,
                "tls": {"existingSecret": "s", "caBundle": "QQ==", "certManager": {"enabled": True}},
            }
        },
        "give its serving certificate one way",
    ),
    "existing secret without its CA": (
        {"injector": {"enabled": True, "tls": {"existingSecret": "s"}}},
        "needs injector.tls.caBundle",
    ),
    "webhook that selects nothing": (
        {"injector": {"enabled": True, "podLabel": False, "tls": {"certManager": {"enabled": True}}}},
        "no pod would ever be sent",
    ),
    "scrape TLS over http": ({"scrape": {"tls": {"insecureSkipVerify": True}}}, "set scrape.scheme: https"),
    "a PrometheusRule with no rule": (
        {"prometheusRule": {"enabled": True, "recording": False, "alerts": False}},
        "would hold no rule",
    ),
    "an exporter policy that lets no scraper in": (
        {"exporter": {"networkPolicy": {"enabled": True}}},
        "exporter.networkPolicy.enabled needs exporter.networkPolicy.from",
    ),
    "a webhook policy that lets no API server in": (
        {"injector": {"enabled": True, "tls": {"certManager": {"enabled": True}}, "networkPolicy": {"enabled": True}}},
        "injector.networkPolicy.enabled needs injector.networkPolicy.from",
    ),
}


@pytest.mark.parametrize("values,message", FAILED.values(), ids=FAILED.keys())
def test_inconsistent_values_fail_the_render(values, message):
    with pytest.raises(helm.HelmRenderError, match=message):
        render_files(values)


def test_helm_readme_names_every_value_group_and_its_keys():
    readme = (CHART.parent / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [name for name, value in values.items() if f"`{name}`" not in readme]
    missing += [
        f"{name}.{key}"
        for name, value in values.items()
        if isinstance(value, dict) and name not in ("commonLabels",)
        for key in value
        if f"`{key}`" not in readme
    ]
    assert missing == []
