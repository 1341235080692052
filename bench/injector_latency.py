"""Latency per AdmissionReview of alnair-injector, beside baselines through the same server and in-process.

    python bench/injector_latency.py [--reviews 2000] [--json PATH]

The real injector (`python -m alnair.injector`, default flags, logging at info as deployed) on a loopback port
with a test CA's certificate, and one keep-alive HTTPS client (http.client), as the API server keeps its
connection to a webhook. Each round sends one request of every case, in turn, so noise spreads evenly:

- healthz: GET /healthz, the floor of HTTP over TLS through this server;
- opted out: the review of a pod labelled alnair.io/inject=false: the envelope decoded and answered, no patch
  (an empty AdmissionReview echo);
- injected: a labelled pod without annotations: the patch built, encoded and sent back;
- injected + annotations: memory, compute and Python intercept annotations, each checked by the grammar.

A time is request sent to response read. In-process, without the network: json.loads + json.dumps of the same
review body (what any webhook at least does), and the injector's own answer() for the annotated pod. The pod is
a two-container training pod of a Job, with env, resources, probes and a managedFields entry, as the API server
sends it at creation. Client and server share the machine's CPUs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "injector")]

from alnair.commandline import version  # noqa: E402
from alnair.injector.patch import Settings  # noqa: E402
from alnair.injector.review import answer  # noqa: E402
from injector_support import admission_review, container, make_pod  # noqa: E402
from support import free_port, wait_until, write_tls_files  # noqa: E402

ANNOTATIONS = {
    "alnair.io/memory-limit": "0=8Gi,1=4Gi",
    "alnair.io/compute-limit": "30",
    "alnair.io/python-intercept": "true",
}
WARMUP = 200


def training_container(name: str) -> dict:
    env = [{"name": f"TRAIN_SETTING_{i}", "value": f"value-{i}"} for i in range(12)]
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    return container(
        name,
        env=env,
        ports=[{"containerPort": 29500, "name": "dist"}],
        resources={"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"}, "requests": {"cpu": "8"}},
        volumeMounts=[{"name": "data", "mountPath": "/data", "readOnly": True}],
        readinessProbe={"tcpSocket": {"port": 29500}, "periodSeconds": 10},
    )


def review_body(labels: dict | None = None, annotations: dict | None = None) -> bytes:
    pod = make_pod(
        training_container("trainer"),
        training_container("evaluator"),
        labels=labels,
        annotations=annotations,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )
    pod["metadata"]["managedFields"] = [
        {
            "manager": "job-controller",
            "operation": "Update",
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:containers": {}}},
        }
    ]
    return json.dumps(admission_review(pod)).encode()


CASES = {
    "healthz": ("GET", "/healthz", None),
    "opted out": ("POST", "/mutate", review_body(labels={"alnair.io/inject": "false"})),
    "injected": ("POST", "/mutate", review_body()),
    "injected + annotations": ("POST", "/mutate", review_body(annotations=ANNOTATIONS)),
}


def start_injector(directory: Path) -> tuple[subprocess.Popen, int]:
    write_tls_files(directory)
    port = free_port()
    log = open(directory / "injector.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alnair.injector",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--tls.cert-file={directory / 'server.crt'}",
            f"--tls.key-file={directory / 'server.key'}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    wait_until(lambda: "listening on" in (directory / "injector.log").read_text() or proc.poll() is not None, 20)
    if proc.poll() is not None:
        raise SystemExit(f"injector did not start: {(directory / 'injector.log').read_text()}")
    return proc, port


def timed(connection: http.client.HTTPSConnection, method: str, path: str, body: bytes | None) -> float:
    start = time.perf_counter()
    connection.request(method, path, body, {"Content-Type": "application/json"} if body else {})
    reply = connection.getresponse()
    reply.read()
    elapsed = time.perf_counter() - start
    assert reply.status == 200, reply.status
    return elapsed


def through_server(port: int, directory: Path, reviews: int) -> dict[str, list[float]]:
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for round_ in range(WARMUP + reviews):
        for name, request in CASES.items():
            elapsed = timed(connection, *request)
            if round_ >= WARMUP:
                times[name].append(elapsed)
    connection.close()
    return times


def in_process(reviews: int) -> dict[str, list[float]]:
    body = CASES["injected + annotations"][2]
    settings = Settings(f"/opt/alnair/{version()}", "/run/alnair/shm", False, version())
    steps = {
        "json.loads + json.dumps alone": lambda: json.dumps(json.loads(body)).encode(),
        "answer(), annotated pod": lambda: answer(body, settings),
    }
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(WARMUP + reviews):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            if round_ >= WARMUP:
                times[name].append(time.perf_counter() - start)
    return times


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
        "max_ms": ordered[-1] * 1000,
    }


def machine() -> str:
    with open("/proc/cpuinfo") as f:
        models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return f"{os.cpu_count()} CPUs, {models[0] if models else 'unknown model'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reviews", type=int, default=2000, help="timed requests per case (after a warm-up)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = start_injector(Path(tmp))
        try:
            results = {**through_server(port, Path(tmp), args.reviews), **in_process(args.reviews)}
        finally:
            proc.terminate()
            proc.wait(10)
    sizes = {name: len(request[2] or b"") for name, request in CASES.items()}
    figures = {name: summary(samples) for name, samples in results.items()}
    print(f"{machine()}; {args.reviews} requests per case; review bodies {sizes['injected + annotations']} bytes")
    print("| case | median | p99 | max |\n|---|---|---|---|")
    for name, figure in figures.items():
        print(f"| {name} | {figure['median_ms']:.3f} ms | {figure['p99_ms']:.3f} ms | {figure['max_ms']:.3f} ms |")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": machine(), "reviews": args.reviews, "figures": figures}, indent=2)
        )


if __name__ == "__main__":
    main()
