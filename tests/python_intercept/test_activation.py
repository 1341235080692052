"""Turning the intercept on: alnair-run, the ALNAIR_PYTHON_INTERCEPT switch through the installed .pth, `import
alnair.auto`."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from alnair.intercept import launcher
from support import tracked_tree

# Prints what a training program would see: the switch, whether torch got hooked, its pid.
PROBE = textwrap.dedent("""
    import os, sys
    before = "alnair.intercept.activation" in sys.modules
    import torch
    from torch.utils.data.dataloader import _BaseDataLoaderIter
    hooked = hasattr(_BaseDataLoaderIter.__next__, "alnair_original")
    print(os.environ.get("ALNAIR_PYTHON_INTERCEPT"), before, hooked, os.getpid(), os.environ.get("LD_PRELOAD", ""))
""")


def probe(python: str, env: dict[str, str], cwd: Path, prefix: list[str] = ()) -> list[str]:
    proc = subprocess.Popen(
        [*prefix, python, "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    fields = out.split()
    assert fields[3] == str(proc.pid)  # alnair-run replaced itself: same pid, same signals
    return fields + [err]


def test_alnair_run_switches_on_every_python_it_starts(tmp_path):
    alnair_run = shutil.which("alnair-run") or pytest.fail("alnair-run is not installed: pip install -e '.[test]'")
    env = {k: v for k, v in os.environ.items() if k not in ("ALNAIR_PYTHON_INTERCEPT", "LD_PRELOAD")}
    switch, imported_at_start, hooked = probe(sys.executable, env, tmp_path, [alnair_run])[:3]
    assert (switch, imported_at_start, hooked) == ("1", "True", "True")


def test_alnair_run_preloads_the_cuda_intercept_when_built(tmp_path):
    library = tmp_path / "libalnair.so"
    env = launcher.intercept_environment({"PYTHONPATH": "/x", "LD_PRELOAD": "/other.so"}, library)
    assert env["LD_PRELOAD"] == f"{library} /other.so"
    assert env["PYTHONPATH"] == f"{launcher.BOOTSTRAP_DIR}{os.pathsep}/x"
    assert "LD_PRELOAD" not in launcher.intercept_environment({}, None)


def test_alnair_run_preloads_the_built_library_and_runs_the_command(tmp_path):
    built = launcher.cuda_library() or pytest.fail("libalnair.so is not built: make -C intercept")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    fields = probe(sys.executable, env, tmp_path, [shutil.which("alnair-run")])
    assert fields[4] == str(built) and "not built" not in fields[5]


def test_alnair_run_says_when_the_cuda_intercept_is_not_built_and_runs_anyway(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(launcher, "cuda_library", lambda: None)
    monkeypatch.setattr(launcher.os, "execvpe", lambda file, args, env: ran.append((file, args, env)))
    launcher.main(["python", "train.py"])
    [(file, args, env)] = ran
    assert (file, args, env[launcher.ENV_SWITCH]) == ("python", ["python", "train.py"], "1")
    assert "LD_PRELOAD" not in env or str(launcher.intercept.SOURCE_DIR) not in env["LD_PRELOAD"]
    assert capsys.readouterr().err.startswith("alnair-run: CUDA intercept library not built (make -C ")


def test_every_command_says_its_version():
    expected = importlib.metadata.version("alnair-gpu")
    for command in (["alnair-run"], ["alnair"], ["alnair-exporter"], ["alnair", "top"]):
        result = subprocess.run([shutil.which(command[0]), *command[1:], "--version"], capture_output=True, text=True)
        assert (result.returncode, result.stdout) == (0, f"{' '.join(command)} {expected}\n"), result.stderr


def test_alnair_run_reports_a_missing_command_in_one_line():
    result = subprocess.run([shutil.which("alnair-run"), "no-such-command-xyz"], capture_output=True, text=True)
    assert result.returncode == 127
    assert result.stderr.splitlines()[-1] == "alnair-run: cannot run no-such-command-xyz: No such file or directory"


def test_import_line_hooks_torch_imported_before_or_after():
    for order in ("import alnair.auto, torch", "import torch, alnair.auto"):
        code = (
            f"{order}\nfrom torch.utils.data.dataloader import _BaseDataLoaderIter as I\nprint(hasattr(I.__next__, "
            "'alnair_original'))"
        )
        assert (
            subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True\n"
        )


@pytest.fixture(scope="module")
def installed_python(tmp_path_factory) -> str:
    """`pip install .` (not editable) into a venv that sees this machine's torch, pip and setuptools."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    if sys.prefix != sys.base_prefix:  # run from a venv: --system-site-packages reaches the base, not that venv
        own = subprocess.run(
            [python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
        ).stdout.strip()
        Path(own, "outer-venv.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            str(tracked_tree(tmp_path_factory)),
        ],
        check=True,
        capture_output=True,
        cwd=venv,
    )
    return python


