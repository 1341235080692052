"""What the packaging promises, proven on a wheel built from the tracked files and installed into real venvs:
the base install is the training side on the standard library alone; the exporter is the `exporter` extra; the
dataset lab (dataset/, its own distribution) is neither in the wheel nor among its dependencies."""

from __future__ import annotations

import configparser
import email
import importlib.metadata
import json
import os
import re
import site
import subprocess
import sys
import sysconfig
import tomllib
import urllib.request
import zipfile
from pathlib import Path

import pytest

from support import ROOT, end_all, free_port, newest_glibc_needed, tracked_tree, wait_until

EXPORTER_EXTRA = {"prometheus-client", "psutil", "pyyaml", "bcrypt", "nvidia-ml-py", "kubernetes", "redis", "aiohttp"}
INJECTOR_EXTRA = {"aiohttp"}
CACHE_EXTRA = {"redis", "xxhash"}
LAB_DEPENDENCIES = {"pandas", "scipy", "scikit-learn", "matplotlib", "frictionless", "transformers"}
EXPORTER_SIDE_MODULES = [
    "prometheus_client",
    "yaml",
    "bcrypt",
    "pynvml",
    "kubernetes",
    "redis",
    "psutil",
    "xxhash",
    "aiohttp",
]
SCRIPTS = {
    "alnair-exporter": "alnair.exporter:main",
    "alnair": "alnair.cli.main:main",
    "alnair-run": "alnair.intercept.launcher:main",
    "alnair-injector": "alnair.injector:main",
}
COLLECTORS = {
    "host": "alnair.collectors.host:HostCollector",
    "cuda": "alnair.collectors.cuda:CudaCollector",
    "python": "alnair.collectors.python:PythonCollector",
    "cache": "alnair.collectors.cache:CacheCollector",
    "nvml": "alnair.collectors.nvml:NvmlCollector",
}
LONG = 600  # seconds: only ever reached when something hangs; the tests wait for conditions, not for time


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without what would configure Alnair or reach past the venv under test."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ALNAIR_", "PYTHON")) and k not in ("LD_PRELOAD", "VIRTUAL_ENV")
    }
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", **extra}


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", clean_env())
    return subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=LONG, **kwargs)


