"""The chart's pods on a real container runtime: the DaemonSet's pod, rendered by Helm's engine with the images the
Dockerfile builds, played by `podman kube play` (Debian 12's podman 4.3, rootful, runc): its two init containers make
the segment directory 1777 and install the intercept on the "node" (host directories of the test's own, given as the
chart's hostPaths values), and the exporter runs with the chart's securityContext, args, volumes and limits, its
probes passing. Then a workload pod, patched by alnair-injector's real AdmissionReview response (the injector runs
with the arguments the chart's Deployment gives it), runs a CUDA program on the fake driver with the installed
library preloaded, and the exporter pod serves its kernel launches, as the program reports them, by its host pid.

What podman 4.3 cannot honour of the rendered pod is listed in pods/podman_gaps.py, with the minimal, named change
each needs (pods/kube_play.py for hostPID, the pause image and ulimits); the first test fails if the set of changes
ever differs. No API server or kubelet runs here: scheduling, the service account's token and RBAC,
admission (the MutatingWebhookConfiguration, Pod Security), the kubelet's restarts on a failing probe and the NVIDIA
toolkit are not exercised (docs/kubernetes.md)."""

from __future__ import annotations

import base64
import copy
import functools
import os
import re
import stat
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from chart_support import ROOT, objects, one
from support import LABEL, free_port, parse_samples, scrape_text, wait_until, write_tls_files

sys.path[:0] = [
    str(Path(__file__).resolve().parent / "pods"),
    str(ROOT / "tests" / "image"),
    str(ROOT / "tests" / "injector"),
]
import kube_play  # noqa: E402
import kubelet_probes  # noqa: E402
import podman_gaps  # noqa: E402
from fake_gpu_workload import (  # noqa: E402
    DEVICES,
    PER_THREAD,
    THREADS,
    WORKLOAD_UID,
    build_fake_driver,
    reported_launches,
    workload_pod,
)

from debian_base import podman_command, run  # noqa: E402
from injector_support import Injector, applied  # noqa: E402
from project_images import EXPORTER_IMAGE, INTERCEPT_IMAGE, VERSION, base_image, build, bullseye  # noqa: E402

# The chart names both images from one repository: the exporter REPO:VERSION, the installer REPO:VERSION-intercept.
REPOSITORY = "localhost/alnair"
NODE = "gpu-node-0"
CAP_DAC_OVERRIDE = 1  # linux/capability.h
CAPABILITY_BITS = {"DAC_OVERRIDE": CAP_DAC_OVERRIDE}
MIB = 1 << 20
COLLECTORS = ("cuda", "host", "python", "nvml")  # the chart's defaults, cache off
GPU_LABEL = re.compile(r'gpu="([^"]*)"')


@dataclass
class Images:
    exporter: str
    installer: str
    workload: str


@dataclass
class Node:
    """The host directories the chart's hostPaths name."""

    segments: Path
    library: Path


@dataclass
class ExporterPod:
    name: str
    rendered: dict  # the Pod made of the DaemonSet's template, as rendered
    bridged: podman_gaps.Bridged
    address: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"


@pytest.fixture(scope="module")
def podman() -> list[str]:
    return podman_command()


@pytest.fixture(scope="module")
def images(podman, tmp_path_factory) -> Images:
    """tests/image's builds (same commands, same tags), tagged as the chart names them; the pause image; bullseye."""
    base_image(podman, tmp_path_factory.mktemp("base"))
    exporter, installer = f"{REPOSITORY}:{VERSION}", f"{REPOSITORY}:{VERSION}-intercept"
    run([*podman, "tag", build(podman, "exporter", EXPORTER_IMAGE), exporter])
    run([*podman, "tag", build(podman, "intercept", INTERCEPT_IMAGE), installer])
    kube_play.pause_image(podman, installer, tmp_path_factory.mktemp("pause"))
    workload = bullseye(podman, tmp_path_factory.mktemp("bullseye"))
    return Images(exporter, installer, workload)


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Node:
    """Paths that do not exist yet: the pod's DirectoryOrCreate volumes make them, as the kubelet would."""
    root = tmp_path_factory.mktemp("node")
    return Node(root / "run" / "alnair" / "shm", root / "opt" / "alnair")


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory) -> Path:
    """Certificates of this module's own: tests/injector rewrites its shared ones to test reloading."""
    directory = tmp_path_factory.mktemp("tls")
    write_tls_files(directory)
    return directory


