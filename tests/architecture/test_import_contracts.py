"""The import contracts in pyproject.toml hold on the package as installed, and a backwards import breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from support import ROOT, installed_layout


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    linter = shutil.which("lint-imports") or pytest.fail("lint-imports is not installed: pip install -e '.[test]'")
    return subprocess.run(
        [linter, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        text=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )


@pytest.fixture
def tree(tmp_path) -> Path:
    return installed_layout(tmp_path / "site")


def test_every_contract_is_kept(tree):
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    "module, backwards_import, contract",
    [
        ("intercept/recorder.py", "import alnair.collectors.cuda", "Writers never import readers"),
        ("abi/records.py", "import alnair.intercept.recorder", "The ABI is neutral"),
        ("collectors/cuda.py", "import alnair.collectors.python", "Collectors never import one another"),
        (
            "collectors/nvml.py",
            "import alnair.exporter.sampler",
            "Collectors reach the exporter only through its plug-in API",
        ),
        ("cli/top.py", "import alnair.collectors.cuda", "Command-line tools read records through the ABI"),
        (
            "intercept/segment_writer.py",
            "import prometheus_client",
            "The training side runs on the standard library alone",
        ),
        ("intercept/recorder.py", "import alnair.intercept.this_process", "No import cycles between sibling modules"),
        ("injector/patch.py", "import alnair.exporter.scrape", "The injector imports no exporter"),
        ("webserver/bounds.py", "import alnair.exporter.server", "The web server is neutral"),
        ("profiler/jobs.py", "import alnair.collectors.python", "alnair profile reads Prometheus over HTTP only"),
        ("profiler/output.py", "import prometheus_client", "alnair profile reads Prometheus over HTTP only"),
        ("cli/top.py", "import alnair_dataset.plan", "The product never imports the dataset lab"),
    ],
)
def test_a_backwards_import_breaks_its_contract(tree, module, backwards_import, contract):
    target = tree / "alnair" / module
    target.write_text(target.read_text() + f"\n{backwards_import}  # deliberately backwards\n")
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout
