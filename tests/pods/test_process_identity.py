"""Pod identity on the cuda collector's process info: cgroup-derived, named by the pod cache, or marked host."""

from __future__ import annotations

import argparse
import shutil

from alnair.collectors.cuda import CudaCollector
from alnair.collectors.pods.identity import PodIdentity
from alnair.collectors.pods.watcher import PodNames
from support import parse_samples

UID = "6d3a1b8e-4c2f-4e8a-9b1d-2f7c5a9e0b11"
CONTAINER = "4f1e9c3b2a7d8e6f5c4b3a29180706f5e4d3c2b1a09f8e7d6c5b4a3928170605"


class KnownPods:
    """The pod watcher's lookup, with its cache already filled."""

    def __init__(self, pods: dict[str, PodNames]):
        self.pods = pods

    def lookup(self, uid: str) -> PodNames | None:
        return self.pods.get(uid)


def fake_procfs(tmp_path, cgroups: dict[int, str]) -> str:
    root = tmp_path / "proc"
    root.mkdir()
    shutil.copy("/proc/stat", root / "stat")  # btime, for start times
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "cgroup").write_text(text)
    return str(root)


def process_info(shm_dir, procfs: str, watcher=None) -> tuple[CudaCollector, dict[str, dict[str, str]]]:
    """The collector, and pid -> labels of alnair_cuda_process_info."""
    collector = CudaCollector(argparse.Namespace(shm_dir=str(shm_dir), procfs=procfs))
    collector.identity = PodIdentity(procfs, watcher)
    infos = {}
    for key in parse_samples(collector.collect().decode()):
        if key.startswith("alnair_cuda_process_info{"):
            labels = dict(pair.split("=", 1) for pair in key[len("alnair_cuda_process_info{") : -1].split(","))
            infos[labels["pid"].strip('"')] = {k: v.strip('"') for k, v in labels.items()}
    return collector, infos


def test_process_in_a_pod_gets_cgroup_identity_and_names_from_the_cache(start_writer, shm_dir, tmp_path):
    in_pod, on_host = start_writer(), start_writer()
    procfs = fake_procfs(
        tmp_path,
        {
            in_pod.pid: "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CONTAINER}.scope\n",
            on_host.pid: "0::/user.slice/user-0.slice/session-1.scope\n",
        },
    )
    _, infos = process_info(shm_dir, procfs, KnownPods({UID: PodNames("trainer-0", "ml", {CONTAINER: "pytorch"})}))
    assert {k: infos[str(in_pod.pid)][k] for k in ("pod_uid", "container_id", "pod", "namespace", "container")} == {
        "pod_uid": UID,
        "container_id": f"containerd://{CONTAINER}",
        "pod": "trainer-0",
        "namespace": "ml",
        "container": "pytorch",
    }
    assert {k: infos[str(on_host.pid)][k] for k in ("pod_uid", "pod", "namespace", "container")} == {
        "pod_uid": "<none>",
        "pod": "<none>",
        "namespace": "<none>",
        "container": "<none>",
    }


def test_names_unknown_to_the_cache_are_marked_unknown_not_empty(start_writer, shm_dir, tmp_path):
    w = start_writer()
    procfs = fake_procfs(tmp_path, {w.pid: f"0::/kubepods/besteffort/pod{UID}/crio-{CONTAINER}\n"})
    info = process_info(shm_dir, procfs, KnownPods({}))[1][str(w.pid)]
    assert (info["pod_uid"], info["container_id"], info["pod"], info["namespace"]) == (
        UID,
        f"cri-o://{CONTAINER}",
        "<unknown>",
        "<unknown>",
    )


def test_a_claim_contradicting_the_cgroup_is_ignored_and_counted(start_writer, shm_dir, tmp_path):
    """A writer (or a planted segment) naming another pod is served under its kernel's pod."""
    w = start_writer(env={"ALNAIR_POD_UID": "pod-1", "ALNAIR_CONTAINER_ID": "cri-o://c1"})
    on_host = start_writer(env={"ALNAIR_POD_UID": "pod-1"})
    agrees = start_writer(env={"ALNAIR_POD_UID": UID, "ALNAIR_CONTAINER_ID": CONTAINER})
    procfs = fake_procfs(
        tmp_path,
        {
            w.pid: f"0::/kubepods/besteffort/pod{UID}/crio-{CONTAINER}\n",
            on_host.pid: "0::/user.slice/user-0.slice/session-1.scope\n",
            agrees.pid: f"0::/kubepods/besteffort/pod{UID}/crio-{CONTAINER}\n",
        },
    )
    collector, infos = process_info(
        shm_dir,
        procfs,
        KnownPods(
            {
                "pod-1": PodNames("web-0", "apps", {"c1": "server"}),
                UID: PodNames("trainer-0", "ml", {CONTAINER: "pytorch"}),
            }
        ),
    )
    assert (infos[str(w.pid)]["pod_uid"], infos[str(w.pid)]["container_id"], infos[str(w.pid)]["pod"]) == (
        UID,
        f"cri-o://{CONTAINER}",
        "trainer-0",
    )
    assert infos[str(on_host.pid)]["pod"] == "<none>"
    assert infos[str(agrees.pid)]["container"] == "pytorch"
    assert collector.identity.claims_ignored == 2
    collector.collect()  # the same processes again: still two, counted once each
    assert parse_samples(collector.collect().decode())["alnair_cuda_identity_claims_ignored_total"] == 2


def test_a_claim_is_believed_where_the_kernel_cannot_tell(start_writer, shm_dir, tmp_path):
    """A pid this exporter cannot see (no hostPID) has no cgroup here: its own claim is all there is."""
    w = start_writer(env={"ALNAIR_POD_UID": "pod-1", "ALNAIR_CONTAINER_ID": "cri-o://c1"})
    identity = PodIdentity(fake_procfs(tmp_path, {}), KnownPods({"pod-1": PodNames("web-0", "apps", {"c1": "server"})}))
    assert identity.of_pid(None, "pod-1", "cri-o://c1").pod == "web-0"
    assert identity.of_pid(w.pid, "pod-1", "cri-o://c1").pod == "web-0"  # no /proc/<pid> in this procfs
    assert identity.claims_ignored == 0