@pytest.fixture(scope="module")
def rendered(node, tls_dir) -> list[dict]:
    """The chart's objects with the test's images, node directories, a free metrics port and the webhook on."""
    ca_bundle = base64.b64encode((tls_dir / "ca.crt").read_bytes()).decode()
    return objects(
        {
            "image": {"repository": REPOSITORY},
            "hostPaths": {"segments": str(node.segments), "library": str(node.library)},
            "web": {"port": free_port()},
            "injector": {"enabled": True, "tls": {"existingSecret": "alnair-injector-tls", "caBundle": ca_bundle}},
        }
    )


@pytest.fixture(scope="module")
def exporter_pod(podman, images, rendered, tmp_path_factory):
    daemonset = one(rendered, "DaemonSet")
    pod = podman_gaps.as_pod(daemonset["spec"]["template"], f"alnair-{uuid.uuid4().hex[:8]}")
    bridged = podman_gaps.bridge(pod, NODE)
    name = pod["metadata"]["name"]
    try:  # removed however far the play got
        kube_play.play(podman, bridged.pod, tmp_path_factory.mktemp("exporter-pod"))
        port = kubelet_probes.port_number(pod["spec"]["containers"][0], "metrics")
        yield ExporterPod(name, pod, bridged, kube_play.pod_address(podman, name), port)
    finally:
        kube_play.remove(podman, name)


def exporter_container(podman: list[str], pod: ExporterPod) -> dict:
    data = kube_play.container(podman, pod.name, "exporter")
    assert data["State"]["Running"], kube_play.logs(podman, pod.name, "exporter")
    return data


def samples(pod: ExporterPod) -> dict[str, float] | None:
    try:
        return parse_samples(scrape_text(pod.url))
    except OSError:
        return None


def test_the_bridges_are_exactly_the_documented_ones(exporter_pod):
    assert exporter_pod.rendered["spec"]["hostPID"] is True  # kube_play's containers.conf: pidns = "host"
    assert exporter_pod.bridged.changes == [
        "restartPolicy: Always -> OnFailure (podman 4.3 restarts init containers that succeeded)",
        f"exporter: env NODE_NAME from spec.nodeName -> value {NODE!r}",
        f"exporter: args '--node.name=$(NODE_NAME)' -> '--node.name={NODE}'",
        "exporter: livenessProbe run by the test, not by podman",
        "exporter: readinessProbe run by the test, not by podman",
    ]
    # the played pod is the rendered one with exactly those changes, made here by hand
    expected = copy.deepcopy(exporter_pod.rendered)
    expected["spec"]["restartPolicy"] = "OnFailure"
    exporter = expected["spec"]["containers"][0]
    exporter["env"] = [{"name": "NODE_NAME", "value": NODE} if e["name"] == "NODE_NAME" else e for e in exporter["env"]]
    exporter["args"] = [a.replace("$(NODE_NAME)", NODE) for a in exporter["args"]]
    del exporter["livenessProbe"], exporter["readinessProbe"]
    assert exporter_pod.bridged.pod == expected
    assert "restartPolicy" not in exporter_pod.rendered["spec"]  # a DaemonSet's pods: Always


def test_the_init_containers_made_the_segment_directory_and_installed_the_intercept(podman, exporter_pod, node):
    exporter_container(podman, exporter_pod)  # started: after both init containers succeeded
    segments, library = node.segments.stat(), node.library.stat()
    assert (segments.st_uid, stat.S_IMODE(segments.st_mode)) == (0, 0o1777)  # chmod 1777 by segment-directory
    assert (library.st_uid, stat.S_IMODE(library.st_mode)) == (0, 0o755)  # as DirectoryOrCreate made it
    assert sorted(p.name for p in node.library.iterdir()) == [VERSION]  # install-intercept, renamed into place
    assert (node.library / VERSION / "lib" / "libalnair.so").read_bytes()[:4] == b"\x7fELF"
    assert (node.library / VERSION / "python" / "sitecustomize.py").is_file()


def process_status(pid: int) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())


