"""What the chart renders, value by value: the exporter's arguments as its own parser reads them, the securityContext
of every container (the restricted profile, and each documented exception, nothing more), RBAC, volumes, probes,
the web config, the monitors, Redis, the webhook, the dashboards and the helm test."""

from __future__ import annotations

import re

import pytest
import yaml

from alnair.collectors.cache import url_label
from alnair.exporter.config import build_parser, enabled_collectors
from alnair.exporter.registry import discover_collectors
from chart_support import CHART, CI_VALUES, NAMESPACE, RELEASE, ci_values, notes, objects, one

EVERYTHING = ci_values(CHART / "ci" / "everything-values.yaml")
TLS_AUTH = ci_values(CHART / "ci" / "tls-auth-secret-values.yaml")
EXISTING_REDIS = ci_values(CHART / "ci" / "existing-redis-values.yaml")
EXISTING_CLUSTER = ci_values(CHART / "ci" / "existing-redis-cluster-values.yaml")
ROOT_CONTAINERS = {"exporter", "segment-directory", "install-intercept"}  # docs/kubernetes.md says why each
NODE = "gpu-node-7"
SECRETS = {
    ("alnair-redis", "password"): "redis-password",
    ("more-redis-urls", "urls"): "redis://:pw@other:6379/2",
    ("dataset-redis-urls", "url"): "redis://:pw@third:6379/0",
    ("cluster-redis-urls", "url"): "redis+cluster://:pw@cache-0.ml:6379,cache-1.ml:6379",
}


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"] if obj["kind"] != "Pod" else obj["spec"]


def containers(found: list[dict]):
    for obj in found:
        if obj["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Pod"):
            spec = pod_spec(obj)
            for c in spec.get("initContainers", []) + spec["containers"]:
                yield obj, spec, c


def exporter(found: list[dict]) -> dict:
    (container,) = pod_spec(one(found, "DaemonSet"))["containers"]
    assert container["name"] == "exporter"
    return container


def environment(container: dict) -> dict[str, str]:
    """The container's variables as the kubelet sets them: fieldRef and secretKeyRef resolved, $(VAR) expanded."""
    env: dict[str, str] = {}
    for e in container.get("env", []):
        source = e.get("valueFrom", {})
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "spec.nodeName"
            value = NODE
        elif "secretKeyRef" in source:
            value = SECRETS.get((source["secretKeyRef"]["name"], source["secretKeyRef"]["key"]), "secret")
        else:
            value = re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), e["value"])
        env[e["name"]] = value
    return env


def exporter_options(values: dict, monkeypatch):
    """The rendered DaemonSet's arguments and environment, read by alnair-exporter's own parser."""
    container = exporter(objects(values))
    env = environment(container)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    known = discover_collectors()
    args = [a.replace("$(NODE_NAME)", env["NODE_NAME"]) for a in container["args"]]
    options = build_parser(known).parse_args(args)
    return options, [c.name for c in enabled_collectors(options, known)]


def test_default_exporter_arguments_as_the_exporter_reads_them(monkeypatch):
    options, collectors = exporter_options({}, monkeypatch)
    assert collectors == ["cuda", "host", "nvml", "python"]
    assert (options.web_listen_address, options.web_telemetry_path, options.web_config_file) == (
        ("", 9876),
        "/metrics",
        "",
    )
    assert (options.shm_dir, options.path_procfs, options.node_name) == ("/run/alnair/shm", "/host/proc", NODE)
    assert (
        options.collector_host_interval,
        options.collector_cuda_interval,
        options.collector_python_interval,
        options.collector_nvml_interval,
        options.shm_linger,
        options.shm_max_segments,
    ) == (5, 1, 1, 2, 120, 4096)
    assert (options.web_max_requests, options.log_level, options.log_format) == (40, "info", "logfmt")


