"""The dataset's import contract breaks when it imports exporter, collector or intercept code (the contract
itself is checked with the others by tests/architecture, whose layout and linter this reuses)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "import_contracts", Path(__file__).resolve().parents[1] / "architecture" / "test_import_contracts.py")
contracts = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(contracts)


@pytest.mark.parametrize("module, backwards_import", [
    ("dataset/recording.py", "import alnair.collectors.python"),
    ("dataset/workloads/common.py", "import alnair.intercept.recorder"),
])
def test_a_backwards_import_breaks_the_dataset_contract(tmp_path, module, backwards_import):
    tree = contracts.installed_layout(tmp_path / "site")
    target = tree / "alnair" / module
    target.write_text(target.read_text() + f"\n{backwards_import}  # deliberately backwards\n")
    result = contracts.lint_imports(tree)
    assert result.returncode == 1, result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith("The dataset imports no exporter, collector or intercept code") for line in broken), result.stdout