def requirement_name(requirement: str) -> str:
    """The normalized project name a Requires-Dist value starts with (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built once, offline, from a copy of the tracked files (as CI's clone has them)."""
    out = tmp_path_factory.mktemp("wheel")
    result = run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(tracked_tree(tmp_path_factory)),
        ]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [built] = out.glob("alnair_gpu-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_files(wheel) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def dist_info(wheel_files: dict[str, bytes], name: str) -> bytes:
    [path] = [p for p in wheel_files if re.fullmatch(rf"alnair_gpu-[^/]+\.dist-info/{name}", p)]
    return wheel_files[path]


@pytest.fixture(scope="module")
def metadata(wheel_files) -> email.message.Message:
    return email.message_from_bytes(dist_info(wheel_files, "METADATA"))


@pytest.fixture(scope="module")
def training_venv(tmp_path_factory, wheel) -> Path:
    """A venv that sees nothing of this machine's packages, with the wheel alone installed (no index, no deps)."""
    venv = tmp_path_factory.mktemp("training-venv")
    created = run([sys.executable, "-m", "venv", str(venv)])
    assert created.returncode == 0, created.stderr
    installed = run([str(venv / "bin" / "python"), "-m", "pip", "install", "--no-index", "--no-deps", str(wheel)])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


def test_wheel_requires_nothing_without_an_extra(metadata):
    requirements = metadata.get_all("Requires-Dist")
    assert requirements, "the wheel declares no extras at all"
    unconditional = [r for r in requirements if not re.search(r"""extra\s*==\s*["']""", r)]
    assert unconditional == []


def test_wheel_extras_name_the_exporter_injector_and_cache_dependencies(metadata):
    def names(extra: str) -> set[str]:
        marker = re.compile(rf"""extra\s*==\s*["']{extra}["']""")
        return {requirement_name(r) for r in metadata.get_all("Requires-Dist") if marker.search(r)}

    assert EXPORTER_EXTRA <= names("exporter")
    assert INJECTOR_EXTRA <= names("injector")
    assert CACHE_EXTRA <= names("cache")
    assert {"exporter", "injector", "cache", "parquet", "torch", "test"} <= set(metadata.get_all("Provides-Extra"))


def test_wheel_requires_none_of_the_dataset_labs_dependencies(metadata):
    """Nor does the test extra: the product's suite needs none of them (torch stays: the intercept's PyTorch hooks)."""
    assert not {requirement_name(r) for r in metadata.get_all("Requires-Dist")} & LAB_DEPENDENCIES
    assert "dataset" not in metadata.get_all("Provides-Extra")


def test_wheel_holds_the_products_packages_and_none_of_the_dataset_lab(wheel_files):
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    folders = {name.split("/")[1] for name in wheel_files if name.startswith("alnair/") and name.count("/") > 1}
    assert folders == {package.split(".")[1] for package in packages if package.count(".") == 1}
    tops = {name.split("/")[0] for name in wheel_files}
    assert tops == {
        "alnair",
        "alnair_intercept.pth",
        f"alnair_gpu-{importlib.metadata.version('alnair-gpu')}.dist-info",
    }
    assert not [name for name in wheel_files if name.startswith("alnair/dataset/") or "/data/" in name]


def test_wheel_declares_the_apache_license_and_carries_its_text(metadata, wheel_files):
    assert metadata["License-Expression"] == "Apache-2.0"
    assert dist_info(wheel_files, "licenses/LICENSE") == (ROOT / "LICENSE").read_bytes()


def test_wheel_version_is_the_installed_distributions(metadata, wheel):
    assert metadata["Version"] == importlib.metadata.version("alnair-gpu")
    assert wheel.name.startswith(f"alnair_gpu-{metadata['Version']}-")


def test_wheel_is_manylinux_2_17_because_its_native_library_needs_nothing_newer(wheel, wheel_files, tmp_path):
    python, abi, platform = wheel.name.removesuffix(".whl").split("-")[-3:]
    arch = sysconfig.get_platform().removeprefix("linux-")
    assert (python, abi, platform) == ("py3", "none", f"manylinux_2_17_{arch}.manylinux2014_{arch}")
    info = next(name for name in wheel_files if name.endswith(".dist-info/WHEEL"))
    assert "Root-Is-Purelib: false" in wheel_files[info].decode()
    library = tmp_path / "libalnair.so"
    library.write_bytes(wheel_files["alnair/intercept/libalnair.so"])
    assert newest_glibc_needed(library) == "GLIBC_2.17"


def test_wheel_carries_the_abi_the_intercept_library_and_the_switch(wheel_files):
    for name in (
        "alnair/abi/alnair_shm.h",
        "alnair/abi/layout.py",
        "alnair/intercept/libalnair.so",
        "alnair_intercept.pth",
    ):
        assert name in wheel_files, name
    assert wheel_files["alnair/abi/alnair_shm.h"] == (ROOT / "abi" / "alnair_shm.h").read_bytes()
    assert wheel_files["alnair/intercept/libalnair.so"][:4] == b"\x7fELF"
    assert wheel_files["alnair_intercept.pth"] == (ROOT / "alnair_intercept.pth").read_bytes()


def test_wheel_registers_the_four_commands_and_the_five_collectors(wheel_files):
    entry_points = configparser.ConfigParser(delimiters=("=",))
    entry_points.optionxform = str  # names are case-sensitive
    entry_points.read_string(dist_info(wheel_files, "entry_points.txt").decode())
    assert dict(entry_points["console_scripts"]) == SCRIPTS
    assert dict(entry_points["alnair.collectors"]) == COLLECTORS


def test_training_side_installs_alone_and_none_of_the_exporter_side_is_importable(training_venv):
    python = str(training_venv / "bin" / "python")
    listed = run([python, "-m", "pip", "list", "--format=json"])
    assert listed.returncode == 0, listed.stderr
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert names - {"pip", "setuptools"} == {"alnair-gpu"}  # pip and setuptools: what ensurepip put there
    code = f"import importlib.util; print([m for m in {EXPORTER_SIDE_MODULES!r} if importlib.util.find_spec(m)])"
    found = run([python, "-c", code])
    assert (found.returncode, found.stdout) == (0, "[]\n"), found.stderr


def test_alnair_run_runs_the_venvs_python_with_the_packaged_library(training_venv, tmp_path):
    bin_dir = training_venv / "bin"
    env = clean_env(PATH=os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]))
    code = "import alnair, os, sys; print(alnair.__version__); print(sys.prefix); print(os.environ.get('LD_PRELOAD'))"
    result = run([str(bin_dir / "alnair-run"), "python", "-c", code], env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    version, prefix, preload = result.stdout.splitlines()
    assert version == importlib.metadata.version("alnair-gpu")
    assert Path(prefix) == training_venv
    [site_packages] = (training_venv / "lib").glob("python*/site-packages")
    assert preload == str(site_packages / "alnair" / "intercept" / "libalnair.so")


def test_exporter_command_without_the_extra_says_in_one_line_how_to_install_it(training_venv, tmp_path):
    result = run([str(training_venv / "bin" / "alnair-exporter")], cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("alnair-exporter: error: the exporter side is not installed (no module ")
    assert "pip install 'alnair-gpu[exporter]'" in line


def test_injector_command_without_the_extra_says_in_one_line_how_to_install_it(training_venv, tmp_path):
    result = run([str(training_venv / "bin" / "alnair-injector")], cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert (
        line == "alnair-injector: error: the injector's server is not installed (no module aiohttp): "
        "pip install 'alnair-gpu[injector]'"
    )


def test_switch_variable_activates_the_python_intercept_through_the_pth(training_venv, tmp_path):
    python = str(training_venv / "bin" / "python")
    code = "import sys; print('alnair.intercept.activation' in sys.modules)"
    on = run(
        [python, "-c", code], env=clean_env(ALNAIR_PYTHON_INTERCEPT="1", ALNAIR_SHM_DIR=str(tmp_path)), cwd=tmp_path
    )
    off = run([python, "-c", code], env=clean_env(), cwd=tmp_path)
    assert (on.returncode, on.stdout) == (0, "True\n"), on.stderr
    assert (off.returncode, off.stdout) == (0, "False\n"), off.stderr


def test_alnair_profile_runs_on_the_product_alone(training_venv, tmp_path):
    result = run(
        [str(training_venv / "bin" / "alnair"), "profile", f"--prometheus=http://127.0.0.1:{free_port()}"], cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("alnair profile: error: cannot reach Prometheus at http://127.0.0.1:")


def test_alnair_top_prints_a_table_on_the_training_side_alone(training_venv, tmp_path):
    empty = tmp_path / "shm"
    empty.mkdir()
    result = run([str(training_venv / "bin" / "alnair"), "top", f"--shm.dir={empty}", "--interval=100ms"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("PID")


def metrics(url: str) -> str | None:
    """The body of a 200 answer to GET url, or None while nothing (or something else) answers."""
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=LONG) as response:
            return response.read().decode() if response.status == 200 else None
    except OSError:  # refused, reset, an HTTP error status (urllib.error.URLError)
        return None


def test_readme_first_command_installs_an_exporter_that_serves_metrics_without_flags(tmp_path_factory, tmp_path):
    """`pip install '.[exporter]' && alnair-exporter`, offline: the extra is satisfied by this machine's packages."""
    venv = tmp_path / "venv"
    created = run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    assert created.returncode == 0, created.stderr
    python = str(venv / "bin" / "python")
    if sys.prefix != sys.base_prefix:  # run from a venv: --system-site-packages reaches the base, not that venv
        own = run([python, "-c", "import site; print(site.getsitepackages()[0])"]).stdout.strip()
        Path(own, "outer-venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    tree = tracked_tree(tmp_path_factory)
    installed = run([python, "-m", "pip", "install", "--no-build-isolation", "--no-index", ".[exporter]"], cwd=tree)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    where = run([python, "-c", "import alnair.exporter; print(alnair.exporter.__file__)"], cwd=tmp_path)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr  # not this checkout's install

    port = free_port()
    log_path = tmp_path / "exporter.log"
    with open(log_path, "w") as log:
        exporter = subprocess.Popen(
            [str(venv / "bin" / "alnair-exporter")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=clean_env(ALNAIR_WEB_LISTEN_ADDRESS=f"127.0.0.1:{port}"),
        )
    try:
        body = wait_until(
            lambda: exporter.poll() is not None or metrics(f"http://127.0.0.1:{port}/metrics"),
            timeout=LONG,
            interval=0.2,
        )
        assert exporter.poll() is None, log_path.read_text()
        assert "alnair_exporter_build_info" in body, body
        exporter.terminate()
        exporter.wait(LONG)
    finally:
        end_all([exporter])
