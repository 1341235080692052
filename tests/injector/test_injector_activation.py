"""The variables the patch sets turn the Python intercept on in a Python that does not have Alnair installed, from
the training-side package laid out on the node as the installer lays it out (the Dockerfile: `pip install
--target python/`, then the bootstrap sitecustomize.py copied to its top); an image's own sitecustomize still runs."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from injector_support import env_of, make_pod

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = (
    "import sys; "
    "print([type(f).__name__ for f in sys.meta_path if type(f).__module__.startswith('alnair')]); "
    "print(sys.modules['alnair'].__file__ if 'alnair' in sys.modules else None)"
)


def node_directory(target: Path) -> Path:
    """--library.host-path's python/: every package of pyproject's package-dir with its package data, and the
    bootstrap sitecustomize.py at the top."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in setuptools["package-dir"].items():
        destination = target / "python" / Path(*package.split("."))
        destination.mkdir(parents=True, exist_ok=True)
        for pattern in ["*.py", *setuptools["package-data"].get(package, [])]:
            for source in glob.glob(pattern, root_dir=ROOT / folder):
                (destination / source).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / folder / source, destination / source)
    shutil.copy2(ROOT / "intercept" / "bootstrap" / "sitecustomize.py", target / "python" / "sitecustomize.py")
    return target


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """A Python without Alnair, whose image ships a sitecustomize of its own."""
    venv = tmp_path_factory.mktemp("image") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "sitecustomize.py").write_text("print('image sitecustomize')\n")
    return venv / "bin" / "python"


def run_in_container(python: Path, container: dict, node: Path) -> list[str]:
    """The program under the container's environment, /opt/alnair being the node directory mounted there (the
    library itself is left out: this test needs no CUDA)."""
    env = {
        name: value.replace("/opt/alnair", str(node))
        for name, value in env_of(container).items()
        if name != "LD_PRELOAD"
    }
    result = subprocess.run(
        [str(python), "-c", PROGRAM],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], **env},
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr
    return result.stdout.splitlines()


def test_the_annotation_turns_the_python_intercept_on(injector, bare_python, tmp_path):
    node = node_directory(tmp_path / "node")
    pod = injector.inject(make_pod(annotations={"alnair.io/python-intercept": "true"}))
    assert run_in_container(bare_python, pod["spec"]["containers"][0], node) == [
        "image sitecustomize",
        "['HookTorchOnImport']",
        str(node / "python" / "alnair" / "__init__.py"),
    ]


def test_without_it_the_python_intercept_stays_off(injector, bare_python, tmp_path):
    node = node_directory(tmp_path / "node")
    pod = injector.inject(make_pod())
    assert run_in_container(bare_python, pod["spec"]["containers"][0], node) == ["image sitecustomize", "[]", "None"]
