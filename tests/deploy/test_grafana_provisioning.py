"""deploy/compose's Grafana provisioning, checked without a Grafana server (none can be installed here): each file
field by field against Grafana's provisioning format (grafana_provisioning.py says where each rule comes from), each
broken variant refused, and the files agree with the compose file and prometheus.yml: the provider's path is where
the generated dashboards are mounted, the data source is the compose file's Prometheus."""

from __future__ import annotations

import copy
import json

import pytest

from compose_files import COMPOSE_DIR, bind_mounts, flag, host_path, load
from grafana_provisioning import datasource_problems, provider_problems
from support import ROOT

PROVISIONING = COMPOSE_DIR / "grafana" / "provisioning"
DATASOURCES = load(PROVISIONING / "datasources" / "alnair.yaml")
PROVIDERS = load(PROVISIONING / "dashboards" / "alnair.yaml")


def test_the_files_are_well_formed():
    assert datasource_problems(DATASOURCES) == []
    assert provider_problems(PROVIDERS) == []


def mutated(doc: dict, change) -> dict:
    broken = copy.deepcopy(doc)
    change(broken)
    return broken


BROKEN_DATASOURCES = {
    "a misspelt key": (lambda d: d["datasources"][0].update(isDefualt=True), "unknown key 'isDefualt'"),
    "no type": (lambda d: d["datasources"][0].pop("type"), "type is required"),
    "a bad access mode": (lambda d: d["datasources"][0].update(access="browser"), "access must be proxy or direct"),
    "two defaults": (
        lambda d: d["datasources"].append({**d["datasources"][0], "name": "Other", "uid": "other"}),
        "organization 1 has 2 default data sources",
    ),
    "a string for a flag": (lambda d: d["datasources"][0].update(editable="no"), "editable must be bool"),
    "a bad UID": (lambda d: d["datasources"][0].update(uid="alnair prometheus"), "is not a Grafana UID"),
    "another API version": (lambda d: d.update(apiVersion=2), "apiVersion must be 1"),
    "an unknown section": (lambda d: d.update(datasource=[]), "unknown top-level key 'datasource'"),
}


@pytest.mark.parametrize("case", BROKEN_DATASOURCES)
def test_a_broken_datasource_file_is_refused(case):
    change, expected = BROKEN_DATASOURCES[case]
    problems = datasource_problems(mutated(DATASOURCES, change))
    assert any(expected in p for p in problems), problems


BROKEN_PROVIDERS = {
    "a misspelt key": (lambda d: d["providers"][0].update(allowUIUpdates=True), "unknown key 'allowUIUpdates'"),
    "no path": (lambda d: d["providers"][0]["options"].pop("path"), "path is required"),
    "a relative path": (lambda d: d["providers"][0]["options"].update(path="dashboards"), "is not absolute"),
    "an unknown option": (lambda d: d["providers"][0]["options"].update(folder="x"), "unknown key 'folder'"),
    "folders from files and a folder": (
        lambda d: d["providers"][0]["options"].update(foldersFromFilesStructure=True),
        "cannot be combined",
    ),
    "two providers of one name": (lambda d: d["providers"].append(copy.deepcopy(d["providers"][0])), "is not unique"),
    "a provider type Grafana lacks": (lambda d: d["providers"][0].update(type="git"), "only the file provider"),
    "a string for a number": (
        lambda d: d["providers"][0].update(updateIntervalSeconds="30"),
        "updateIntervalSeconds must be int",
    ),
}


@pytest.mark.parametrize("case", BROKEN_PROVIDERS)
def test_a_broken_provider_file_is_refused(case):
    change, expected = BROKEN_PROVIDERS[case]
    problems = provider_problems(mutated(PROVIDERS, change))
    assert any(expected in p for p in problems), problems


def test_grafana_reads_both_files_from_its_provisioning_folders():
    mounts = bind_mounts("grafana")
    assert mounts["/etc/grafana/provisioning/datasources"] == PROVISIONING / "datasources"
    assert mounts["/etc/grafana/provisioning/dashboards"] == PROVISIONING / "dashboards"


def test_the_provider_reads_the_generated_dashboards():
    [provider] = PROVIDERS["providers"]
    folder = host_path("grafana", provider["options"]["path"])
    assert folder == ROOT / "dashboards" / "json"
    dashboards = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]
    assert len(dashboards) == 5
    # Grafana refuses a provisioned dashboard without a title; two of one uid would overwrite each other
    assert all(d["title"] for d in dashboards)
    assert len({d["uid"] for d in dashboards}) == len(dashboards)


def test_the_datasource_is_the_compose_files_prometheus_and_the_dashboards_default():
    [datasource] = DATASOURCES["datasources"]
    port = flag("prometheus", "--web.listen-address").rsplit(":", 1)[1]
    assert (datasource["type"], datasource["url"], datasource["isDefault"]) == (
        "prometheus",
        f"http://localhost:{port}",
        True,
    )
    # each dashboard's data source variable offers Prometheus data sources and starts on the default one
    for path in sorted((ROOT / "dashboards" / "json").glob("*.json")):
        [variable] = [v for v in json.loads(path.read_text())["templating"]["list"] if v["name"] == "datasource"]
        assert (variable["type"], variable["query"], variable.get("current")) == ("datasource", "prometheus", None), (
            path
        )


def test_grafanas_rate_interval_follows_the_scrape_interval():
    [datasource] = DATASOURCES["datasources"]
    prometheus = load(host_path("prometheus", flag("prometheus", "--config.file")))
    assert datasource["jsonData"]["timeInterval"] == prometheus["global"]["scrape_interval"]
