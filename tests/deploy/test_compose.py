"""deploy/compose, run for real with podman-compose (rootful podman, runc): the exporter and Prometheus come up from
compose.yaml as it is, only their images named through the variables it reads; Prometheus scrapes the exporter and
evaluates every group of the generated rules without an error, and a job on the host is seen by its host pid. Also:
both compose files are valid Compose (the compose-spec schema that docker compose validates with), and the GPU
override becomes a CDI device request under podman-compose.

No image registry is reachable here: the exporter image is built from the Dockerfile and Prometheus is Debian's
package (prometheus.Containerfile), both on the debootstrapped base that tests/image makes. Grafana is not run (no
Grafana server can be installed here): test_grafana_provisioning.py checks its files instead."""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import jsonschema
import pytest

from compose_files import COMPOSE, COMPOSE_DIR, GPU_OVERRIDE, flag, host_path, load, service, with_defaults
from support import ROOT, PythonProgram, require_binary, wait_until

sys.path.insert(0, str(ROOT / "tests" / "image"))  # the debootstrapped base, shared with tests/image
from debian_base import LIMITS, podman_command, run  # noqa: E402
from project_images import VERSION, base_image as make_base_image, build_file  # noqa: E402

HERE = Path(__file__).parent
EXPORTER_IMAGE = f"localhost/alnair-exporter:{VERSION}-compose-test"
PROMETHEUS_IMAGE = "localhost/alnair-compose-prometheus:test"
PROMETHEUS = "http://127.0.0.1:9090"
# A training job's stand-in on the host: the Python intercept publishes its counter into ALNAIR_SHM_DIR.
JOB = "import sys, alnair\nalnair.counter('images_decoded').inc(5)\nprint('ready', flush=True)\nsys.stdin.read()\n"


@pytest.fixture(scope="module")
def podman() -> list[str]:
    return podman_command()


