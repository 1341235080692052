"""What Debian 12's podman (4.3.1) cannot honour of a pod the chart renders, and the one minimal change to the rendered
YAML that bridges each, made by a named function here and reported (Bridged.changes), never silently. Everything else
is played as rendered: the init containers in order, each securityContext (user and group, capabilities, read-only
root, no new privileges; podman's default seccomp profile is the runtime's default), volumes with their hostPath
types, args, env, ports, resource limits.

- podman plays Pods and Deployments, not DaemonSets: `as_pod` makes the Pod the DaemonSet's template describes.
- With restartPolicy Always (a DaemonSet pod's) podman restarts each init container once it has succeeded, so the
  pod never gets past it: `init_containers_run_once` sets OnFailure, which is how Kubernetes runs init containers;
  the exporter is then restarted when it fails, but not after a clean exit (0, on SIGTERM), as Kubernetes would.
- podman refuses to create a container whose env comes from the field `spec.nodeName`: `node_name_given` writes
  the node's name as the value.
- podman passes `$(VAR)` in command and args on as they are: `variables_expanded` expands them as the kubelet does.
- podman turns probes into a healthcheck that systemd timers would run (there is no systemd here), with a named
  port as port 0, running `curl`, which the image does not have, and never acting on its result: `probes_taken_out`
  removes them and the test runs them as the kubelet does (kubelet_probes.py).
- podman ignores `hostPID`: kube_play.containers_conf gives a pod that asks for it `pidns = "host"`.

Ignored, with nothing here to stand in for them: serviceAccountName and its token (the exporter says it has no
Kubernetes API and names no pod), nodeSelector and tolerations (no scheduler), resources.requests, the pod's
namespace, Pod Security admission. Different, left as podman does it: podman publishes each containerPort on the
host's same port, which Kubernetes does not (the test sets the chart's own `web.port` to a free port); a container's
cgroup is /libpod_parent/<pod id>/<container id>, not the kubelet's kubepods/pod<uid>/<id>, so the exporter finds
no pod UID and takes the pod's id for the container's; an init container is removed once it has run, logs and all."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field

PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
# Kubernetes' dependent-variable syntax: $$ is a literal $, $(NAME) a variable defined earlier in env.
REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


@dataclass
class Bridged:
    """The pod as podman plays it, what was changed (one line each), and the probes left for the test to run."""

    pod: dict
    changes: list[str] = field(default_factory=list)
    probes: dict[str, dict[str, dict]] = field(default_factory=dict)  # container -> probe kind -> probe


def as_pod(template: dict, name: str) -> dict:
    """A controller's pod template as the Pod it would create: the template's metadata and spec, a name."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**copy.deepcopy(template["metadata"]), "name": name},
        "spec": copy.deepcopy(template["spec"]),
    }


def bridge(pod: dict, node_name: str) -> Bridged:
    """pod with every bridge it needs applied, each change reported."""
    result = Bridged(copy.deepcopy(pod))
    spec = result.pod["spec"]
    for change in (
        init_containers_run_once(spec),
        node_name_given(spec, node_name),
        variables_expanded(spec),
        probes_taken_out(spec, result.probes),
    ):
        result.changes += change
    return result


def containers(spec: dict) -> list[dict]:
    return spec.get("initContainers", []) + spec["containers"]


def init_containers_run_once(spec: dict) -> list[str]:
    if not spec.get("initContainers") or spec.get("restartPolicy", "Always") != "Always":
        return []
    spec["restartPolicy"] = "OnFailure"
    return ["restartPolicy: Always -> OnFailure (podman 4.3 restarts init containers that succeeded)"]


def node_name_given(spec: dict, node_name: str) -> list[str]:
    changes = []
    for container in containers(spec):
        for variable in container.get("env", []):
            if variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                variable.pop("valueFrom")
                variable["value"] = node_name
                changes.append(f"{container['name']}: env {variable['name']} from spec.nodeName -> value {node_name!r}")
    return changes


def expand(text: str, variables: dict[str, str]) -> str:
    """text with $(NAME) of a defined variable replaced, $$ unescaped, anything else kept, as the kubelet does."""
    return REFERENCE.sub(lambda m: "$" if m.group(0) == "$$" else variables.get(m.group(1), m.group(0)), text)


def variables_expanded(spec: dict) -> list[str]:
    changes = []
    for container in containers(spec):
        variables: dict[str, str] = {}
        for variable in container.get("env", []):
            if "value" in variable:
                variables[variable["name"]] = expand(variable["value"], variables)
        for key in ("command", "args"):
            before = container.get(key, [])
            after = [expand(item, variables) for item in before]
            if after != before:
                container[key] = after
                changes += [f"{container['name']}: {key} {b!r} -> {a!r}" for b, a in zip(before, after) if a != b]
    return changes


def probes_taken_out(spec: dict, taken: dict[str, dict[str, dict]]) -> list[str]:
    changes = []
    for container in spec["containers"]:
        for kind in PROBES:
            if kind in container:
                taken.setdefault(container["name"], {})[kind] = container.pop(kind)
                changes.append(f"{container['name']}: {kind} run by the test, not by podman")
    return changes
