"""The chart and alnair-injector agree: the Deployment's arguments are read by the injector's own flag parser (its
defaults are the chart's host paths), and the webhook's patch with those settings turns
examples/kubernetes/training-injected.yaml's pod into exactly training-by-hand.yaml's: the same volumes, mounts and
variables, nothing else changed."""

from __future__ import annotations

import copy

import jsonpatch
import yaml

from alnair.commandline import version
from alnair.injector.config import build_parser
from alnair.injector.patch import Settings, mutate
from chart_support import ROOT, objects, one

EXAMPLES = ROOT / "examples" / "kubernetes"


def load(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def pod(job: dict) -> dict:
    template = copy.deepcopy(job["spec"]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", **template["metadata"]},
        "spec": template["spec"],
    }


def injector_options(values: dict | None = None):
    found = objects({"injector": {"enabled": True, "tls": {"certManager": {"enabled": True}}}, **(values or {})})
    return build_parser().parse_args(one(found, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"])


def test_the_injector_reads_the_deployments_arguments():
    options = injector_options()
    assert (options.web_listen_address, options.tls_cert_file, options.tls_key_file) == (
        ("", 8443),
        "/etc/alnair/injector-tls/tls.crt",
        "/etc/alnair/injector-tls/tls.key",
    )
    assert (options.library_host_path, options.shm_host_path, options.python_intercept_default, options.log_level) == (
        f"/opt/alnair/{version()}",
        "/run/alnair/shm",
        False,
        "info",
    )
    defaults = build_parser().parse_args([])
    assert (defaults.library_host_path, defaults.shm_host_path) == (options.library_host_path, options.shm_host_path)
    custom = injector_options(
        {
            "injector": {
                "enabled": True,
                "tls": {"certManager": {"enabled": True}},
                "port": 9443,
                "pythonInterceptDefault": True,
                "logLevel": "debug",
            },
            "hostPaths": {"library": "/var/lib/alnair", "segments": "/var/run/alnair"},
        }
    )
    assert (
        custom.web_listen_address,
        custom.library_host_path,
        custom.shm_host_path,
        custom.python_intercept_default,
        custom.log_level,
    ) == (("", 9443), f"/var/lib/alnair/{version()}", "/var/run/alnair", True, "debug")


def test_the_webhook_patch_gives_the_pod_wired_by_hand():
    options = injector_options()
    settings = Settings(options.library_host_path, options.shm_host_path, options.python_intercept_default, version())
    injected = pod(load("training-injected.yaml"))
    patched = jsonpatch.apply_patch(injected, mutate(injected, settings).patch)
    by_hand = pod(load("training-by-hand.yaml"))
    assert patched["metadata"]["annotations"].pop("alnair.io/injected") == version()
    for key in ("alnair.io/memory-limit", "alnair.io/compute-limit", "alnair.io/python-intercept"):
        patched["metadata"]["annotations"].pop(key)
    assert patched["metadata"]["labels"].pop("alnair.io/inject") == "true"
    assert patched["metadata"] == {**by_hand["metadata"], "annotations": {}}
    spec, wanted = patched["spec"], by_hand["spec"]
    (container,), (expected,) = spec.pop("containers"), wanted.pop("containers")
    assert spec == wanted  # the volumes, and the rest of the pod untouched
    assert {e["name"]: e["value"] for e in container.pop("env")} == {e["name"]: e["value"] for e in expected.pop("env")}
    assert container == expected
