"""Debian userlands made with debootstrap and imported into rootful podman (runc, explicit ulimits): the images'
base (bookworm) and an old-glibc training image (bullseye). No image registry is needed, only a Debian mirror."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

from support import require_binary

MIRROR = "http://deb.debian.org/debian"
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"]
LONG = 600  # seconds: only reached when something hangs
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # what Debian's own images set
# The debootstrapped trees are kept between runs on one machine (a developer's rerun skips the ~80 s each takes),
# under a name that changes with anything that would change the tree.
CACHE = Path("/var/tmp/alnair-image-base")


def run(command: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    if "input" not in kwargs:
        kwargs["stdin"] = subprocess.DEVNULL
    result = subprocess.run(command, capture_output=True, text=True, timeout=LONG, **kwargs)
    if check:
        assert result.returncode == 0, f"{command}: {result.stdout}{result.stderr}"
    return result


def podman_command() -> list[str]:
    return [require_binary("podman"), "--runtime", "runc"]


def key(suite: str, packages: list[str]) -> str:
    return hashlib.sha256(f"{suite} {MIRROR} minbase {' '.join(packages)}".encode()).hexdigest()[:16]


def tarball(suite: str, packages: list[str], scratch: Path) -> Path:
    """A minbase tree of suite with packages, as a tarball; made once per machine, without apt's downloads and lists."""
    made = CACHE / f"{suite}-{key(suite, packages)}.tar"
    if made.is_file():
        return made
    debootstrap = require_binary("debootstrap")
    tree = scratch / "rootfs"
    run([debootstrap, "--variant=minbase", f"--include={','.join(packages)}", suite, str(tree), MIRROR])
    for leftover in [*tree.glob("var/cache/apt/archives/*.deb"), *tree.glob("var/lib/apt/lists/*_*")]:
        leftover.unlink()
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = made.with_suffix(f".tmp-{os.getpid()}")
    run(["tar", "--numeric-owner", "-C", str(tree), "-cf", str(partial), "."])
    partial.rename(made)
    return made


def image(podman: list[str], name: str, suite: str, packages: list[str], scratch: Path) -> str:
    """name, imported from the suite's tarball; the keyed tag lets a rerun keep the image, and with it podman's cache
    of the layers built on it."""
    keyed = f"{name}-{key(suite, packages)}"
    if run([*podman, "image", "exists", keyed], check=False).returncode != 0:
        run(
            [
                *podman,
                "import",
                "--change",
                f"ENV PATH={DEBIAN_PATH}",
                "--change",
                'CMD ["/bin/bash"]',
                str(tarball(suite, packages, scratch)),
                keyed,
            ]
        )
    run([*podman, "tag", keyed, name])
    return name
