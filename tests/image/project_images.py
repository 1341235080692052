"""The images and programs the container tests share: the project's images built from the Dockerfile on the
debootstrapped bookworm base, the bullseye training userland, and the fake CUDA driver with its client program
built by Zig for glibc 2.17 so that they run in any of those userlands. tests/image, tests/deploy and tests/helm
build them alike, so podman's layer cache and the debootstrapped trees serve every suite."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from debian_base import LIMITS, image, run
from support import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CA = "/etc/ssl/certs/ca-certificates.crt"  # the proxy's CA: mounted for builds' apt and pip, never copied
SOURCE = "https://example.org/alnair.git"  # any URL: tests/image checks it reaches the label
BASE_PACKAGES = ["python3", "python3-venv"]  # python3-venv: the build stage's `python3 -m venv` needs ensurepip
BASE_IMAGE = "localhost/alnair-base:bookworm"  # the Dockerfile's default BASE
EXPORTER_IMAGE = f"localhost/alnair-exporter:{VERSION}"
INTERCEPT_IMAGE = f"localhost/alnair-intercept:{VERSION}"
USERLAND = "localhost/alnair-bullseye"  # a training image older than the build machine: glibc 2.31
INTERCEPT = ROOT / "intercept"
DOUBLES = ROOT / "tests" / "intercept"


def base_image(podman: list[str], scratch: Path) -> str:
    return image(podman, BASE_IMAGE, "bookworm", BASE_PACKAGES, scratch)


def bullseye(podman: list[str], scratch: Path) -> str:
    return image(podman, USERLAND, "bullseye", ["python3"], scratch)


def build_file(podman: list[str], tag: str, file: Path, context: Path, *args: str) -> str:
    """podman build with the host's network for apt and pip, the CA mounted and explicit ulimits; podman's layer
    cache makes a rebuild of unchanged inputs take seconds."""
    run(
        [
            *podman,
            "build",
            "--network",
            "host",
            "-v",
            f"{CA}:{CA}:ro",
            *LIMITS,
            *args,
            "--tag",
            tag,
            "--file",
            str(file),
            str(context),
        ]
    )
    return tag


def build(podman: list[str], target: str, tag: str) -> str:
    """One of the Dockerfile's targets (exporter, intercept), on BASE_IMAGE."""
    return build_file(podman, tag, ROOT / "Dockerfile", ROOT, "--build-arg", f"SOURCE={SOURCE}", "--target", target)


def zig_cc(*args: str) -> None:
    """Zig's C compiler for glibc 2.17, as intercept/Makefile runs it, for the tests' own programs."""
    target = f"{sysconfig.get_platform().removeprefix('linux-')}-linux-gnu.2.17"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ziglang",
            "cc",
            "-target",
            target,
            "-std=gnu11",
            "-O2",
            "-Wall",
            "-Werror",
            f"-I{INTERCEPT}",
            *args,
        ],
        check=True,
    )


def fake_driver(directory: Path) -> Path:
    """libcuda.so.1 (the fake driver of tests/intercept) and cuda_client, built into directory for any userland."""
    zig_cc(
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        "-Wl,-Bsymbolic",
        "-o",
        str(directory / "libcuda.so.1"),
        str(DOUBLES / "doubles" / "fake_libcuda.c"),
        "-lpthread",
    )
    zig_cc("-o", str(directory / "cuda_client"), str(DOUBLES / "programs" / "cuda_client.c"), "-ldl", "-lpthread")
    return directory
