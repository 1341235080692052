"""libalnair.so in a training image older than the build machine (the glibc 2.17 build, intercept/Makefile): a Debian
bullseye userland (glibc 2.31) made with debootstrap and run with podman. The library this suite builds preloads
into its python3 and into a driver-API program there, and what they do on the fake driver reaches the segment the
host reads; the same sources built by this machine's gcc do not even load there, which shows the userland is old
enough to tell the two apart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from debian_base import LIMITS, podman_command, run
from project_images import INTERCEPT, bullseye as make_bullseye, fake_driver
from support import LineReader, records, wait_until

MIB = 1 << 20
# A training process as the ctypes view of the runtime's first steps: a context on device 0, then 3 MiB.
ALLOCATE = """
import ctypes, os, sys
cuda = ctypes.CDLL("libcuda.so.1")
context, pointer = ctypes.c_void_p(), ctypes.c_uint64()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
assert cuda.cuCtxSetCurrent(context) == 0 and cuda.cuMemAlloc_v2(ctypes.byref(pointer), 3 << 20) == 0
print("pid", os.getpid(), "libalnair" in open("/proc/self/maps").read(), flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def podman() -> list[str]:
    return podman_command()


@pytest.fixture(scope="module")
def bullseye(podman, tmp_path_factory) -> str:
    return make_bullseye(podman, tmp_path_factory.mktemp("bullseye"))


@pytest.fixture(scope="module")
def mounted(tmp_path_factory) -> Path:
    """What the container sees at /alnair: the suite's library, a gcc build of it, the fake driver and a client."""
    d = tmp_path_factory.mktemp("alnair")
    subprocess.run(["make", "-s", "-C", str(INTERCEPT)], check=True)
    (d / "libalnair.so").write_bytes((INTERCEPT / "build" / "libalnair.so").read_bytes())
    subprocess.run(
        ["make", "-s", "-C", str(INTERCEPT), "LIBCC=gcc", f"BUILD={d / 'gcc'}", f"{d / 'gcc'}/libalnair.so"], check=True
    )
    return fake_driver(d)


def start(podman: list[str], userland: str, mounted: Path, shm: Path, library: str, *command: str) -> subprocess.Popen:
    """command in the userland, preloading /alnair/<library>; host pids, so the segment names the host's pid."""
    return subprocess.Popen(
        [
            *podman,
            "run",
            "--rm",
            "-i",
            "--pid",
            "host",
            *LIMITS,
            "-v",
            f"{mounted}:/alnair:ro",
            "-v",
            f"{shm}:/seg",
            "-e",
            f"LD_PRELOAD=/alnair/{library}",
            "-e",
            "LD_LIBRARY_PATH=/alnair",
            "-e",
            "ALNAIR_SHM_DIR=/seg",
            userland,
            *command,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def devices(shm: Path, pid: int) -> dict[int, object]:
    from alnair.abi import layout

    record = records(shm, layout.KIND_CUDA).get(pid)
    return {d.device_index: d for d in record.devices} if record else {}


def test_the_userland_has_glibc_2_31_where_a_gcc_build_of_this_machine_does_not_load(
    podman, bullseye, mounted, tmp_path
):
    version = run(
        [
            *podman,
            "run",
            "--rm",
            *LIMITS,
            bullseye,
            "python3",
            "-c",
            "import os; print(os.confstr('CS_GNU_LIBC_VERSION'))",
        ]
    ).stdout
    assert version.strip() == "glibc 2.31"
    proc = start(podman, bullseye, mounted, tmp_path, "gcc/libalnair.so", "python3", "-c", "print('ran')")
    out, err = proc.communicate(timeout=120)
    assert "GLIBC_2.3" in err and "not found" in err and "ran" not in out, (out, err)


def test_python3_there_preloads_the_library_and_its_allocation_is_published(podman, bullseye, mounted, tmp_path):
    proc = start(podman, bullseye, mounted, tmp_path, "libalnair.so", "python3", "-c", ALLOCATE)
    try:
        line = LineReader(proc.stdout).read_line(120).strip()
        assert line.split()[0::2] == ["pid", "True"], (line, proc.stderr.read() if proc.poll() is not None else "")
        pid = int(line.split()[1])
        wait_until(
            lambda: devices(tmp_path, pid).get(0) and devices(tmp_path, pid)[0].bytes_in_use == 3 * MIB, timeout=30
        )
        proc.stdin.close()
        assert proc.wait(60) == 0 and proc.stderr.read() == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_driver_api_program_there_has_every_entry_point_wrapped_and_counted(podman, bullseye, mounted, tmp_path):
    proc = start(podman, bullseye, mounted, tmp_path, "libalnair.so", "/alnair/cuda_client", "gpa", "every-entry")
    try:
        output = LineReader(proc.stdout)
        report = []
        while (line := output.read_line(120).strip()) != "ready":
            assert line, proc.stderr.read()  # the program ended early
            report.append(line.split())
        wrapped = {name: value for kind, name, value in (r for r in report if r[0] == "wrapped")}
        assert len(wrapped) == 46 and set(wrapped.values()) == {"yes"}, wrapped
        from alnair.abi import layout

        [pid] = wait_until(lambda: list(records(tmp_path, layout.KIND_CUDA)), timeout=30)
        wait_until(lambda: devices(tmp_path, pid).get(0) and devices(tmp_path, pid)[0].kernel_launches == 7, timeout=30)
        assert devices(tmp_path, pid)[1].kernel_launches == 1
        proc.stdin.close()
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
