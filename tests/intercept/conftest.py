"""Builds the intercept, the fake driver (a test double named libcuda.so.1) and the client program."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from support import LineReader, end_all

ROOT = Path(__file__).resolve().parents[2]
INTERCEPT = ROOT / "intercept"
HERE = Path(__file__).resolve().parent


def gcc(*args: str) -> None:
    subprocess.run(["gcc", "-std=gnu11", "-O2", "-Wall", "-Werror", f"-I{INTERCEPT}", *args], check=True)


def program(directory: Path, name: str, *modules: str) -> Path:
    """programs/<name>.c built into `directory` with the intercept's modules (intercept/<module>.c) it drives."""
    binary = directory / name
    sources = [str(INTERCEPT / f"{module}.c") for module in modules]
    gcc(f"-I{ROOT / 'abi'}", "-o", str(binary), str(HERE / "programs" / f"{name}.c"), *sources, "-lpthread", "-lm")
    return binary


@pytest.fixture(scope="session")
def intercept_library() -> Path:
    subprocess.run(["make", "-s", "-C", str(INTERCEPT)], check=True)
    return INTERCEPT / "build" / "libalnair.so"


@pytest.fixture(scope="session")
def fake_driver_dir(tmp_path_factory) -> Path:
    """A directory holding the fake libcuda.so.1, for LD_LIBRARY_PATH."""
    d = tmp_path_factory.mktemp("fake-driver")
    # -Bsymbolic: like the real driver, its own addresses bind inside it, whatever is preloaded
    gcc(
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        "-Wl,-Bsymbolic",
        "-o",
        str(d / "libcuda.so.1"),
        str(HERE / "doubles" / "fake_libcuda.c"),
        "-lpthread",
    )
    (d / "libcuda.so").symlink_to("libcuda.so.1")
    return d


@pytest.fixture(scope="session")
def client_programs(fake_driver_dir) -> dict[str, Path]:
    source = str(HERE / "programs" / "cuda_client.c")
    runtime_like = fake_driver_dir / "cuda_client"
    linked = fake_driver_dir / "cuda_client_direct"
    gcc("-o", str(runtime_like), source, "-ldl", "-lpthread")
    gcc("-DDIRECT_LINK", "-o", str(linked), source, f"-L{fake_driver_dir}", "-lcuda", "-ldl", "-lpthread")
    return {"gpa": runtime_like, "dlsym": runtime_like, "direct": linked}


class Client:
    """A running cuda_client: its report lines, kept alive until stop()."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.output = LineReader(proc.stdout)
        self.lines: list[str] = []
        self.read_until_ready()

    def read_until_ready(self) -> None:
        while (line := self.output.read_line(60)) and line.strip() != "ready":
            self.lines.append(line.strip())
        if not line:
            raise RuntimeError(f"client exited: {self.proc.wait()} {self.proc.stderr.read()}")

    def values(self, key: str) -> list[list[str]]:
        return [line.split()[1:] for line in self.lines if line.split()[0] == key]

    def stop(self) -> str:
        self.proc.stdin.close()
        self.proc.wait(30)
        return self.proc.stderr.read()


@pytest.fixture
def run_client(intercept_library, fake_driver_dir, client_programs, shm_dir):
    clients: list[Client] = []

    def run(lookup: str, *args: str, env: dict[str, str] | None = None, preload: bool = True) -> Client:
        environment = {
            **os.environ,
            "LD_LIBRARY_PATH": str(fake_driver_dir),
            "ALNAIR_SHM_DIR": str(shm_dir),
            **(env or {}),
        }
        if preload:
            environment["LD_PRELOAD"] = str(intercept_library)
        proc = subprocess.Popen(
            [str(client_programs[lookup]), lookup, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        client = Client(proc)
        clients.append(client)
        return client

    yield run
    end_all(c.proc for c in clients)


def published_record(shm_dir: Path, pid: int):
    """The CudaProcess a live writer has published, or None."""
    from alnair.abi import layout
    from alnair.abi.segments import SegmentDirectory

    directory = SegmentDirectory(str(shm_dir), layout.KIND_CUDA, reclaim=False)
    return next((parsed.record for parsed in directory.read() if parsed.segment.holder_pid == pid), None)


def published(shm_dir: Path, pid: int) -> dict[int, object]:
    """The devices a live writer has published: device index -> its CudaDevice."""
    record = published_record(shm_dir, pid)
    return {d.device_index: d for d in record.devices} if record else {}


def writer_pids(shm_dir: Path) -> set[int]:
    """The pids of the cuda segments in the directory (alnair.cuda.<namespace>.<pid>.<start>)."""
    return {int(name.split(".")[3]) for name in os.listdir(shm_dir) if name.startswith("alnair.cuda.")}