def test_collector_values_become_flags(monkeypatch):
    values = {
        "exporter": {
            "collectors": {
                "host": {"enabled": False, "interval": "10s"},
                "nvml": {"interval": "500ms"},
                "python": {"interval": "1m30s"},
            },
            "shm": {"linger": "5m", "maxSegments": 100},
            "logLevel": "warn",
            "logFormat": "json",
        },
        "web": {
            "port": 9100,
            "telemetryPath": "/alnair/metrics",
            "maxRequests": 0,
            "prioritySources": ["10.0.0.0/8", "192.168.1.7"],
        },
    }
    options, collectors = exporter_options(values, monkeypatch)
    assert collectors == ["cuda", "nvml", "python"]
    assert (options.collector_nvml_interval, options.collector_python_interval, options.shm_linger) == (0.5, 90, 300)
    assert (options.shm_max_segments, options.log_level, options.log_format, options.web_max_requests) == (
        100,
        "warn",
        "json",
        0,
    )
    assert (options.web_listen_address, options.web_telemetry_path) == (("", 9100), "/alnair/metrics")
    assert [str(n) for n in options.web_priority_sources] == ["10.0.0.0/8", "192.168.1.7/32"]


def test_the_cache_collector_reads_the_charts_redis_and_the_given_ones(monkeypatch):
    options, collectors = exporter_options(
        {k: v for k, v in EVERYTHING.items() if k != "exporter"}
        | {"exporter": {k: v for k, v in EVERYTHING["exporter"].items() if k != "extraArgs"}},
        monkeypatch,
    )
    assert "cache" in collectors and "host" not in collectors
    assert options.collector_cache_redis_url == [
        "redis://datasets-redis.ml.svc:6379/0",
        f"redis://:redis-password@alnair-redis.{NAMESPACE}.svc:6379/0",
        "redis://:pw@other:6379/2",
    ]
    assert (options.collector_cache_interval, options.collector_cache_timeout) == (10, 2)
    container = exporter(objects(EVERYTHING))
    assert not any("redis://" in a for a in container["args"]), "a URL's password would be in the process list"
    assert container["args"][-1] == "--collector.example"


def test_an_existing_redis_turns_the_cache_collector_on(monkeypatch):
    options, collectors = exporter_options(EXISTING_REDIS, monkeypatch)
    assert "cache" in collectors
    assert options.collector_cache_redis_url == [
        "redis://redis-master.datasets.svc:6379/0",
        "redis://redis-2.datasets.svc:6379/1",
        "redis://:pw@third:6379/0",
    ]
    assert not [o for o in objects(EXISTING_REDIS) if o["kind"] == "StatefulSet"]


def test_an_existing_redis_cluster_is_one_target_of_the_cache_collector(monkeypatch):
    """A redis+cluster:// URL keeps its seeds' commas through the comma-joined variable, the secret's one too."""
    options, collectors = exporter_options(EXISTING_CLUSTER, monkeypatch)
    assert "cache" in collectors
    seeds = ",".join(f"redis-cluster-{n}.redis-cluster.datasets.svc:6379" for n in range(3))
    assert options.collector_cache_redis_url == [
        f"redis+cluster://{seeds}",
        "redis://redis-master.datasets.svc:6379/0",
        "redis+cluster://:pw@cache-0.ml:6379,cache-1.ml:6379",
    ]
    assert url_label(options.collector_cache_redis_url[2]) == "redis+cluster://cache-0.ml:6379,cache-1.ml:6379"
    assert not any("redis" in a for a in exporter(objects(EXISTING_CLUSTER))["args"])


def test_the_daemonset_runs_on_gpu_nodes_with_host_pids_and_every_gpu():
    ds = one(objects({}), "DaemonSet")
    spec = pod_spec(ds)
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert (spec["hostPID"], spec.get("hostNetwork", False), spec.get("hostIPC", False)) == (True, False, False)
    assert "runtimeClassName" not in spec
    env = environment(spec["containers"][0])
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"], env["NODE_NAME"]) == (
        "all",
        "utility",
        NODE,
    )
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }
    assert "nvidia.com/gpu" not in str(spec["containers"][0]["resources"]), "the exporter sees every GPU and takes none"
    assert pod_spec(one(objects(EVERYTHING), "DaemonSet"))["runtimeClassName"] == "nvidia"


