"""The injector as it runs in the cluster: `python -m alnair.injector` over HTTPS on a free loopback port, with a
certificate from a test CA, sent AdmissionReview requests as the API server sends them; pods, and checks of
what the patch made of them."""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import uuid
from pathlib import Path

import jsonpatch
import kubernetes_validate

from support import free_port, wait_until

LIBRARY_HOST_PATH = "/opt/alnair/9.9.9"  # what the chart passes: the installer's versioned node directory
KUBERNETES_VERSIONS = ("1.29", "1.33")
POD_KIND = {"group": "", "version": "v1", "kind": "Pod"}


class Injector:
    """A running alnair-injector; its stderr goes to a file."""

    def __init__(
        self,
        tls_dir: Path,
        log_path: Path,
        *args: str,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        python: str = sys.executable,
    ):
        self.tls_dir, self.log_path, self.port = tls_dir, log_path, free_port()
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                [
                    python,
                    "-m",
                    "alnair.injector",
                    f"--web.listen-address={host}:{self.port}",
                    f"--tls.cert-file={tls_dir / 'server.crt'}",
                    f"--tls.key-file={tls_dir / 'server.key'}",
                    f"--library.host-path={LIBRARY_HOST_PATH}",
                    *args,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, **(env or {})},
            )
        wait_until(lambda: self.healthy() or self.proc.poll() is not None, timeout=20)
        if self.proc.poll() is not None:
            raise RuntimeError(f"injector did not start: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def connect(self, cafile: Path | None = None) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(cafile or self.tls_dir / "ca.crt"))
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)

    def healthy(self, cafile: Path | None = None) -> bool:
        """GET /healthz answers 200, over a connection that verified the certificate against cafile."""
        try:
            return self.get("/healthz", cafile)[0] == 200
        except OSError:  # ssl.SSLError among them
            return False

    def get(self, path: str, cafile: Path | None = None) -> tuple[int, bytes]:
        connection = self.connect(cafile)
        try:
            connection.request("GET", path)
            reply = connection.getresponse()
            return reply.status, reply.read()
        finally:
            connection.close()

    def post(self, body: bytes, headers: dict[str, str] | None = None, path: str = "/mutate") -> tuple[int, bytes]:
        connection = self.connect()
        try:
            connection.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})
            reply = connection.getresponse()
            return reply.status, reply.read()
        finally:
            connection.close()

    def review(self, pod: dict, **request) -> dict:
        """The AdmissionReview's response for a review of pod, its uid checked."""
        sent = admission_review(pod, **request)
        status, body = self.post(json.dumps(sent).encode())
        assert status == 200, body
        answer = json.loads(body)
        assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        assert answer["response"]["uid"] == sent["request"]["uid"]
        return answer["response"]

    def inject(self, pod: dict) -> dict:
        """The pod as the API server stores it after this webhook: the patch applied."""
        return applied(pod, self.review(pod))

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(10)


def exchange_over_tls(port: int, cafile: Path, raw: bytes) -> bytes:
    """Everything the injector on port sends back for raw, sent over TLS, until it closes the connection."""
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as conn,
        context.wrap_socket(conn, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(raw)
        received = b""
        while chunk := tls.recv(65536):
            received += chunk
        return received


def admission_review(pod: dict, operation: str = "CREATE", kind: dict = POD_KIND, **extra) -> dict:
    """A review as the API server sends it for a pod's creation in namespace team-a."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": kind,
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": kind,
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name", ""),
            "namespace": "team-a",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            **extra,
        },
    }


def applied(pod: dict, response: dict) -> dict:
    """The pod with the response's JSONPatch applied (unchanged when there is none), valid for Kubernetes."""
    assert response["allowed"] is True, response
    if "patch" not in response:
        assert "patchType" not in response
        return copy.deepcopy(pod)
    assert response["patchType"] == "JSONPatch"
    result = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    assert_valid(result)
    return result


def assert_valid(pod: dict) -> None:
    """The Kubernetes schemas of every supported version (strict: no unknown field), and what the API server's
    validation adds to them: unique volume names, unique mount paths, mounts of existing volumes."""
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)
    volumes = [v["name"] for v in pod["spec"].get("volumes", [])]
    assert len(volumes) == len(set(volumes)), volumes
    for container in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
        assert len(paths) == len(set(paths)), paths
        assert {m["name"] for m in container.get("volumeMounts", [])} <= set(volumes)


def make_pod(*containers: str, labels: dict | None = None, annotations: dict | None = None, **spec) -> dict:
    """A training pod as a Job's template makes it, one container per name (each a dict, or a name)."""
    metadata = {"name": "train-0", "namespace": "team-a", "labels": {"alnair.io/inject": "true", **(labels or {})}}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [c if isinstance(c, dict) else container(c) for c in containers or ("trainer",)],
            "restartPolicy": "Never",
            **spec,
        },
    }


def container(name: str, **fields) -> dict:
    return {"name": name, "image": "registry.example/train:1.0", "command": ["python", "train.py"], **fields}


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def mounts_of(container: dict) -> list[tuple[str, str, bool]]:
    return [(m["name"], m["mountPath"], m.get("readOnly", False)) for m in container.get("volumeMounts", [])]
