"""The intercept's variants that the GPU machine builds for an A/B against the tree (tests/gpu/patches, applied by
tests/gpu/run_pending.sh): each still applies to the tree and builds, so a GPU call does not find out first."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "tests" / "gpu" / "patches").glob("*.patch"))


def test_there_are_variants_to_check():
    assert [p.stem for p in PATCHES] == ["cap-bank", "no-turns"]


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_a_variant_applies_to_the_tree_and_builds(patch: Path, tmp_path: Path):
    shutil.copytree(ROOT / "intercept", tmp_path / "intercept", ignore=shutil.ignore_patterns("build"))
    before = {f.name: f.read_text() for f in (tmp_path / "intercept").glob("*.[ch]")}
    subprocess.run(["git", "apply", "-p1", str(patch)], cwd=tmp_path, check=True)
    changed = [f.name for f in (tmp_path / "intercept").glob("*.[ch]") if f.read_text() != before[f.name]]
    assert changed, f"{patch.name} changed nothing"
    make = ["make", "-s", "-C", str(tmp_path / "intercept"), "LIBCC=gcc", f"ABI={ROOT / 'abi'}", "build/libalnair.so"]
    subprocess.run(make, check=True)
    assert (tmp_path / "intercept" / "build" / "libalnair.so").stat().st_size > 0