def test_host_directories_and_what_mounts_them():
    spec = pod_spec(one(objects({}), "DaemonSet"))
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    assert volumes == {
        "procfs": {"path": "/proc", "type": "Directory"},
        "segments": {"path": "/run/alnair/shm", "type": "DirectoryOrCreate"},
        "library": {"path": "/opt/alnair", "type": "DirectoryOrCreate"},
    }
    mounts = {
        c["name"]: {m["name"]: (m["mountPath"], m.get("readOnly", False)) for m in c["volumeMounts"]}
        for c in spec["initContainers"] + spec["containers"]
    }
    assert mounts == {
        "segment-directory": {"segments": ("/run/alnair/shm", False)},
        "install-intercept": {"library": ("/host", False)},
        "exporter": {"procfs": ("/host/proc", True), "segments": ("/run/alnair/shm", False)},
    }
    segment, install = spec["initContainers"]
    assert segment["command"] == ["/bin/sh", "-c", "chmod 1777 /run/alnair/shm && ls -ld /run/alnair/shm"]
    assert (install["image"], install["command"]) == (
        "ghcr.io/alnair-project/alnair:0.1.0-intercept",
        ["/install", "/host"],
    )
    assert spec["containers"][0]["image"] == "ghcr.io/alnair-project/alnair:0.1.0"


def test_image_values():
    found = objects(
        {
            "image": {"repository": "registry.example.com/alnair", "tag": "0.1.0-rc1", "digest": "sha256:" + "a" * 64},
            "installer": {"tagSuffix": "-lib", "version": "0.1.0"},
        }
    )
    spec = pod_spec(one(found, "DaemonSet"))
    assert spec["containers"][0]["image"] == "registry.example.com/alnair@sha256:" + "a" * 64
    assert spec["initContainers"][1]["image"] == "registry.example.com/alnair:0.1.0-rc1-lib"
    assert [
        c["name"] for c in pod_spec(one(objects({"installer": {"enabled": False}}), "DaemonSet"))["initContainers"]
    ] == ["segment-directory"]


RESTRICTED = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize("values_file", CI_VALUES, ids=[p.name for p in CI_VALUES])
def test_every_container_is_restricted_but_the_documented_exceptions(values_file):
    found = objects(ci_values(values_file))
    for obj, spec, container in containers(found):
        context = container["securityContext"]
        assert {k: context.get(k) for k in RESTRICTED} | {
            "capabilities": {"drop": context["capabilities"]["drop"]}
        } == RESTRICTED, container["name"]
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        if container["name"] in ROOT_CONTAINERS and obj["kind"] == "DaemonSet":
            assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (0, 0, False)
        else:
            assert context["runAsNonRoot"] is True and context["runAsUser"] != 0, container["name"]
        added = context["capabilities"].get("add", [])
        assert added == (["DAC_OVERRIDE"] if container["name"] == "exporter" else []), container["name"]
        if obj["kind"] != "DaemonSet":
            assert spec["automountServiceAccountToken"] is False, obj["metadata"]["name"]
    for obj in found:
        if obj["kind"] in ("DaemonSet", "Deployment", "StatefulSet", "Pod"):
            spec = pod_spec(obj)
            host = {k for k in ("hostPID", "hostNetwork", "hostIPC") if spec.get(k)}
            assert host == ({"hostPID"} if obj["kind"] == "DaemonSet" else set())
            host_paths = {v["name"] for v in spec.get("volumes", []) if "hostPath" in v}
            assert host_paths <= ({"procfs", "segments", "library"} if obj["kind"] == "DaemonSet" else set())


