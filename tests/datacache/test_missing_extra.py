"""`import alnair.datacache` without the cache extra: one line naming the missing module and the install command,
from a Python whose meta path makes the extra's modules unimportable, as they are in an install without it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
MODULES = ("redis", "hiredis", "xxhash")  # what alnair.datacache's modules import beyond the standard library

# Run before the test's code: the blocked modules (and their submodules) raise ModuleNotFoundError as absent ones do.
PRELUDE = """
import importlib.abc, sys
BLOCKED = {blocked!r}
imported = [m for m in sys.modules if m.split(".")[0] in BLOCKED or m.startswith("alnair.datacache")]
assert not imported, "imported at start-up"
class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Absent())
"""


def run_without(blocked: tuple[str, ...], code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PRELUDE.format(blocked=blocked) + code], capture_output=True, text=True, timeout=60
    )


def requirement_names(requirement: str) -> set[str]:
    """'redis[hiredis]>=5.0' -> {'redis', 'hiredis'}: the distribution and the extras it brings."""
    name, extras = re.match(r"([A-Za-z0-9_.-]+)(?:\[([^]]*)])?", requirement).groups()
    return {name, *(e.strip() for e in (extras or "").split(",") if e.strip())}


def install_command() -> str:
    """The one extra of pyproject.toml whose own requirements bring every module the cache imports."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    [extra] = [
        e for e, requirements in extras.items() if set(MODULES) <= set().union(*map(requirement_names, requirements))
    ]
    return f"pip install '{PYPROJECT['project']['name']}[{extra}]'"


def test_the_install_command_is_the_cache_extra_of_the_alnair_distribution():
    assert install_command() == "pip install 'alnair-gpu[cache]'"


@pytest.mark.parametrize("blocked", [("xxhash",), ("redis",), ("hiredis",), MODULES], ids="-".join)
@pytest.mark.parametrize("module", ["alnair.datacache", "alnair.datacache.content"])
def test_importing_the_cache_without_its_extra_fails_with_one_line_naming_the_module_and_the_command(blocked, module):
    result = run_without(blocked, f"import {module}")
    assert result.returncode == 1
    line = f"alnair.datacache needs the cache extra (no module {', '.join(blocked)}): {install_command()}"
    assert result.stderr.splitlines()[-1] == f"ModuleNotFoundError: {line}", result.stderr
    assert "During handling of the above exception" not in result.stderr  # no chained ModuleNotFoundError above it


def test_the_error_is_an_import_error_that_names_the_first_missing_module():
    code = """
try:
    import alnair.datacache
except ImportError as e:
    print(type(e).__name__, e.name, "alnair.datacache" in sys.modules)
"""
    result = run_without(("redis", "xxhash"), code)
    assert (result.returncode, result.stdout) == (0, "ModuleNotFoundError redis False\n"), result.stderr


def test_a_dependency_that_fails_on_a_module_of_its_own_keeps_its_own_error():
    result = run_without(("redis.commands",), "import alnair.datacache")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "ModuleNotFoundError: No module named 'redis.commands'", result.stderr


def test_with_the_extra_the_cache_imports():
    result = run_without((), "import alnair.datacache as d; print(*d.__all__)")
    assert (result.returncode, result.stdout) == (0, "CachedDataset CacheLoader DirectoryOrigin Origin\n"), (
        result.stderr
    )
