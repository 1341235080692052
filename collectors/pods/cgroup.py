"""Pod UID and container id from /proc/<pid>/cgroup: cgroup v1 and v2, systemd and cgroupfs drivers,
containerd, CRI-O and Docker naming."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# kubepods path components: ".../pod<uid>/..." (cgroupfs) or "...-pod<uid_with_underscores>.slice" (systemd).
POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?$")
# The container's own component: "<64 hex>" (cgroupfs) or "<runtime>-<64 hex>.scope" (systemd);
# "crio-conmon-<id>" is CRI-O's monitor process, not the container, so it does not match.
CONTAINER = re.compile(r"^(?:(docker|cri-containerd|crio|containerd|libpod)-)?([0-9a-f]{64})(?:\.scope)?$")
# The scheme Kubernetes writes in status.containerStatuses[].containerID, by cgroup prefix.
RUNTIME_SCHEME = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "containerd": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
}


@dataclass(frozen=True)
class CgroupIdentity:
    """What the cgroup path says; "" where it says nothing (a host process has neither)."""

    pod_uid: str = ""
    container_id: str = ""  # "<scheme>://<64 hex>" when the runtime is named, else the bare id


# How deep the kubelet's kubepods cgroup may lie: /kubepods (cgroupfs), /kubepods.slice (systemd), or under one
# --cgroup-root (kind's /kubelet.slice/kubelet-kubepods.slice). A delegated subtree (systemd user sessions,
# rootless containers: /user.slice/user-N.slice/user@N.service/...) starts three deep, so a user naming cgroups
# in it after another pod ("kubepods/pod<its uid>/<its container>") names nothing.
KUBEPODS_DEPTH = 2


def parse_cgroup_path(path: str) -> CgroupIdentity:
    """The pod: the first pod<uid> component at or under a kubepods component at most KUBEPODS_DEPTH deep; the
    container: the first container component after it (deeper ones are the container's own sub-cgroups, which
    it may name as it likes). Leading ".." (a path seen from another cgroup namespace) are dropped."""
    components = [c for c in path.split("/") if c]
    while components and components[0] == "..":
        components.pop(0)
    kubepods = next((i for i, c in enumerate(components[:KUBEPODS_DEPTH]) if "kubepods" in c), None)
    pod_uid, after = "", 0
    for i in range(kubepods if kubepods is not None else len(components), len(components)):
        if match := POD_UID.search(components[i]):
            pod_uid, after = match.group(1).replace("_", "-"), i + 1
            break
    for component in components[after:]:
        if match := CONTAINER.match(component):
            runtime, hex_id = match.groups()
            return CgroupIdentity(pod_uid, f"{RUNTIME_SCHEME[runtime]}://{hex_id}" if runtime else hex_id)
    return CgroupIdentity(pod_uid, "")


def parse_cgroup_file(text: str) -> CgroupIdentity:
    """The identity in a /proc/<pid>/cgroup file: the v2 line ("0::/path") or the first v1 hierarchy
    that names a container (v1 controllers can disagree while a container starts)."""
    best = CgroupIdentity()
    for line in text.splitlines():
        _, _, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        found = parse_cgroup_path(path)
        if found.container_id or (found.pod_uid and not best.pod_uid):
            best = found
            if found.container_id and found.pod_uid:
                break
    return best


def cgroup_identity(procfs: str, pid: int) -> CgroupIdentity | None:
    """The pid's cgroup identity, or None when the process is gone or unreadable."""
    try:
        with open(os.path.join(procfs, str(pid), "cgroup")) as f:
            return parse_cgroup_file(f.read())
    except OSError:
        return None
