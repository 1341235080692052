"""Who a pid is: its pod UID and container id from its cgroup, its pod, namespace and container names
from the pod watch when known; one resolver per exporter, shared by every collector that labels pids."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .cgroup import CgroupIdentity, cgroup_identity
from .watcher import PodWatcher, start_pod_watcher

NOT_IN_POD = "<none>"  # not a valid Kubernetes name, so it cannot be mistaken for one
UNKNOWN = "<unknown>"  # in a pod whose names the exporter has not learned (no API access, or not yet)


@dataclass(frozen=True)
class ProcessIdentity:
    pod_uid: str
    container_id: str
    pod: str
    namespace: str
    container: str

    def labels(self) -> dict[str, str]:
        return {
            "pod_uid": self.pod_uid,
            "container_id": self.container_id,
            "pod": self.pod,
            "namespace": self.namespace,
            "container": self.container,
        }


class PodIdentity:
    """Resolves pids; a process's cgroup is read once while the caller keeps asking for it (see `retain`).
    A process is its pid and start time (clock ticks since boot; 0 where unknown), so a reused pid is read afresh.

    The kernel decides: a process's pod and container are its cgroup's. What a writer claims of itself
    (its segment header) is used only where the kernel cannot tell: a pid this exporter cannot see (no
    hostPID), or a container id its cgroup does not name. A claim that contradicts the cgroup is ignored
    and counted once per process in `claims_ignored`."""

    def __init__(self, procfs: str, watcher: PodWatcher | None = None):
        self.procfs = procfs
        self.watcher = watcher
        self.claims_ignored = 0
        self._cgroups: dict[tuple[int, int], CgroupIdentity] = {}
        self._contradicted: set[tuple[int, int]] = set()

    def of_pid(
        self, pid: int | None, pod_uid: str = "", container_id: str = "", started: int = 0, alive: bool = True
    ) -> ProcessIdentity:
        """`pod_uid`/`container_id`: what the process claimed of itself; the cgroup of `pid` wins. A process
        that has exited is known only by what was read while it lived: its pid and its claim are anyone's now."""
        if not alive:
            return self._as_last_seen((pid, started)) if pid is not None else self.named("", "")
        kernel = self._cgroup((pid, started)) if pid is not None else None
        if kernel is None or pid is None:  # the kernel cannot tell: the claim is all there is
            return self.named(pod_uid, container_id)
        if contradicts(CgroupIdentity(pod_uid, container_id), kernel):
            if (pid, started) not in self._contradicted:
                self._contradicted.add((pid, started))
                self.claims_ignored += 1
            return self.named(kernel.pod_uid, kernel.container_id)
        # In a pod whose container the cgroup does not name (a v1 hierarchy mid-start), the claim may.
        return self.named(kernel.pod_uid, kernel.container_id or (container_id if kernel.pod_uid else ""))

    def _as_last_seen(self, process: tuple[int, int]) -> ProcessIdentity:
        found = self._cgroups.get(process)
        return self.named(found.pod_uid, found.container_id) if found else self.named("", "")

    def _cgroup(self, process: tuple[int, int]) -> CgroupIdentity | None:
        found = self._cgroups.get(process) or cgroup_identity(self.procfs, process[0])
        if found is not None:
            self._cgroups[process] = found
        return found

    def named(self, pod_uid: str, container_id: str) -> ProcessIdentity:
        if not pod_uid:
            return ProcessIdentity(NOT_IN_POD, container_id, NOT_IN_POD, NOT_IN_POD, NOT_IN_POD)
        names = self.watcher.lookup(pod_uid) if self.watcher else None
        if names is None:
            return ProcessIdentity(pod_uid, container_id, UNKNOWN, UNKNOWN, UNKNOWN)
        container = names.containers.get(container_id.rpartition("://")[2], UNKNOWN)
        return ProcessIdentity(pod_uid, container_id, names.name, names.namespace, container)

    def retain(self, processes) -> None:
        """Forget the cgroups of processes ((pid, start ticks) pairs) the caller no longer sees."""
        keep = set(processes)
        self._cgroups = {process: found for process, found in self._cgroups.items() if process in keep}
        self._contradicted &= keep


def contradicts(claim: CgroupIdentity, kernel: CgroupIdentity) -> bool:
    """The claim names another pod than the cgroup's, or another container (compared by the id itself:
    "containerd://<id>" and "<id>" agree), or a container where the kernel says there is no pod."""
    if claim.pod_uid and claim.pod_uid != kernel.pod_uid:
        return True
    if claim.container_id and kernel.container_id:
        return claim.container_id.rpartition("://")[2] != kernel.container_id.rpartition("://")[2]
    return bool(claim.container_id) and not kernel.pod_uid


_shared: dict[str, PodWatcher | None] = {}  # node name -> its watcher
_shared_lock = threading.Lock()


def pod_identity(options) -> PodIdentity:
    """A resolver for one collector, over the exporter's one pod watcher (started by the first caller).
    Options without a node name (tests, tools) get cgroup-derived identity only."""
    node_name = getattr(options, "node_name", None)
    watcher = None
    if node_name:
        with _shared_lock:
            if node_name not in _shared:
                _shared[node_name] = start_pod_watcher(node_name)
            watcher = _shared[node_name]
    return PodIdentity(options.procfs, watcher)
