"""A training pod's stand-in: cuda_client launching kernels on the fake CUDA driver (tests/intercept), both built by
Zig for glibc 2.17 (tests/image/project_images.py), so they run in the Debian bullseye userland. The
driver comes in a hostPath volume of the pod's own, where on a GPU node the NVIDIA toolkit would mount libcuda."""

from __future__ import annotations

from pathlib import Path

from project_images import fake_driver

WORKLOAD_UID = 4321  # not root and not the exporter's: its segment is readable to the exporter by DAC_OVERRIDE only
THREADS, PER_THREAD, DEVICES = 4, 250, 2  # launches per device: each thread launches on device (its index % DEVICES)


def build_fake_driver(directory: Path) -> Path:
    """directory, made, holding libcuda.so.1 (the fake driver) and cuda_client."""
    directory.mkdir()
    directory.chmod(0o755)  # the pod's user must enter it (pytest makes its own directories 0700)
    return fake_driver(directory)


def workload_pod(name: str, image: str, driver: Path) -> dict:
    """The pod as its owner writes it, opted in by label; the webhook adds the intercept. sleep's pipe holds the
    client's stdin open, so it stays alive (and its segment live) once it has reported."""
    client = f"/fake-driver/cuda_client gpa launches {THREADS} {PER_THREAD} {DEVICES}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"alnair.io/inject": "true"}},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsUser": WORKLOAD_UID, "runAsGroup": WORKLOAD_UID},
            "containers": [
                {
                    "name": "trainer",
                    "image": image,
                    "command": ["/bin/sh", "-c", f"sleep infinity | {client}"],
                    "env": [{"name": "LD_LIBRARY_PATH", "value": "/fake-driver"}],
                    "volumeMounts": [{"name": "fake-driver", "mountPath": "/fake-driver", "readOnly": True}],
                }
            ],
            "volumes": [{"name": "fake-driver", "hostPath": {"path": str(driver), "type": "Directory"}}],
        },
    }


def reported_launches(output: str) -> dict[str, int] | None:
    """Launches per device ("0", "1") as the client printed them, once it printed "ready"; None before."""
    lines = [line.split() for line in output.splitlines()]
    if ["ready"] not in lines:
        return None
    return {fields[1]: int(fields[2]) for fields in lines if fields[:1] == ["launches"]}
