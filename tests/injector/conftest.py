"""Fixtures of tests/injector: a shared injector with the default flags, and injectors with flags of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from injector_support import Injector
from support import write_tls_files


@pytest.fixture(scope="session")
def tls_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("tls")
    write_tls_files(directory)
    return directory


@pytest.fixture(scope="module")
def injector(tls_dir, tmp_path_factory):
    running = Injector(tls_dir, tmp_path_factory.mktemp("injector") / "injector.log")
    yield running
    running.stop()


@pytest.fixture
def start_injector(tmp_path):
    """Starts injectors with flags of their own, each with certificate files of its own unless tls_dir is given."""
    started: list[Injector] = []

    def start(*args: str, tls_dir: Path | None = None, **options) -> Injector:
        if tls_dir is None:
            tls_dir = tmp_path / f"tls-{len(started)}"
            tls_dir.mkdir()
            write_tls_files(tls_dir)
        started.append(Injector(tls_dir, tmp_path / f"injector-{len(started)}.log", *args, **options))
        return started[-1]

    yield start
    for running in started:
        if running.proc.poll() is None:
            running.stop()