def test_rbac_is_exactly_get_list_watch_on_pods():
    found = objects(EVERYTHING)
    assert [o["kind"] for o in found if o["kind"] in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")] == [
        "ClusterRole",
        "ClusterRoleBinding",
    ]
    assert one(found, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    binding = one(found, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RELEASE}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}]
    ds = pod_spec(one(found, "DaemonSet"))
    assert (ds["serviceAccountName"], ds["automountServiceAccountToken"]) == (RELEASE, True)
    accounts = {
        o["metadata"]["name"]: o["automountServiceAccountToken"] for o in found if o["kind"] == "ServiceAccount"
    }
    assert accounts == {RELEASE: False, f"{RELEASE}-injector": False}
    assert not [o for o in objects({"rbac": {"create": False}}) if o["kind"].startswith("ClusterRole")]


def probe_kinds(values: dict) -> tuple:
    c = exporter(objects(values))
    return tuple(
        (next(k for k in ("httpGet", "tcpSocket") if k in p), p.get("httpGet", {}).get("scheme"))
        for p in (c["livenessProbe"], c["readinessProbe"])
    )


def test_probes_ask_healthz_unless_basic_auth_would_refuse_them():
    assert probe_kinds({}) == (("httpGet", "HTTP"),) * 2
    assert probe_kinds(TLS_AUTH) == (("tcpSocket", None),) * 2
    assert probe_kinds(EVERYTHING) == (("httpGet", "HTTPS"),) * 2  # probes.type httpGet: the user's choice
    c = exporter(objects({}))
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTP"}
    assert (c["livenessProbe"]["failureThreshold"], c["readinessProbe"]["periodSeconds"]) == (6, 10)


def test_web_config_from_values_is_a_secret_given_as_is():
    found = objects(EVERYTHING)
    secret = one(found, "Secret")
    assert secret["metadata"]["name"] == f"{RELEASE}-web-config"
    assert yaml.safe_load(secret["stringData"]["web-config.yml"]) == EVERYTHING["web"]["config"]
    ds = one(found, "DaemonSet")
    c = pod_spec(ds)["containers"][0]
    assert "--web.config.file=/etc/alnair/web/web-config.yml" in c["args"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert (mounts["web-config"], mounts["web-tls"]) == ("/etc/alnair/web", "/etc/alnair/tls")
    volumes = {v["name"]: v.get("secret", {}).get("secretName") for v in pod_spec(ds)["volumes"]}
    assert (volumes["web-config"], volumes["web-tls"]) == (f"{RELEASE}-web-config", "alnair-exporter-tls")
    checksum = ds["spec"]["template"]["metadata"]["annotations"]["checksum/web-config"]
    changed = {**EVERYTHING, "web": {**EVERYTHING["web"], "maxRequests": 21}}
    assert (
        one(objects(changed), "DaemonSet")["spec"]["template"]["metadata"]["annotations"]["checksum/web-config"]
        == checksum
    )
    changed["web"]["config"] = {**EVERYTHING["web"]["config"], "rate_limit": {"interval": "1s", "burst": 51}}
    assert (
        one(objects(changed), "DaemonSet")["spec"]["template"]["metadata"]["annotations"]["checksum/web-config"]
        != checksum
    )


def test_web_config_from_an_existing_secret():
    found = objects(TLS_AUTH)
    assert not [o for o in found if o["kind"] == "Secret"]
    spec = pod_spec(one(found, "DaemonSet"))
    assert "--web.config.file=/etc/alnair/web/web-config.yml" in spec["containers"][0]["args"]
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in spec["volumes"]}["web-config"] == "alnair-web"
    assert "annotations" not in one(found, "DaemonSet")["spec"]["template"]["metadata"]


