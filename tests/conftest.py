"""Shared fixtures: the C test writer built from the ABI header, writer processes, a running exporter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import support
from support import Exporter, Locker, Writer, end_all

# support's Redis fixtures, for any test that asks for one
cluster, redis_cluster, start_redis = support.cluster, support.redis_cluster, support.start_redis

ROOT = Path(__file__).resolve().parents[1]
INTERCEPT = ROOT / "intercept"
TEST_WRITER = INTERCEPT / "build" / "alnair-shm-test-writer"


@pytest.fixture(scope="session")
def test_writer_binary() -> Path:
    """The C writer, built with the project's Makefile (the real segment code)."""
    subprocess.run(["make", "-s", "-C", str(INTERCEPT)], check=True)
    return TEST_WRITER


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory) -> Path:
    """A directory holding the fake libnvidia-ml.so.1 (tests/doubles), for the LD_LIBRARY_PATH of the tests that
    want it: the intercept's limits and alnair top's GPU rows."""
    d = tmp_path_factory.mktemp("fake-nvml")
    subprocess.run(
        [
            "gcc",
            "-std=gnu11",
            "-O2",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            "-fvisibility=hidden",
            "-o",
            str(d / "libnvidia-ml.so.1"),
            str(ROOT / "tests" / "doubles" / "fake_libnvml.c"),
        ],
        check=True,
    )
    return d


@pytest.fixture
def shm_dir(tmp_path) -> Path:
    d = tmp_path / "shm"
    d.mkdir()
    return d


@pytest.fixture
def start_writer(test_writer_binary, shm_dir):
    writers: list[Writer] = []

    def start(*args: str, env: dict[str, str] | None = None, directory: Path | None = None) -> Writer:
        writer = Writer(test_writer_binary, directory or shm_dir, list(args), env)
        writers.append(writer)
        return writer

    yield start
    end_all(w.proc for w in writers)


@pytest.fixture
def start_exporter(tmp_path):
    running: list[Exporter] = []

    def start(*args: str, env: dict[str, str] | None = None, python: str = sys.executable) -> Exporter:
        exporter = Exporter(list(args), tmp_path / f"exporter-{len(running)}.log", env, python)
        running.append(exporter)
        return exporter

    yield start
    end_all(e.proc for e in running)


@pytest.fixture
def locker():
    held = Locker()
    yield held
    held.close()


@pytest.fixture
def plugin_root(tmp_path, monkeypatch):
    """A site directory on sys.path (and, through support.env_with_path, on an exporter's PYTHONPATH)
    that plug-in distributions are installed into; their modules are forgotten afterwards."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "") or "").startswith(str(root)):
            del sys.modules[name]