def test_installed_package_ships_the_pth_and_the_switch_works_in_any_python(installed_python, tmp_path):
    env = {**os.environ, "ALNAIR_PYTHON_INTERCEPT": "1"}
    env.pop("LD_PRELOAD", None)
    switch, imported_at_start, hooked = probe(installed_python, env, tmp_path)[:3]
    assert (switch, imported_at_start, hooked) == ("1", "True", "True")


def test_the_switch_works_in_the_editable_install_make_test_makes(tmp_path):
    sites = [Path(d) for d in site.getsitepackages()]
    assert any(any(d.glob("__editable__.alnair_gpu-*.pth")) for d in sites), (
        "make test installs it: pip install -e '.[test]'"
    )
    assert any((d / "alnair_intercept.pth").is_file() for d in sites)
    env = {**os.environ, "ALNAIR_PYTHON_INTERCEPT": "1"}
    env.pop("LD_PRELOAD", None)
    assert probe(sys.executable, env, tmp_path)[:3] == ["1", "True", "True"]


def test_switch_off_imports_nothing(installed_python, tmp_path):
    for value in (None, "0", ""):
        env = {k: v for k, v in os.environ.items() if k != "ALNAIR_PYTHON_INTERCEPT"}
        if value is not None:
            env["ALNAIR_PYTHON_INTERCEPT"] = value
        code = "import sys; print(sorted(m for m in sys.modules if m.startswith('alnair')))"
        out = subprocess.run(
            [installed_python, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
        )
        assert out.stdout == "[]\n", value


def test_installed_package_is_one_namespace_with_the_public_api(installed_python, tmp_path):
    code = (
        "import alnair, alnair.exporter, alnair.collectors.cuda, alnair.cli.top; print(alnair.phase.__name__, "
        "alnair.__file__)"
    )
    out = subprocess.run(
        [installed_python, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    ).stdout.split()
    assert out[0] == "phase" and "site-packages" in out[1]


def test_two_bootstrap_copies_on_the_path_run_once_each_and_then_the_shadowed_sitecustomize(tmp_path):
    """An injected pod's /opt/alnair/python holds a copy of the bootstrap; alnair-run inside it puts its own first."""
    bootstrap = Path(launcher.BOOTSTRAP_DIR) / "sitecustomize.py"
    copy, own = tmp_path / "injected", tmp_path / "site"
    copy.mkdir()
    own.mkdir()
    shutil.copy(bootstrap, copy / "sitecustomize.py")
    (own / "sitecustomize.py").write_text("import sys\nsys.ran_own = getattr(sys, 'ran_own', 0) + 1\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(launcher.BOOTSTRAP_DIR), str(copy), str(own)]),
        "ALNAIR_PYTHON_INTERCEPT": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys.ran_own, 'alnair.intercept.activation' in sys.modules)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stdout.split(), out.stderr) == (0, ["1", "True"], "")