def test_service_and_monitors_select_the_exporter_as_the_rules_job():
    found = objects(EVERYTHING)
    service, ds = one(found, "Service", RELEASE), one(found, "DaemonSet")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9876, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert ds["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    for kind, labels, endpoints in (
        ("ServiceMonitor", service["metadata"]["labels"], "endpoints"),
        ("PodMonitor", pod_labels, "podMetricsEndpoints"),
    ):
        monitor = one(found, kind)
        assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert labels[monitor["spec"]["jobLabel"]] == "gpu-nodes"
        assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        (endpoint,) = monitor["spec"][endpoints]
        assert (
            endpoint["port"],
            endpoint["path"],
            endpoint["scheme"],
            endpoint["interval"],
            endpoint["honorLabels"],
        ) == ("metrics", "/metrics", "https", "15s", True)
        assert endpoint["tlsConfig"] == {
            "ca": {"secret": {"name": "alnair-exporter-tls", "key": "ca.crt"}},
            "serverName": "alnair.monitoring.svc",
            "insecureSkipVerify": False,
        }
        assert endpoint["basicAuth"] == {
            "username": {"name": "alnair-scrape-credentials", "key": "username"},
            "password": {"name": "alnair-scrape-credentials", "key": "password"},
        }
        assert endpoint["relabelings"][0] == {
            "action": "labeldrop",
            "regex": "(pod|namespace|container|service|endpoint)",
        }
    sm_endpoint = one(found, "ServiceMonitor")["spec"]["endpoints"][0]
    assert sm_endpoint["relabelings"][1:] == EVERYTHING["serviceMonitor"]["relabelings"]
    assert sm_endpoint["metricRelabelings"] == EVERYTHING["serviceMonitor"]["metricRelabelings"]
    assert not [o for o in objects({}) if o["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")]
    assert "scraped twice" in notes(EVERYTHING) and "scraped twice" not in notes(TLS_AUTH)


def test_redis_statefulset_with_its_pvc_memory_policy_and_password():
    found = objects(EVERYTHING)
    sts = one(found, "StatefulSet")
    conf = one(found, "ConfigMap", f"{RELEASE}-redis")["data"]["redis.conf"]
    assert "maxmemory 4gb\n" in conf and "maxmemory-policy allkeys-lfu\n" in conf
    assert "requirepass" not in conf and "protected-mode no" not in conf
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert (claim["spec"]["resources"]["requests"]["storage"], claim["spec"]["storageClassName"]) == (
        "20Gi",
        "fast-ssd",
    )
    spec = pod_spec(sts)
    init, redis = spec["initContainers"][0], spec["containers"][0]
    assert environment(init)["REDIS_PASSWORD"] == "redis-password"
    assert redis["command"] == ["redis-server", "/run/redis/redis.conf"]
    assert spec["nodeSelector"] == {"node-role.example.com/storage": "true"}
    assert one(found, "Service", f"{RELEASE}-redis")["spec"]["ports"][0]["port"] == 6379
    bare = objects({"redis": {"enabled": True, "persistence": {"enabled": False}}})
    conf = one(bare, "ConfigMap", f"{RELEASE}-redis")["data"]["redis.conf"]
    assert "protected-mode no" in conf and 'save ""' in conf and "maxmemory-policy allkeys-lru" in conf
    assert "volumeClaimTemplates" not in one(bare, "StatefulSet")["spec"]


