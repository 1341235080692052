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
RUNTIME_SCHEME = {"docker": "docker", "cri-containerd": "containerd", "containerd": "containerd",
                  "crio": "cri-o", "libpod": "podman"}


@dataclass(frozen=True)
class CgroupIdentity:
    """What the cgroup path says; "" where it says nothing (a host process has neither)."""

    pod_uid: str = ""
    container_id: str = ""  # "<scheme>://<64 hex>" when the runtime is named, else the bare id


def parse_cgroup_path(path: str) -> CgroupIdentity:
    pod_uid = container_id = ""
    for component in path.split("/"):
        if "kubepods" in path and (match := POD_UID.search(component)):
            pod_uid = match.group(1).replace("_", "-")
        elif match := CONTAINER.match(component):
            runtime, hex_id = match.groups()
            container_id = f"{RUNTIME_SCHEME[runtime]}://{hex_id}" if runtime else hex_id
    return CgroupIdentity(pod_uid, container_id)


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
