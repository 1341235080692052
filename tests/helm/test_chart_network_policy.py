"""The opt-in NetworkPolicies: none by default; the webhook's port open to the peers given (the API server's
addresses) and nothing else of it; the exporter's metrics port open to the scrapers given and the helm test's pod,
and nothing else of it. Each rendered policy validates against Kubernetes 1.29 and 1.33."""

from __future__ import annotations

from chart_support import KUBERNETES_VERSIONS, NAMESPACE, RELEASE, objects, one, validation_errors

PROMETHEUS = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
]
CONTROL_PLANE = [
    {"ipBlock": {"cidr": "10.0.0.0/24"}},
    {"ipBlock": {"cidr": "fd00:10::/64", "except": ["fd00:10::1/128"]}},
]
INJECTOR = {"enabled": True, "tls": {"certManager": {"enabled": True}}}


def policies(found: list[dict]) -> list[dict]:
    rendered = [o for o in found if o["kind"] == "NetworkPolicy"]
    assert {
        (o["metadata"]["name"], version): errors
        for o in rendered
        for version in KUBERNETES_VERSIONS
        if (errors := validation_errors(o, version))
    } == {}
    return rendered


def selects(policy: dict, workload: dict) -> bool:
    return (
        policy["spec"]["podSelector"]["matchLabels"].items()
        <= workload["spec"]["template"]["metadata"]["labels"].items()
    )


def port_names(workload: dict) -> set[str]:
    return {p["name"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}


def test_no_network_policy_unless_enabled():
    assert policies(objects({"injector": INJECTOR})) == []
    # no webhook
    assert policies(objects({"injector": {"networkPolicy": {"enabled": True, "from": CONTROL_PLANE}}})) == []


def test_the_exporters_metrics_port_is_open_to_the_given_scrapers_and_the_helm_test_only():
    found = objects({"exporter": {"networkPolicy": {"enabled": True, "from": PROMETHEUS}}, "injector": INJECTOR})
    (policy,) = policies(found)
    exporter, test_pod = one(found, "DaemonSet"), one(found, "Pod")
    assert (policy["metadata"]["name"], policy["metadata"]["namespace"]) == (f"{RELEASE}-exporter", NAMESPACE)
    assert selects(policy, exporter) and not selects(policy, one(found, "Deployment"))
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # the exporter's own connections are left as they are
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}] and "metrics" in port_names(exporter)
    *scrapers, helm_test = rule["from"]
    assert scrapers == PROMETHEUS
    assert helm_test.keys() == {"podSelector"}  # a pod of the policy's own namespace, the release's
    assert helm_test["podSelector"]["matchLabels"].items() <= test_pod["metadata"]["labels"].items()
    assert (
        not helm_test["podSelector"]["matchLabels"].items()
        <= exporter["spec"]["template"]["metadata"]["labels"].items()
    )
    (untested,) = policies(
        objects({"exporter": {"networkPolicy": {"enabled": True, "from": PROMETHEUS}}, "tests": {"enabled": False}})
    )
    assert untested["spec"]["ingress"][0]["from"] == PROMETHEUS


def test_the_webhooks_port_is_open_to_the_api_servers_addresses_only():
    found = objects({"injector": {**INJECTOR, "port": 9443, "networkPolicy": {"enabled": True, "from": CONTROL_PLANE}}})
    (policy,) = policies(found)
    webhook = one(found, "Deployment")
    assert (policy["metadata"]["name"], policy["metadata"]["namespace"]) == (f"{RELEASE}-injector", NAMESPACE)
    assert selects(policy, webhook) and not selects(policy, one(found, "DaemonSet"))
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"from": CONTROL_PLANE, "ports": [{"port": "https", "protocol": "TCP"}]}]
    assert webhook["spec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "https", "containerPort": 9443, "protocol": "TCP"}
    ]