def test_the_webhook_fails_open_and_skips_the_charts_namespace():
    found = objects(EVERYTHING)
    config = one(found, "MutatingWebhookConfiguration")
    assert config["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{RELEASE}-injector"}
    pods, namespaces = config["webhooks"]
    for webhook in (pods, namespaces):
        assert {
            k: webhook[k]
            for k in (
                "admissionReviewVersions",
                "sideEffects",
                "failurePolicy",
                "reinvocationPolicy",
                "timeoutSeconds",
                "matchPolicy",
            )
        } == {
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "timeoutSeconds": 3,
            "matchPolicy": "Equivalent",
        }
        assert webhook["clientConfig"] == {
            "service": {"name": f"{RELEASE}-injector", "namespace": NAMESPACE, "path": "/mutate", "port": 443}
        }
        assert webhook["rules"] == [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        assert webhook["namespaceSelector"]["matchExpressions"] == [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": [NAMESPACE, "kube-system", "cert-manager"],
            }
        ]
    assert pods["objectSelector"] == {"matchLabels": {"alnair.io/inject": "true"}}
    assert "matchLabels" not in pods["namespaceSelector"]
    assert namespaces["namespaceSelector"]["matchLabels"] == {"alnair.io/inject": "true"}
    assert namespaces["objectSelector"] == {
        "matchExpressions": [{"key": "alnair.io/inject", "operator": "NotIn", "values": ["true", "false"]}]
    }
    assert (
        one(objects(ci_values(CHART / "ci" / "injector-cert-manager-values.yaml")), "MutatingWebhookConfiguration")[
            "webhooks"
        ][0]["name"]
        == "pods.injector.alnair.io"
    )


