"""The tree keeps the style pyproject.toml sets: ruff finds nothing to lint or reformat in the repository, mypy no type
error in the exporter side's packages as installed, and each tool fails on a scratch copy given a violation of its
kind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, installed_layout

CONFIG = ROOT / "pyproject.toml"
PACKAGES = ["alnair.abi", "alnair.exporter", "alnair.collectors", "alnair.webserver"]


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--config", str(CONFIG), "--no-cache"],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=120,
    )
    if "No module named ruff" in result.stderr:
        pytest.fail("ruff is not installed: pip install -e '.[test]'")
    return result


def mypy(tree: Path, *packages: str) -> tuple[int, list[str]]:
    """mypy's exit status and its error lines (paths as installed: alnair/collectors/cache.py) on `packages`."""
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(CONFIG), *(f"-p={p}" for p in packages)],
        cwd=tree,
        text=True,
        capture_output=True,
        timeout=600,
    )
    if "No module named mypy" in result.stderr:
        pytest.fail("mypy is not installed: pip install -e '.[test]'")
    return result.returncode, [line for line in result.stdout.splitlines() if re.match(r"\S+\.py:\d+: error:", line)]


def test_the_repository_lints():
    result = ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_repository_is_formatted():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_exporter_side_type_checks(tmp_path):
    status, errors = mypy(installed_layout(tmp_path / "site"), *PACKAGES)
    assert (status, errors) == (0, [])


def test_a_lint_error_fails_the_check(tmp_path):
    scratch = tmp_path / "naming.py"
    original = (ROOT / "abi" / "naming.py").read_text()
    scratch.write_text(original)
    assert ruff("check", str(scratch), cwd=tmp_path).returncode == 0
    scratch.write_text(original + "\n\ndef reader_name() -> str:\n    import json\n\n    return READER_MARKER\n")
    result = ruff("check", str(scratch), cwd=tmp_path)
    assert result.returncode == 1 and "F401" in result.stdout, result.stdout + result.stderr


def test_a_format_deviation_fails_the_check(tmp_path):
    scratch = tmp_path / "naming.py"
    original = (ROOT / "abi" / "naming.py").read_text()
    scratch.write_text(original)
    assert ruff("format", "--check", str(scratch), cwd=tmp_path).returncode == 0
    scratch.write_text(original.replace("import os\n", "import os ;\n", 1))
    result = ruff("format", "--check", str(scratch), cwd=tmp_path)
    assert result.returncode == 1 and "naming.py" in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_type_error_fails_the_check(tmp_path):
    tree = installed_layout(tmp_path / "site")
    naming = tree / "alnair" / "abi" / "naming.py"
    assert mypy(tree, "alnair.abi") == (0, [])
    naming.write_text(naming.read_text() + '\n\ndef segment_count() -> int:\n    return "none"\n')
    status, errors = mypy(tree, "alnair.abi")
    assert status == 1 and any(
        line.startswith("alnair/abi/naming.py:") and "[return-value]" in line for line in errors
    ), errors
