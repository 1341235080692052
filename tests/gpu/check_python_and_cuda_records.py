"""End-to-end check on a GPU machine: a PyTorch GPU training run under alnair-run publishes both a
cuda and a python record for the same pid, and the exporter serves both.

    python3 tests/gpu/check_python_and_cuda_records.py [--steps 200] [--keep] [--cpu]

--cpu trains on the CPU and checks only the python side: a dry run of the plumbing
on a machine without a GPU.

Needs python3 with torch (CUDA), prometheus_client and psutil, gcc and make; the
package need not be installed: the script builds the C intercept (make -C intercept),
lays out an `alnair` package of symlinks to this checkout, with the collectors'
entry points, in a temporary directory and puts it on PYTHONPATH. Exits 0 when every
check passes, 1 otherwise, after a short report.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Installed, the package maps these folders into the alnair namespace (pyproject.toml's package-dir).
LOADER_DELAY = 0.020  # seconds each batch waits in collate: a known data stall, large beside collating itself

TRAINING = f"""
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

def slow_collate(items):
    time.sleep({LOADER_DELAY})
    return torch.utils.data.default_collate(items)

steps = int(sys.argv[1])
device = torch.device(sys.argv[2])
data = TensorDataset(torch.randn(steps * 32, 3, 32, 32), torch.randint(0, 10, (steps * 32,)))
model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(32, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in DataLoader(data, batch_size=32, collate_fn=slow_collate, pin_memory=device.type == "cuda"):
    loss = torch.nn.functional.cross_entropy(model(x.to(device, non_blocking=True)), y.to(device))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
torch.cuda.synchronize() if device.type == "cuda" else None
print("ready", flush=True)
sys.stdin.read()
"""

STUB = '''"""Stand-in for {name}, missing on this machine: the GPU check serves /metrics without a web config file."""
def __getattr__(attribute):
    raise ImportError("{name} is not installed here")
'''


def shim(directory: Path) -> Path:
    """An importable `alnair` package of symlinks, plus entry points so the exporter finds its collectors."""
    package = directory / "alnair"
    package.mkdir(parents=True)
    for module in (REPO / "sdk").glob("*.py"):
        (package / module.name).symlink_to(module)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    for name, folder in top_level_folders(pyproject).items():
        (package / name).symlink_to(REPO / folder)
    info = directory / f"alnair_gpu-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    entries = project["entry-points"]["alnair.collectors"]
    (info / "entry_points.txt").write_text(
        "[alnair.collectors]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
    )
    for module in ("yaml", "bcrypt"):  # the web config's; absent on some GPU images
        if importlib.util.find_spec(module) is None:
            (directory / f"{module}.py").write_text(STUB.format(name=module))
    return directory


def top_level_folders(pyproject: dict) -> dict[str, str]:
    """alnair's subpackages that are folders of their own, as pyproject.toml maps them (alnair.webserver: webserver),
    so a part added there is in the shim too."""
    mapping = pyproject["tool"]["setuptools"]["package-dir"]
    return {package.split(".")[1]: folder for package, folder in mapping.items() if package.count(".") == 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return ""


def sample(text: str, metric: str, pid: int) -> float | None:
    """The sample of `metric` whose labels include pid (summed over devices)."""
    values = [
        float(m.group(2))
        for m in re.finditer(rf"^{metric}\{{([^}}]*)\}} (\S+)$", text, re.M)
        if f'pid="{pid}"' in m.group(1)
    ]
    return sum(values) if values else None


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise TimeoutError(what)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="leave the temporary directory (shim, segments, logs)")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU and check the python side only")
    args = parser.parse_args()

    subprocess.run(["make", "-s", "-C", str(REPO / "intercept")], check=True)
    work = Path(tempfile.mkdtemp(prefix="alnair-gpu-check-"))
    shm_dir = work / "shm"
    shm_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(shim(work / "site")), "ALNAIR_SHM_DIR": str(shm_dir)}
    env.pop("ALNAIR_PYTHON_INTERCEPT", None)
    port = free_port()
    exporter_log = open(work / "exporter.log", "w")
    exporter = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alnair.exporter",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--shm.dir={shm_dir}",
            "--collector.cuda.interval=0.5",
            "--collector.python.interval=0.5",
        ],
        env=env,
        stdout=exporter_log,
        stderr=subprocess.STDOUT,
    )
    launch = [
        sys.executable,
        "-m",
        "alnair.intercept.launcher",
        sys.executable,
        "-c",
        TRAINING,
        str(args.steps),
        "cpu" if args.cpu else "cuda",
    ]
    training = subprocess.Popen(
        launch, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    checks: list[tuple[str, bool]] = []
    try:
        started = time.monotonic()
        ready = training.stdout.readline()
        if not ready.startswith("ready"):
            print(f"training did not finish: {ready!r}\n{training.stderr.read()}")
            return 1
        print(f"trained {args.steps} steps in {time.monotonic() - started:.1f} s (pid {training.pid})")
        pid, url = training.pid, f"http://127.0.0.1:{port}/metrics"

        def both_served() -> str | None:
            text = scrape(url)
            steps = sample(text, "alnair_python_steps_total", pid)
            launches = sample(text, "alnair_cuda_kernel_launches_total", pid)
            return text if steps == args.steps and (launches or args.cpu) else None

        try:
            text = wait_for(both_served, 30, "the exporter did not serve both records for the training pid")
        except TimeoutError as e:
            text = scrape(url)
            print(f"FAIL: {e}\n--- alnair_* samples for pid {pid}:")
            print("\n".join(line for line in text.splitlines() if f'pid="{pid}"' in line) or "(none)")
            print(
                f"--- segments: {sorted(p.name for p in shm_dir.iterdir())}\n--- training "
                f"stderr:\n{training.stderr.read() if training.poll() is not None else ''}"
            )
            return 1
        wait, step = (
            sample(text, "alnair_python_data_wait_seconds_total", pid),
            sample(text, "alnair_python_step_seconds_total", pid),
        )
        injected = args.steps * LOADER_DELAY
        kinds = ("python",) if args.cpu else ("cuda", "python")
        checks = [
            (
                f"{' and '.join(kinds)} segments for the same pid",
                all(
                    any(f".{pid}." in p.name and p.name.startswith(f"alnair.{kind}.") for p in shm_dir.iterdir())
                    for kind in kinds
                ),
            ),
            ("alnair_python_steps_total == steps", sample(text, "alnair_python_steps_total", pid) == args.steps),
            (
                "alnair_python_samples_total == 32 * steps",
                sample(text, "alnair_python_samples_total", pid) == 32 * args.steps,
            ),
            (
                "alnair_python_optimizer_steps_total == steps",
                sample(text, "alnair_python_optimizer_steps_total", pid) == args.steps,
            ),
            ("data wait within 10% of the injected delay", abs(wait - injected) <= 0.1 * injected),
            (
                f"process_info series of {' and '.join(kinds)} carry the pid",
                all(sample(text, f"alnair_{k}_process_info", pid) == 1 for k in kinds),
            ),
        ]
        if not args.cpu:
            launches, memory = (
                sample(text, "alnair_cuda_kernel_launches_total", pid),
                sample(text, "alnair_cuda_memory_used_bytes", pid) or 0,
            )
            checks += [
                ("alnair_cuda_kernel_launches_total >= 3 per step", launches >= 3 * args.steps),
                ("alnair_cuda_memory_used_bytes > 0", memory > 0),
            ]
            print(f"pid {pid}: kernel launches {launches:.0f}, GPU memory {memory / 2**20:.1f} MiB")
        print(
            f"pid {pid}: steps {sample(text, 'alnair_python_steps_total', pid):.0f}, data wait {wait:.3f} s of "
            f"{step:.3f} s in steps (stall {100 * wait / step:.1f}%, injected {injected:.3f} s), first step after "
            f"{sample(text, 'alnair_python_time_to_first_step_seconds', pid):.2f} s"
        )
        top = subprocess.run(
            [sys.executable, "-m", "alnair.cli.main", "top", f"--shm.dir={shm_dir}", "--interval=0.5"],
            env=env,
            capture_output=True,
            text=True,
        )
        print("alnair top (piped):\n" + top.stdout + top.stderr)
        rows = {line.split()[0] for line in top.stdout.splitlines()[1:] if line.strip()}
        checks.append(("alnair top lists the training pid", top.returncode == 0 and str(pid) in rows))
        for name, ok in checks:
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
        return 0 if all(ok for _, ok in checks) else 1
    finally:
        if training.poll() is None:
            training.stdin.close()
            training.wait(30)
        exporter.terminate()
        exporter.wait(10)
        exporter_log.close()
        print(f"logs and shim in {work}" if args.keep else "")
        if not args.keep:
            subprocess.run(["rm", "-rf", str(work)])


if __name__ == "__main__":
    sys.exit(main())
