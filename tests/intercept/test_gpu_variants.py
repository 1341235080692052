"""The intercept's variants that the GPU machine builds for an A/B against the tree (tests/gpu/patches, built by
tests/gpu/build_variant.sh for run_pending.sh): each still applies to the tree and builds, so a GPU call does not
find out first."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHES = sorted((ROOT / "tests" / "gpu" / "patches").glob("*.patch"))


def test_there_are_variants_to_check():
    assert [p.stem for p in PATCHES] == ["cap-bank", "no-turns"]


@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_a_variant_applies_to_the_tree_and_builds(patch: Path, tmp_path: Path):
    build = ["bash", str(ROOT / "tests" / "gpu" / "build_variant.sh"), patch.stem, str(tmp_path)]
    library = Path(subprocess.run(build, check=True, capture_output=True, text=True).stdout.strip())
    tree = {f.name: f.read_text() for f in (ROOT / "intercept").glob("*.[ch]")}
    changed = [f.name for f in (tmp_path / "intercept").glob("*.[ch]") if f.read_text() != tree[f.name]]
    assert changed, f"{patch.name} changed nothing"
    assert library == tmp_path / "intercept" / "build" / "libalnair.so" and library.stat().st_size > 0
