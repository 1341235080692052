"""The chart as Helm sees it: lint strict for every ci/ value file on the oldest and a recent supported Kubernetes,
every ci/ file renders, every object it renders validates against Kubernetes 1.29 and 1.33 (the custom resources
against their vendored CRD schemas), and a render is the same every time."""

from __future__ import annotations

import re
import tomllib

import helm_python as helm
import pytest
import yaml

from chart_support import (
    CHART,
    CI_VALUES,
    KUBERNETES_VERSIONS,
    ROOT,
    ci_values,
    objects,
    render_files,
    validation_errors,
)

CI_IDS = [p.name for p in CI_VALUES]


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_ci_files_cover_the_main_combinations():
    assert {p.stem for p in CI_VALUES} == {
        "default-values",
        "everything-values",
        "tls-auth-secret-values",
        "existing-redis-values",
        "existing-redis-cluster-values",
        "injector-cert-manager-values",
        "injector-existing-secret-values",
    }


@pytest.mark.parametrize("kube_version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values_file", CI_VALUES, ids=CI_IDS)
def test_lint_strict_is_clean(values_file, kube_version):
    report = helm.lint(str(CHART), ci_values(values_file), strict=True, kube_version=f"v{kube_version}")
    assert report["errors"] == []
    # Severity 1 is INFO: the only one is Chart.yaml's missing icon (the project has no icon to point at).
    assert [m for m in report["messages"] if m["severity"] >= 2] == []
    assert [m["error"] for m in report["messages"]] in ([], ["icon is recommended"])


def test_chart_is_v2_for_kubernetes_1_29_and_later_and_never_asks_the_capabilities():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["apiVersion"], chart["kubeVersion"], chart["appVersion"]) == ("v2", ">=1.29.0-0", project_version())
    # Helm enforces kubeVersion at install; lint does not. What a template renders never depends on the cluster:
    # monitors are their own values, not gated on the CRDs being present.
    assert [p.name for p in (CHART / "templates").rglob("*") if p.is_file() and ".Capabilities" in p.read_text()] == []


@pytest.mark.parametrize("values_file", CI_VALUES, ids=CI_IDS)
def test_every_object_validates_against_kubernetes_and_its_crd(values_file):
    found = objects(ci_values(values_file))
    assert found
    problems = {
        (o["kind"], o["metadata"]["name"], version): errors
        for o in found
        for version in KUBERNETES_VERSIONS
        if (errors := validation_errors(o, version))
    }
    assert problems == {}


@pytest.mark.parametrize("values_file", CI_VALUES, ids=CI_IDS)
def test_rendering_twice_is_identical(values_file):
    values = ci_values(values_file)
    assert render_files(values) == render_files(values)


def test_no_template_calls_a_clock_a_random_source_or_the_cluster():
    forbidden = re.compile(
        r"\b(now|date|dateInZone|unixEpoch|randAlpha|randAlphaNum|randNumeric|randAscii|randBytes|randInt|"
        r"uuidv4|genCA|genCAWithKey|genPrivateKey|genSelfSignedCert|genSelfSignedCertWithKey|genSignedCert|"
        r"genSignedCertWithKey|derivePassword|htpasswd|bcrypt|lookup|getHostByName)\b"
    )

    def actions(text: str) -> str:
        return " ".join(
            re.findall(r"\{\{(.*?)\}\}", re.sub(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", "", text, flags=re.S), re.S)
        )

    used = {
        str(p.relative_to(CHART)): sorted(set(forbidden.findall(actions(p.read_text()))))
        for p in (CHART / "templates").rglob("*")
        if p.is_file()
    }
    assert {path: names for path, names in used.items() if names} == {}


def test_every_kind_of_object_is_rendered_by_some_ci_file():
    kinds = {o["kind"] for values_file in CI_VALUES for o in objects(ci_values(values_file))}
    assert kinds == {
        "DaemonSet",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Service",
        "ConfigMap",
        "Secret",
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "StatefulSet",
        "Deployment",
        "MutatingWebhookConfiguration",
        "Certificate",
        "Issuer",
        "Pod",
        "NetworkPolicy",
    }
