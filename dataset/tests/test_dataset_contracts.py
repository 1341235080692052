"""The dataset's import contracts (dataset/pyproject.toml) hold on the product and the dataset laid out as installed,
a backwards import breaks them, and every part of the product but its public API is forbidden to the dataset."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

DATASET = Path(__file__).resolve().parents[1]
PRODUCT = DATASET.parent
CONFIG = DATASET / "pyproject.toml"
PUBLIC = {"alnair", "alnair.commandline", "alnair.profiler"}  # alnair.profiler's names only: its modules are not
PUBLIC_ONLY = "The dataset uses only the product's public API"  # the contract's name


def package_dirs(project: Path) -> dict[str, Path]:
    mapping = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {package: project / folder for package, folder in mapping.items()}


def installed_layout(target: Path) -> Path:
    """Both distributions' packages as pip installs them: the linter walks one directory per package."""
    for package, folder in {**package_dirs(PRODUCT), **package_dirs(DATASET)}.items():
        destination = target.joinpath(*package.split("."))
        destination.mkdir(parents=True, exist_ok=True)
        for source in folder.glob("*.py"):
            shutil.copy2(source, destination / source.name)
    return target


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    linter = shutil.which("lint-imports") or pytest.fail("lint-imports is missing: pip install -e './dataset[test]'")
    return subprocess.run(
        [linter, "--config", str(CONFIG), "--no-cache"],
        cwd=tree,
        text=True,
        capture_output=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tree)},
    )


def contracts() -> list[dict]:
    return tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]["contracts"]


@pytest.fixture
def tree(tmp_path) -> Path:
    return installed_layout(tmp_path / "site")


def test_every_contract_is_kept(tree):
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in result.stdout


def test_every_part_of_the_product_but_its_public_api_is_forbidden_to_the_dataset():
    """A part added to the product is outside the public API until it is named here and in the contract."""
    parts = {package for package in package_dirs(PRODUCT) if package.count(".") == 1}
    parts |= {f"alnair.{module.stem}" for module in (PRODUCT / "sdk").glob("*.py") if module.stem != "__init__"}
    parts |= {
        f"alnair.profiler.{module.stem}" for module in (PRODUCT / "profiler").glob("*.py") if module.stem != "__init__"
    }
    [public_api] = [c for c in contracts() if c["name"] == PUBLIC_ONLY]
    assert set(public_api["forbidden_modules"]) == parts - PUBLIC


@pytest.mark.parametrize(
    "module, backwards_import, contract",
    [
        ("alnair_dataset/campaign.py", "import alnair.intercept.launcher", PUBLIC_ONLY),
        ("alnair_dataset/recording.py", "from alnair.profiler.jobs import STARTS", PUBLIC_ONLY),
        ("alnair_dataset/workloads/common.py", "import alnair.auto", PUBLIC_ONLY),
        ("alnair/cli/top.py", "import alnair_dataset.plan", "The product never imports the dataset"),
        (
            "alnair_dataset/modes.py",
            "import alnair_dataset.plan",
            "No import cycles between the dataset's sibling modules",
        ),
    ],
)
def test_a_backwards_import_breaks_its_contract(tree, module, backwards_import, contract):
    target = tree / module
    target.write_text(target.read_text() + f"\n{backwards_import}  # deliberately backwards\n")
    result = lint_imports(tree)
    assert result.returncode == 1, result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout
