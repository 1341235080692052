"""The profile of a PyTorch training job: under alnair-run --profile, and with ALNAIR_PROFILE in the environment as
in a pod (the job's first Python forks its watcher), values checked against the program's own account; its
DataLoader workers and a Python it starts are sections of the same file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from alnair.intercept.launcher import BOOTSTRAP_DIR
from support import python_records, read_line, wait_until
from timed_loop import timed_epochs

try:
    import torch  # noqa: F401  only to fail clearly: the programs import it themselves
except ImportError:
    pytest.fail("torch is not installed: pip install torch==2.13.0 (the test extra has it)", pytrace=False)

LOADER_DELAY = 0.020  # seconds each batch takes to make, in the workers
BODY_TIME = 0.010  # seconds of each training step after its batch came
ITEMS, BATCH, EPOCHS, WORKERS = 42, 4, 2, 2  # 11 batches per epoch
STEPS = EPOCHS * -(-ITEMS // BATCH)

LOOP = textwrap.indent(
    timed_epochs(
        f"DataLoader(Items(), batch_size={BATCH}, collate_fn=slow_collate, num_workers={WORKERS})", EPOCHS, BODY_TIME
    ),
    "    ",
)
TRAINING = textwrap.dedent(f"""
    import subprocess, sys, time
    import alnair, torch
    from torch.utils.data import DataLoader, Dataset

    class Items(Dataset):
        def __len__(self):
            return {ITEMS}
        def __getitem__(self, i):
            with alnair.phase("load"):  # in a DataLoader worker: a process of the job with a record of its own
                return torch.randn(8), torch.randn(1)

    def slow_collate(items):
        time.sleep({LOADER_DELAY})
        return torch.utils.data.default_collate(items)

{LOOP}
    child = "import alnair, time; alnair.counter('child').inc(7); time.sleep(0.3)"
    subprocess.run([sys.executable, "-c", child], check=True)
    print("ready", waited, stepped, flush=True)
    sys.stdin.read()
""")


def intercepted(**env: str) -> dict[str, str]:
    return {**os.environ, "ALNAIR_PYTHON_INTERCEPT": "1", **env}


def check_training(profile: dict, waited: float, stepped: float) -> dict:
    """The training totals and the processes against the program's account; returns the training process."""
    training = profile["training"]
    assert {k: training[k] for k in ("steps", "samples", "epochs", "optimizer_steps")} == {
        "steps": STEPS,
        "samples": EPOCHS * ITEMS,
        "epochs": EPOCHS,
        "optimizer_steps": STEPS,
    }
    assert abs(training["data_stall_fraction"] - waited / stepped) <= 0.05
    assert training["samples_per_second"] == pytest.approx(EPOCHS * ITEMS / stepped, rel=0.1)
    main, *workers, child = profile["processes"]
    assert main["python"]["steps"] == STEPS and not main["python"]["dataloader_worker"]
    assert len(workers) == EPOCHS * WORKERS and all(w["python"]["dataloader_worker"] for w in workers)
    # each worker's final record, published as it exited and then removed: every item loaded once
    assert sum(w["python"]["phases"]["load"]["count"] for w in workers) == EPOCHS * ITEMS
    assert child["python"]["counters"] == {"child": 7}
    assert not any(p["running"] for p in profile["processes"])
    return main


def test_alnair_run_profiles_a_training_job_with_its_workers_and_children(tmp_path):
    path = tmp_path / "profile.json"
    alnair_run = shutil.which("alnair-run") or pytest.fail("alnair-run is not installed: pip install -e '.[test]'")
    result = subprocess.run(
        [alnair_run, "--profile", str(path), sys.executable, "-c", TRAINING],
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ALNAIR_SHM_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    waited, stepped = (float(v) for v in result.stdout.split()[1:])
    profile = json.loads(path.read_text())
    check_training(profile, waited, stepped)
    assert profile["exit"] == {"code": 0} and profile["devices"] == []
    training = profile["training"]
    assert result.stderr.splitlines()[-1] == (
        f"  training: {STEPS} steps, {EPOCHS * ITEMS} samples, "
        f"{training['samples_per_second']:,.1f} samples/s, "
        f"data stall {training['data_stall_fraction']:.1%}"
    )


def test_the_environment_variable_profiles_a_sigtermed_job_from_its_first_python(tmp_path):
    """As in a pod: the first Python forks; its parent keeps the pid the runtime signals and writes the profile."""
    shm_dir = tmp_path / "shm"
    shm_dir.mkdir()
    env = intercepted(ALNAIR_PROFILE=str(tmp_path / "profile-%p.json"), ALNAIR_SHM_DIR=str(shm_dir))
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAINING],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        waited, stepped = (float(v) for v in read_line(proc.stdout, 120).split()[1:])
        trained = wait_until(lambda: [pid for pid, r in python_records(shm_dir).items() if r.epochs == EPOCHS])
        proc.send_signal(signal.SIGTERM)  # the program ends by it (no exit hooks): its last 100 ms publish counts
        assert proc.wait(30) == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert [p.name for p in tmp_path.glob("profile-*")] == [f"profile-{proc.pid}.json"]  # one file for the job
    profile = json.loads((tmp_path / f"profile-{proc.pid}.json").read_text())
    assert profile["exit"] == {"signal": signal.SIGTERM, "name": "SIGTERM"}
    assert profile["command"] == [sys.executable, "-c", TRAINING]
    main = check_training(profile, waited, stepped)
    assert [main["pid"]] == trained and main["pid"] != proc.pid


@pytest.mark.parametrize("hooks", ["pth", "pth and sitecustomize"])
def test_an_unwritable_path_in_the_environment_is_one_line_and_the_program_keeps_its_status(tmp_path, hooks):
    """Also where both start hooks run, as under alnair-run (its sitecustomize first on PYTHONPATH)."""
    value = str(tmp_path / 'missing/"x"\tprofile.json')
    bootstrap = {"PYTHONPATH": str(BOOTSTRAP_DIR)} if hooks != "pth" else {}
    result = subprocess.run(
        [sys.executable, "-c", "import sys; print('job'); sys.exit(5)"],
        check=False,
        capture_output=True,
        text=True,
        env=intercepted(ALNAIR_PROFILE=value, **bootstrap),
    )
    assert (result.returncode, result.stdout) == (5, "job\n")
    shown = value.replace('"', "\\x22").replace("\t", "\\x09")
    reason = "cannot write there (No such file or directory); writing no profile"
    assert result.stderr.splitlines() == [f'alnair: ignoring ALNAIR_PROFILE="{shown}": {reason}']


def test_without_the_variable_the_program_is_not_forked():
    result = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getppid())"],
        check=False,
        capture_output=True,
        text=True,
        env=intercepted(ALNAIR_PROFILE=""),
    )
    assert (result.stdout, result.stderr) == (f"{os.getpid()}\n", "")