def test_the_webhook_certificate_from_cert_manager():
    found = objects(EVERYTHING)
    certificate, issuer = one(found, "Certificate"), one(found, "Issuer")
    service = one(found, "Service", f"{RELEASE}-injector")
    assert certificate["spec"]["dnsNames"] == [
        f"{RELEASE}-injector.{NAMESPACE}.svc",
        f"{RELEASE}-injector.{NAMESPACE}.svc.cluster.local",
    ]
    assert certificate["spec"]["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert issuer["spec"] == {"selfSigned": {}}
    deployment = one(found, "Deployment")
    (volume,) = pod_spec(deployment)["volumes"]
    assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    theirs = objects(ci_values(CHART / "ci" / "injector-cert-manager-values.yaml"))
    assert not [o for o in theirs if o["kind"] == "Issuer"]
    assert one(theirs, "Certificate")["spec"]["issuerRef"] == {
        "name": "internal-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert (one(theirs, "Certificate")["spec"]["duration"], one(theirs, "Certificate")["spec"]["renewBefore"]) == (
        "720h",
        "240h",
    )


def test_the_webhook_certificate_from_an_existing_secret():
    found = objects(ci_values(CHART / "ci" / "injector-existing-secret-values.yaml"))
    assert not [o for o in found if o["kind"] in ("Certificate", "Issuer")]
    config = one(found, "MutatingWebhookConfiguration")
    assert "annotations" not in config["metadata"]
    (webhook,) = config["webhooks"]
    assert webhook["name"] == "namespaces.injector.alnair.io"
    assert webhook["clientConfig"]["caBundle"].startswith("LS0tLS1CRUdJTi")
    assert webhook["namespaceSelector"]["matchLabels"] == {"alnair.io/inject": "enabled"}
    assert pod_spec(one(found, "Deployment"))["volumes"][0]["secret"]["secretName"] == "alnair-injector-tls"


def test_the_webhook_deployment_arguments():
    deployment = one(objects(EVERYTHING), "Deployment")
    assert deployment["spec"]["replicas"] == 2
    c = pod_spec(deployment)["containers"][0]
    assert (c["image"], c["command"]) == ("ghcr.io/alnair-project/alnair:0.1.0", ["alnair-injector"])
    assert c["args"] == [
        "--web.listen-address=:8443",
        "--tls.cert-file=/etc/alnair/injector-tls/tls.crt",
        "--tls.key-file=/etc/alnair/injector-tls/tls.key",
        "--library.host-path=/opt/alnair/0.1.0",
        "--shm.host-path=/run/alnair/shm",
        "--python-intercept-default=true",
        "--log.level=debug",
        "--log.format=json",
    ]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    custom = pod_spec(
        one(
            objects(
                {
                    "injector": {"enabled": True, "tls": {"certManager": {"enabled": True}}},
                    "hostPaths": {"library": "/var/lib/alnair", "segments": "/var/run/alnair"},
                    "installer": {"version": "0.2.0"},
                }
            ),
            "Deployment",
        )
    )["containers"][0]["args"]
    assert "--library.host-path=/var/lib/alnair/0.2.0" in custom and "--shm.host-path=/var/run/alnair" in custom


def test_the_charts_dashboards_are_dashboards_json_byte_for_byte():
    link = CHART / "dashboards"
    assert link.is_symlink() and link.resolve() == (CHART.parent.parent / "dashboards" / "json").resolve()
    source = sorted((CHART.parent.parent / "dashboards" / "json").glob("*.json"))
    assert len(source) == 5
    found = {o["metadata"]["name"]: o["data"] for o in objects({}) if o["kind"] == "ConfigMap"}
    for path in source:
        assert found[f"{RELEASE}-dashboard-{path.stem}"][path.name].encode() == path.read_bytes()


def test_dashboards_are_configmaps_for_the_grafana_sidecar():
    found = objects(EVERYTHING)
    maps = {
        o["metadata"]["name"]: o
        for o in found
        if o["metadata"]["labels"].get("app.kubernetes.io/component") == "dashboards"
    }
    files = sorted((CHART.parent.parent / "dashboards" / "json").glob("*.json"))
    assert sorted(maps) == [f"{RELEASE}-dashboard-{p.stem}" for p in files]
    for path in files:
        cm = maps[f"{RELEASE}-dashboard-{path.stem}"]
        assert cm["data"] == {path.name: path.read_text()}
        assert (cm["metadata"]["labels"]["grafana_dashboard"], cm["metadata"]["labels"]["grafana"]) == ("1", "main")
        assert (cm["metadata"]["namespace"], cm["metadata"]["annotations"]) == ("grafana", {"grafana_folder": "Alnair"})
    relabelled = [
        o
        for o in objects({"dashboards": {"label": "example.com/dashboard", "labelValue": "alnair"}})
        if o["kind"] == "ConfigMap"
    ]
    assert relabelled and all(o["metadata"]["labels"]["example.com/dashboard"] == "alnair" for o in relabelled)
    assert not [o for o in objects({"dashboards": {"enabled": False}}) if o["kind"] == "ConfigMap"]


def test_helm_test_pod_scrapes_through_the_service_as_prometheus_does():
    pod = one(objects(EVERYTHING), "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    c = pod["spec"]["containers"][0]
    assert (c["command"], c["args"]) == (["python3", "-c"], [(CHART / "files" / "check-metrics.py").read_text()])
    env = environment(c)
    assert {k: v for k, v in env.items() if k not in ("ALNAIR_USERNAME", "ALNAIR_PASSWORD")} == {
        "ALNAIR_HOST": f"{RELEASE}.{NAMESPACE}.svc",
        "ALNAIR_PORT": "9876",
        "ALNAIR_PATH": "/metrics",
        "ALNAIR_SCHEME": "https",
        "ALNAIR_CA_FILE": "/etc/alnair/ca/ca.crt",
        "ALNAIR_SERVER_NAME": "alnair.monitoring.svc",
        "ALNAIR_INSECURE_SKIP_VERIFY": "false",
    }
    assert [
        e["valueFrom"]["secretKeyRef"] for e in c["env"] if e["name"] in ("ALNAIR_USERNAME", "ALNAIR_PASSWORD")
    ] == [
        {"name": "alnair-scrape-credentials", "key": "username"},
        {"name": "alnair-scrape-credentials", "key": "password"},
    ]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == "alnair-exporter-tls"
    assert not [o for o in objects({"tests": {"enabled": False}}) if o["kind"] == "Pod"]


def test_notes_tell_how_to_reach_metrics():
    text = notes({})
    assert f"kubectl -n {NAMESPACE} port-forward daemonset/{RELEASE} 9876:9876" in text
    assert "curl http://localhost:9876/metrics" in text
    assert f"helm test {RELEASE} -n {NAMESPACE}" in text
    assert "curl --cacert CA.pem -u USER:PASSWORD https://localhost:9876/metrics" in notes(EVERYTHING)
