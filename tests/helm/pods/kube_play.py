"""Pods played with `podman kube play` (rootful, runc) as this machine allows: a containers.conf of the test's own
carries the explicit ulimits (kube play has no --ulimit), the pause image (podman makes its own from catatonit,
which Debian's podman only recommends, so CI's --no-install-recommends install lacks it) and, for a pod with
`hostPID: true`, the host's pid namespace (podman 4.3 ignores the field; podman_gaps.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from debian_base import LIMITS, run

PAUSE = "localhost/alnair-test-pause"


def pause_image(podman: list[str], busybox_image: str, directory: Path) -> str:
    """The pod sandbox's process: busybox's sleep (from the installer image) for as long as the pod lives."""
    (directory / "Containerfile").write_text(f'FROM {busybox_image}\nENTRYPOINT ["/bin/sleep", "2147483647"]\nCMD []\n')
    run([*podman, "build", *LIMITS, "--tag", PAUSE, str(directory)])
    return PAUSE


def containers_conf(pod: dict, directory: Path) -> Path:
    ulimits = ", ".join(f'"{LIMITS[i + 1]}"' for i in range(0, len(LIMITS), 2))
    pid = 'pidns = "host"\n' if pod["spec"].get("hostPID") else ""
    path = directory / f"{pod['metadata']['name']}.containers.conf"
    path.write_text(f'[containers]\ndefault_ulimits = [{ulimits}]\n{pid}[engine]\ninfra_image = "{PAUSE}"\n')
    return path


def play(podman: list[str], pod: dict, directory: Path) -> None:
    """Plays pod, started: its init containers run to completion, in order, before its containers start. Remove it
    with remove() whether or not this succeeded: a container that failed to start leaves the pod behind."""
    path = directory / f"{pod['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(pod))
    env = {**os.environ, "CONTAINERS_CONF": str(containers_conf(pod, directory))}
    run([*podman, "kube", "play", str(path)], env=env)


def remove(podman: list[str], name: str) -> None:
    run([*podman, "pod", "rm", "--force", "--time", "0", name], check=False)


def container(podman: list[str], pod_name: str, name: str) -> dict:
    """`podman inspect` of a pod's container (podman names it <pod>-<container>)."""
    [data] = json.loads(run([*podman, "container", "inspect", f"{pod_name}-{name}"]).stdout)
    return data


def pod_address(podman: list[str], pod_name: str) -> str:
    """The pod's IP on podman's kube network, where a scraper reaches it as Prometheus reaches a pod's IP."""
    infra = json.loads(run([*podman, "pod", "inspect", pod_name]).stdout)["InfraContainerID"]
    [data] = json.loads(run([*podman, "container", "inspect", infra]).stdout)
    [network] = data["NetworkSettings"]["Networks"].values()
    return network["IPAddress"]


def logs(podman: list[str], pod_name: str, name: str) -> str:
    result = run([*podman, "logs", f"{pod_name}-{name}"], check=False)
    return result.stdout + result.stderr
