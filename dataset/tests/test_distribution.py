"""The dataset's wheel, built offline from its tracked files: the modules, the workloads and every data file under
alnair_dataset/, nothing else of the folder, and the product as a dependency."""

from __future__ import annotations

import email
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

DATASET = Path(__file__).resolve().parents[1]


def tracked(prefix: str = "") -> list[str]:
    """The folder's tracked files (as CI's clone has them), relative to it."""
    listed = (
        subprocess.run(["git", "ls-files", "-z", "--", prefix or "."], cwd=DATASET, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    return [name for name in listed if name and (DATASET / name).is_file()]


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> dict[str, bytes]:
    tree, out = tmp_path_factory.mktemp("dataset-src"), tmp_path_factory.mktemp("dataset-wheel")
    for name in tracked():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(DATASET / name, tree / name)
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), str(tree)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [built] = out.glob("alnair_dataset-*-py3-none-any.whl")
    with zipfile.ZipFile(built) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def test_wheel_holds_the_modules_the_workloads_and_the_data_and_nothing_else(wheel_files):
    shipped = {name.removeprefix("alnair_dataset/") for name in wheel_files if name.startswith("alnair_dataset/")}
    expected = {name for name in tracked() if "/" not in name and name.endswith(".py")}
    expected |= {name for name in tracked("workloads") if name.endswith(".py")} | set(tracked("data"))
    assert shipped == expected
    assert {name.split("/")[0] for name in wheel_files} == {"alnair_dataset", "alnair_dataset-0.1.0.dist-info"}
    assert wheel_files["alnair_dataset/data/datapackage.json"] == (DATASET / "data" / "datapackage.json").read_bytes()


def test_wheel_depends_on_the_product_for_alnair_profile(wheel_files):
    metadata = email.message_from_bytes(wheel_files["alnair_dataset-0.1.0.dist-info/METADATA"])
    assert "alnair-gpu[parquet]" in metadata.get_all("Requires-Dist")
    assert {"campaign", "test"} <= set(metadata.get_all("Provides-Extra"))
