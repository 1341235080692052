"""What a campaign's rows were measured with: the GPU, its driver, CUDA, torch, Python and Alnair's version and
git commit."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from alnair.commandline import DISTRIBUTION

REPO = Path(__file__).resolve().parents[1]  # through the shim's symlinks to the checkout


def versions(device: str) -> dict:
    """What the rows were measured with: GPU, driver, CUDA, torch, Python, Alnair (commit where known)."""
    out = {
        "python_version": platform.python_version(),
        "hostname": socket.gethostname(),
        "package_version": _alnair_version(),
        "git_commit": os.environ.get("ALNAIR_GIT_COMMIT") or _git_commit(),
    }
    probe = "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda]))"
    try:
        answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        out["torch_version"], out["cuda_version"] = json.loads(answer.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        out["torch_version"] = out["cuda_version"] = None
    out["gpu_name"] = out["nvidia_driver"] = None
    if device == "cuda" and shutil.which("nvidia-smi"):
        answer = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if answer.returncode == 0 and answer.stdout.strip():
            name, _, driver = answer.stdout.strip().splitlines()[0].partition(",")
            out["gpu_name"], out["nvidia_driver"] = name.strip(), driver.strip()
    return out


def gpu_uuids(device: str) -> tuple[str, ...]:
    """The machine's GPUs as nvidia-smi names them (the rows' gpu_uuids use the same names); none on the CPU."""
    if device != "cuda" or not shutil.which("nvidia-smi"):
        return ()
    answer = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
    )
    return tuple(line.strip() for line in answer.stdout.splitlines() if line.strip()) if answer.returncode == 0 else ()


def _alnair_version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        found = (
            re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
            if (REPO / "pyproject.toml").exists()
            else None
        )
        return found.group(1) if found else "unknown"


def _git_commit() -> str | None:
    try:
        answer = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except OSError:
        return None
    return answer.stdout.strip() if answer.returncode == 0 else None
