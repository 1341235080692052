"""Pod UID and container id from /proc/<pid>/cgroup, for each cgroup version, driver and runtime."""

from __future__ import annotations

import pytest

from alnair.collectors.pods.cgroup import CgroupIdentity, cgroup_identity, parse_cgroup_file

UID = "6d3a1b8e-4c2f-4e8a-9b1d-2f7c5a9e0b11"
SYSTEMD_UID = UID.replace("-", "_")
ID = "4f1e9c3b2a7d8e6f5c4b3a29180706f5e4d3c2b1a09f8e7d6c5b4a3928170605"

# Lines as the kernel writes them, one fixture per runtime and driver.
CASES = {
    "v2 systemd containerd": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{ID}.scope\n",
        CgroupIdentity(UID, f"containerd://{ID}"),
    ),
    "v2 systemd cri-o": (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/crio-{ID}.scope\n",
        CgroupIdentity(UID, f"cri-o://{ID}"),
    ),
    "v2 systemd guaranteed docker (cri-dockerd)": (
        f"0::/kubepods.slice/kubepods-pod{SYSTEMD_UID}.slice/docker-{ID}.scope\n",
        CgroupIdentity(UID, f"docker://{ID}"),
    ),
    "v2 cgroupfs containerd": (f"0::/kubepods/burstable/pod{UID}/{ID}\n", CgroupIdentity(UID, ID)),
    "v2 cgroupfs cri-o": (f"0::/kubepods/besteffort/pod{UID}/crio-{ID}\n", CgroupIdentity(UID, f"cri-o://{ID}")),
    "v1 cgroupfs docker": (
        f"12:pids:/kubepods/burstable/pod{UID}/{ID}\n"
        f"11:memory:/kubepods/burstable/pod{UID}/{ID}\n"
        f"4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{ID}\n"
        f"1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n",
        CgroupIdentity(UID, ID),
    ),
    "v1 systemd containerd": (
        f"12:hugetlb:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{ID}.scope\n"
        f"11:devices:/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{ID}.scope\n"
        "0::/\n",
        CgroupIdentity(UID, f"containerd://{ID}"),
    ),
    "v1 systemd cri-o with the unified hierarchy mounted": (
        f"10:cpuset:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYSTEMD_UID}.slice/crio-{ID}.scope\n"
        "1:name=systemd:/system.slice/crio.service\n"
        "0::/system.slice/crio.service\n",
        CgroupIdentity(UID, f"cri-o://{ID}"),
    ),
    "kind node (kubelet.slice nesting)": (
        f"0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{SYSTEMD_UID}.slice/cri-containerd-{ID}.scope\n",
        CgroupIdentity(UID, f"containerd://{ID}"),
    ),
    "docker outside Kubernetes (systemd)": (
        f"0::/system.slice/docker-{ID}.scope\n",
        CgroupIdentity("", f"docker://{ID}"),
    ),
    "docker outside Kubernetes (v1 cgroupfs)": (f"13:memory:/docker/{ID}\n", CgroupIdentity("", ID)),
    "host login session": ("0::/user.slice/user-1000.slice/session-3.scope\n", CgroupIdentity()),
    "host service (v1)": (
        "12:memory:/system.slice/ssh.service\n1:name=systemd:/system.slice/ssh.service\n",
        CgroupIdentity(),
    ),
    "pod sandbox cgroup without a container component": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice\n",
        CgroupIdentity(UID, ""),
    ),
}


@pytest.mark.parametrize("text,expected", CASES.values(), ids=CASES.keys())
def test_cgroup_file_gives_pod_uid_and_container_id(text, expected):
    assert parse_cgroup_file(text) == expected


def test_cri_o_conmon_scope_is_not_taken_for_the_container():
    text = (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{SYSTEMD_UID}.slice/crio-conmon-{ID}.scope\n"
    )
    assert parse_cgroup_file(text) == CgroupIdentity(UID, "")


def test_a_pod_uid_outside_a_kubepods_path_is_not_believed():
    assert parse_cgroup_file(f"0::/user.slice/pod{UID}/x\n") == CgroupIdentity()


OTHER = "f" * 64  # the container id a process would pass off as its own


@pytest.mark.parametrize(
    "path",
    [
        f"/user.slice/user-1000.slice/user@1000.service/kubepods/burstable/pod{UID}/{ID}",  # a systemd user's subtree
        f"/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods-pod{SYSTEMD_UID}.slice/libpod-{ID}.scope",
        # seen from a cgroup namespace
        f"/../../../user.slice/user-1000.slice/user@1000.service/kubepods/pod{UID}/{ID}",
        f"/system.slice/docker-{OTHER}.scope/kubepods/pod{UID}/{ID}",  # inside a container outside Kubernetes
    ],
    ids=["user subtree", "rootless podman", "user subtree from a cgroup namespace", "container outside Kubernetes"],
)
def test_a_delegated_subtree_cannot_name_its_cgroups_after_another_pod(path):
    assert parse_cgroup_file(f"0::{path}\n").pod_uid == ""


def test_a_containers_own_sub_cgroups_cannot_rename_its_pod_or_container():
    mine = f"/kubepods/burstable/pod{UID}/{ID}"
    other_uid = "0b7c5e2a-1111-4222-8333-944455556666"
    assert parse_cgroup_file(f"0::{mine}/kubepods/pod{other_uid}/{OTHER}\n") == CgroupIdentity(UID, ID)


def test_a_pod_seen_from_the_exporters_cgroup_namespace_keeps_its_identity():
    path = f"/../../../kubepods-burstable.slice/kubepods-burstable-pod{SYSTEMD_UID}.slice/cri-containerd-{ID}.scope"
    assert parse_cgroup_file(f"0::{path}\n") == CgroupIdentity(UID, f"containerd://{ID}")


def test_malformed_lines_give_no_identity_instead_of_raising():
    assert parse_cgroup_file("garbage\n\n::\n0:\n") == CgroupIdentity()


def test_identity_is_read_from_the_given_procfs_and_none_for_a_gone_pid(tmp_path):
    (tmp_path / "31").mkdir()
    (tmp_path / "31" / "cgroup").write_text(CASES["v2 cgroupfs cri-o"][0])
    assert cgroup_identity(str(tmp_path), 31) == CgroupIdentity(UID, f"cri-o://{ID}")
    assert cgroup_identity(str(tmp_path), 32) is None