def test_the_exporter_runs_with_the_charts_security_context_and_nothing_more(podman, exporter_pod, node):
    wanted = exporter_pod.rendered["spec"]["containers"][0]
    context = wanted["securityContext"]
    data = exporter_container(podman, exporter_pod)
    assert data["HostConfig"]["ReadonlyRootfs"] is context["readOnlyRootFilesystem"] is True
    assert data["Config"]["User"] == f"{context['runAsUser']}:{context['runAsGroup']}"
    assert "no-new-privileges" in data["HostConfig"]["SecurityOpt"]
    assert data["HostConfig"]["PidMode"] == "host"
    assert wanted["resources"]["limits"] == {"cpu": "1", "memory": "512Mi"}
    assert (data["HostConfig"]["Memory"], data["HostConfig"]["CpuQuota"] / data["HostConfig"]["CpuPeriod"]) == (
        512 * MIB,
        1,
    )
    # the process itself: the chart's user, exactly the capabilities it adds after dropping ALL, no way to more
    status = process_status(data["State"]["Pid"])
    granted = sum(1 << CAPABILITY_BITS[c] for c in context["capabilities"]["add"])
    assert context["capabilities"]["drop"] == ["ALL"] and granted == 1 << CAP_DAC_OVERRIDE
    assert {k: int(status[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {
        "CapInh": 0,
        "CapPrm": granted,
        "CapEff": granted,
        "CapBnd": granted,
        "CapAmb": 0,
    }
    assert status["Uid"].split() == [str(context["runAsUser"])] * 4
    assert (status["NoNewPrivs"], status["Seccomp"]) == ("1", "2")  # seccomp filtering: the runtime's default profile
    # the rendered arguments, $(NODE_NAME) expanded as the kubelet would
    cmdline = Path(f"/proc/{data['State']['Pid']}/cmdline").read_bytes().decode().split("\0")[:-1]
    assert cmdline[2:] == [podman_gaps.expand(a, {"NODE_NAME": NODE}) for a in wanted["args"]]
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in data["Mounts"]}
    assert mounts == {"/host/proc": ("/proc", False), "/run/alnair/shm": (str(node.segments), True)}
    written = run([*podman, "exec", data["Id"], "touch", "/written"], check=False)
    assert written.returncode != 0 and "Read-only file system" in written.stderr, written


def test_the_probes_pass_as_the_kubelet_runs_them(exporter_pod):
    container = exporter_pod.rendered["spec"]["containers"][0]
    probes = exporter_pod.bridged.probes["exporter"]
    assert sorted(probes) == ["livenessProbe", "readinessProbe"]
    for probe in probes.values():
        assert probe["httpGet"] == {"path": "/healthz", "port": "metrics", "scheme": "HTTP"}
        wait_until(
            functools.partial(kubelet_probes.passes, exporter_pod.address, container, probe),
            timeout=kubelet_probes.patience(probe),
            interval=0.2,
        )


def test_the_exporter_serves_its_node_and_collectors_on_the_pods_address(podman, exporter_pod):
    def success() -> dict[str, float]:
        found = samples(exporter_pod) or {}
        return {c: found.get(f'alnair_exporter_collector_success{{collector="{c}"}}') for c in COLLECTORS}

    # no GPU and no NVIDIA toolkit here: NVML is unavailable, every other collector serves once it has sampled
    wait_until(lambda: success() == {"cuda": 1, "host": 1, "python": 1, "nvml": 0}, timeout=30, interval=0.2)
    found = samples(exporter_pod)
    assert found[f'alnair_node_info{{node="{NODE}"}}'] == 1
    assert found["alnair_host_cpus"] == os.cpu_count()
    # no service account token is mounted: the exporter names pods by their cgroup only, and says so
    assert "no Kubernetes API configured" in kube_play.logs(podman, exporter_pod.name, "exporter")


def injector_args(rendered: list[dict]) -> list[str]:
    """The chart's arguments for alnair-injector, but where it listens and its certificate: the test's own."""
    args = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    return [a for a in args if not a.startswith(("--web.listen-address=", "--tls."))]


def launches_of(pod: ExporterPod, pid: int) -> dict[str, float]:
    """alnair_cuda_kernel_launches_total of pid, by gpu."""
    series = [
        (key, value)
        for key, value in (samples(pod) or {}).items()
        if key.startswith("alnair_cuda_kernel_launches_total{") and f'pid="{pid}"' in key
    ]
    return {GPU_LABEL.search(key).group(1): value for key, value in series}


@dataclass
class Workload:
    name: str
    container: dict  # podman's inspection of its one container
    pid: int  # cuda_client's, on the host
    reported: dict[str, int]  # launches per device, as cuda_client printed them


def injected_pod(rendered: list[dict], tls_dir: Path, pod: dict, log: Path) -> dict:
    """pod as the API server would store it: the webhook's JSONPatch, from the injector run with the chart's args."""
    injector = Injector(tls_dir, log, *injector_args(rendered))
    try:
        return applied(pod, injector.review(pod))
    finally:
        injector.stop()


@pytest.fixture(scope="module")
def workload(podman, images, rendered, tls_dir, exporter_pod, tmp_path_factory):
    directory = tmp_path_factory.mktemp("workload")
    pod = workload_pod(f"train-{uuid.uuid4().hex[:8]}", images.workload, build_fake_driver(directory / "driver"))
    injected = injected_pod(rendered, tls_dir, pod, directory / "injector.log")
    bridged = podman_gaps.bridge(injected, NODE)
    assert bridged.changes == []  # the webhook's pod plays as it is
    name = pod["metadata"]["name"]
    try:
        kube_play.play(podman, bridged.pod, directory)
        reported = wait_until(
            lambda: reported_launches(kube_play.logs(podman, name, "trainer")), timeout=60, interval=0.2
        )
        container = kube_play.container(podman, name, "trainer")
        [pid] = client_pids(container["Id"])
        yield Workload(name, container, pid, reported)
    finally:
        kube_play.remove(podman, name)


def test_the_webhook_mounts_the_charts_node_directories(rendered, tls_dir, node, tmp_path):
    pod = workload_pod("train-0", "any", tmp_path)
    volumes = {
        v["name"]: v["hostPath"] for v in injected_pod(rendered, tls_dir, pod, tmp_path / "log")["spec"]["volumes"]
    }
    assert (volumes["alnair-lib"], volumes["alnair-shm"]) == (
        {"path": str(node.library / VERSION), "type": "Directory"},
        {"path": str(node.segments), "type": "Directory"},
    )


def test_the_workloads_launches_reach_the_exporter_pods_metrics(exporter_pod, workload):
    assert workload.reported == {str(d): THREADS // DEVICES * PER_THREAD for d in range(DEVICES)}
    wanted = {gpu: float(n) for gpu, n in workload.reported.items()}
    wait_until(lambda: launches_of(exporter_pod, workload.pid) == wanted, timeout=30, interval=0.2)


def test_the_workloads_segment_is_its_own_users_read_by_dac_override_alone(node, workload):
    [segment] = node.segments.glob("alnair.cuda.*")
    owner = segment.stat()
    assert (owner.st_uid, stat.S_IMODE(owner.st_mode)) == (WORKLOAD_UID, 0o640)


def test_the_workloads_process_is_described_as_podman_lays_out_its_cgroups(exporter_pod, workload):
    def info() -> list[str]:
        return [
            k
            for k in samples(exporter_pod) or {}
            if k.startswith("alnair_cuda_process_info{") and f'pid="{workload.pid}"' in k
        ]

    [series] = wait_until(info, timeout=30, interval=0.2)
    labels = dict(LABEL.findall(series))
    # podman's cgroups are /libpod_parent/<pod id>/<container id>, not the kubelet's kubepods/pod<uid>/<id>: no pod
    # UID there, and the first id-shaped component, the pod's, is taken for the container's; no API, so no names
    pid_namespace = str(os.stat(f"/proc/{workload.pid}/ns/pid").st_ino)  # the workload pod's own
    assert labels == {
        "comm": "cuda_client",
        "container_id": workload.container["Pod"],
        "pod_uid": "<none>",
        "pod": "<none>",
        "namespace": "<none>",
        "container": "<none>",
        "pid": str(workload.pid),
        "pid_namespace": pid_namespace,
    }


def client_pids(container_id: str) -> list[int]:
    """The host pids of cuda_client in the container: the exporter, in the host's pid namespace, labels them so."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and (proc / "comm").read_text().strip() == "cuda_client"
                and container_id in (proc / "cgroup").read_text()
            ):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile
            pass
    return pids