@pytest.fixture(scope="module")
def base_image(podman, tmp_path_factory) -> str:
    """tests/image's base, so that its cached debootstrap tree and image serve both."""
    return make_base_image(podman, tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def exporter_image(podman, base_image) -> str:
    return build_file(podman, EXPORTER_IMAGE, ROOT / "Dockerfile", ROOT, "--target", "exporter")


@pytest.fixture(scope="module")
def prometheus_image(podman, base_image, tmp_path_factory) -> str:
    return build_file(podman, PROMETHEUS_IMAGE, HERE / "prometheus.Containerfile", tmp_path_factory.mktemp("context"))


def compose_command(project: str, *files: Path) -> list[str]:
    """podman-compose on this machine's podman: runc (crun refuses these cgroups) and explicit ulimits, passed as
    podman arguments so that the compose files stay as users run them."""
    return [
        require_binary("podman-compose"),
        "--podman-args=--runtime runc",
        f"--podman-run-args={' '.join(LIMITS)}",
        "-p",
        project,
        *(a for f in files for a in ("-f", str(f))),
    ]


def prometheus_api(path: str, **query: str) -> dict:
    url = f"{PROMETHEUS}/api/v1/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10) as reply:
        body = json.load(reply)
    assert body["status"] == "success", body
    return body["data"]


def answering(path: str, **query: str) -> dict | None:
    try:
        return prometheus_api(path, **query)
    except OSError:  # not listening yet
        return None


def logs(podman: list[str], project: str) -> str:
    """Every container's log, for a failure's message."""
    names = run(
        [*podman, "ps", "-a", "--filter", f"label=io.podman.compose.project={project}", "--format", "{{.Names}}"],
        check=False,
    ).stdout.split()
    return "".join(f"--- {n}\n{run([*podman, 'logs', n], check=False).stderr[-3000:]}" for n in names)


def waiting(podman: list[str], project: str, what: str, predicate, timeout: float = 90):
    try:
        return wait_until(predicate, timeout=timeout, interval=0.5)
    except AssertionError:
        raise AssertionError(f"{what} within {timeout} s\n{logs(podman, project)}") from None


def expected_rules() -> dict[str, list[str]]:
    """Group name -> rule names, from the rule files prometheus.yml loads, read where the container reads them."""
    groups = {}
    for path in load(host_path("prometheus", flag("prometheus", "--config.file")))["rule_files"]:
        for group in load(host_path("prometheus", path))["groups"]:
            groups[group["name"]] = [r.get("record") or r.get("alert") for r in group["rules"]]
    return groups


def rule_health() -> dict[str, list[tuple[str, str]]] | None:
    """Group name -> (rule name, health) as Prometheus evaluated them; None until every rule has been evaluated."""
    data = answering("rules")
    if data is None:
        return None
    groups = {g["name"]: [(r["name"], r["health"]) for r in g["rules"]] for g in data["groups"]}
    unknown = any(health == "unknown" for rules in groups.values() for _, health in rules)
    return None if unknown or not groups else groups


def exporter_target() -> dict | None:
    data = answering("targets")
    targets = [t for t in (data or {}).get("activeTargets", []) if t["labels"]["job"] == "alnair"]
    return targets[0] if targets and targets[0]["health"] != "unknown" else None


def series(query: str) -> list[dict] | None:
    return (answering("query", query=query) or {}).get("result") or None


def require_free_ports(*ports: int) -> None:
    """The services bind their ports on the host's network: a port in use would fail the test for another reason."""
    for port in ports:
        with socket.socket() as s:
            # as the services bind: past a closed one's TIME_WAIT
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                pytest.fail(f"port {port} is in use here: compose.yaml's services listen on it on the host's network")


def stop_stack(podman: list[str], compose: list[str], project: str, env: dict[str, str]) -> None:
    """compose down with its volumes, then whatever a failed up or down left: the project's containers and pod."""
    run([*compose, "down", "--volumes"], check=False, env=env)
    names = run(
        [*podman, "ps", "-a", "-q", "--filter", f"label=io.podman.compose.project={project}"], check=False
    ).stdout.split()
    if names:
        run([*podman, "rm", "--force", *names], check=False)
    run([*podman, "pod", "rm", "--force", "--ignore", f"pod_{project}"], check=False)
    run([*podman, "volume", "rm", "--force", f"{project}_prometheus-data"], check=False)


def leftovers(podman: list[str], project: str) -> list[str]:
    """The project's containers, pod and Prometheus volume, where they remain."""
    names = run(
        [*podman, "ps", "-a", "--filter", f"label=io.podman.compose.project={project}", "--format", "{{.Names}}"]
    ).stdout.split()
    kept = [
        (kind, name)
        for kind, name in (("pod", f"pod_{project}"), ("volume", f"{project}_prometheus-data"))
        if run([*podman, kind, "exists", name], check=False).returncode == 0
    ]
    return names + [name for _, name in kept]


def test_prometheus_scrapes_the_exporter_evaluates_every_rule_and_sees_a_job_on_the_host(
    podman, exporter_image, prometheus_image, tmp_path
):
    require_free_ports(9876, 9090)
    shm = tmp_path / "shm"
    shm.mkdir()
    shm.chmod(0o1777)  # as /dev/shm: the exporter refuses a world-writable directory without the sticky bit
    env = {
        **os.environ,
        "ALNAIR_EXPORTER_IMAGE": exporter_image,
        "ALNAIR_PROMETHEUS_IMAGE": prometheus_image,
        "ALNAIR_SHM_DIR": str(shm),
    }
    project = f"alnair-compose-test-{uuid.uuid4().hex[:8]}"
    compose = compose_command(project, COMPOSE)
    job = PythonProgram(JOB, shm, env={"ALNAIR_PYTHON_INTERCEPT": "1"})
    try:
        run([*compose, "up", "-d", "exporter", "prometheus"], env=env)
        target = waiting(podman, project, "the exporter's target was not scraped", exporter_target)
        assert (target["health"], target["lastError"], target["scrapeUrl"]) == (
            "up",
            "",
            "http://localhost:9876/metrics",
        )

        groups = waiting(podman, project, "the rules were not all evaluated", rule_health)
        expected = expected_rules()
        assert {name: [r for r, _ in rules] for name, rules in groups.items()} == expected
        assert {health for rules in groups.values() for _, health in rules} == {"ok"}, groups

        [build_info] = waiting(podman, project, "no build info", lambda: series("alnair_exporter_build_info"))
        [node] = series("alnair_node_info")
        assert (build_info["metric"]["version"], node["metric"]["node"]) == (VERSION, socket.gethostname())
        # the job's counter, under the pid it has on the host: the exporter reads the segment directory and the
        # host's pid namespace
        [counter] = waiting(
            podman,
            project,
            "the job's counter was not served",
            lambda: series('alnair_python_custom_total{name="images_decoded"}'),
        )
        assert (counter["metric"]["pid"], counter["value"][1]) == (str(job.pid), "5")
        [info] = series(f'alnair_python_process_info{{pid="{job.pid}"}}')
        assert info["metric"]["pid_namespace"] == str(os.stat("/proc/self/ns/pid").st_ino)

        # the documented way down; it may wait stop_grace_period for the exporter: podman stops a container in the
        # host's pid namespace through runc kill --all, which on this machine's runc (1.1.5, hybrid cgroups) often
        # signalled no process at all (the exporter had nothing pending), and then kills it
        run([*compose, "down", "--volumes"], env=env)
        assert leftovers(podman, project) == []
    finally:
        stop_stack(podman, compose, project, env)
        job.finish()


def created(output: str, service_name: str) -> list[str]:
    """The arguments of the `podman create` that podman-compose --dry-run prints for a service."""
    for line in output.splitlines():
        args = shlex.split(line.partition("podman_compose:")[2])
        if args[:1] == ["podman"] and "create" in args and f"io.podman.compose.service={service_name}" in args:
            return args
    raise AssertionError(f"no podman create for {service_name} in:\n{output}")


def test_the_gpu_override_asks_podman_for_every_gpu_by_cdi():
    project = f"alnair-compose-dry-{uuid.uuid4().hex[:8]}"
    plain, gpu = (
        created(
            run([*compose_command(project, *files), "--verbose", "--dry-run", "up", "-d", "exporter"]).stderr,
            "exporter",
        )
        for files in ([COMPOSE], [COMPOSE, GPU_OVERRIDE])
    )
    assert "--device" not in plain
    assert [gpu[i + 1] for i, a in enumerate(gpu) if a == "--device"] == ["nvidia.com/gpu=all"]
    # the override adds the device and keeps the rest of the service (but the labels naming the files)
    assert {a for a in plain if "config-hash" not in a and "config_files" not in a} <= set(gpu)


def compose_validator() -> jsonschema.Draft202012Validator:
    """The compose-spec schema (schemas/, vendored from compose-go, which docker compose validates with)."""
    schema = json.loads((HERE / "schemas" / "compose-spec.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(doc: dict) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in compose_validator().iter_errors(doc)]


@pytest.mark.parametrize("path", [COMPOSE, GPU_OVERRIDE], ids=lambda p: p.name)
def test_the_compose_files_are_valid_compose(path):
    assert schema_errors(load(path)) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["services"]["exporter"].update({"network-mode": "host"}),
        lambda d: d["services"]["exporter"].update(pid=1),
        lambda d: d["services"]["prometheus"].update(depends_on="exporter"),
    ],
    ids=["misspelt key", "wrong type", "a string for a list"],
)
def test_the_schema_refuses_a_broken_compose_file(change):
    doc = load(COMPOSE)
    change(doc)
    assert schema_errors(doc) != []


def test_the_default_exporter_image_is_this_version_built_from_the_dockerfile():
    exporter = service("exporter")
    assert with_defaults(exporter["image"]) == f"localhost/alnair-exporter:{VERSION}"
    assert (COMPOSE_DIR / exporter["build"]["context"]).resolve() == ROOT
    assert (exporter["build"]["dockerfile"], exporter["build"]["target"]) == ("Dockerfile", "exporter")


def test_prometheus_scrapes_as_the_rules_expect():
    config = load(host_path("prometheus", flag("prometheus", "--config.file")))
    [job] = config["scrape_configs"]
    port = flag("exporter", "--web.listen-address").rsplit(":", 1)[1]
    assert (job["job_name"], job["honor_labels"], job["static_configs"]) == (
        "alnair",
        True,
        [{"targets": [f"localhost:{port}"]}],
    )
    # both generated files: the alerts read recorded series
    assert sorted(host_path("prometheus", p).name for p in config["rule_files"]) == ["alerts.yaml", "recording.yaml"]
    assert 'job="alnair"' in (ROOT / "dashboards" / "rules" / "alerts.yaml").read_text()


def test_hadolint_passes_the_prometheus_containerfile():
    hadolint = require_binary("hadolint")
    result = run([hadolint, "--no-color", str(HERE / "prometheus.Containerfile")], check=False)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
