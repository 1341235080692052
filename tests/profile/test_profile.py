"""`alnair profile` end to end: a PyTorch loop trains on the CPU under alnair-run while the real exporter serves its
record and a real Prometheus scrapes it every second; the job's row is checked against what the test measured,
and every bad input is one line and exit 2."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import requests

from support import Exporter, end_all, free_port, require_binary, wait_until

# Some 12 s, paced by a sleep in each step so a loaded machine stretches it little: enough scrapes inside the job
# for every column's min, mean and max.
STEPS, BATCH = 2000, 16
PROFILE = [sys.executable, "-m", "alnair.cli.main", "profile"]
TRAINING = """
import sys, time, torch
from torch.utils.data import DataLoader, TensorDataset
steps, batch = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(3)
data = TensorDataset(torch.randn(steps * batch, 32), torch.randn(steps * batch, 1))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
began = time.monotonic()
for x, y in DataLoader(data, batch_size=batch):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    time.sleep(0.005)
print(f"{steps} steps of {batch} in {time.monotonic() - began:.1f} s", flush=True)
"""


def query(url: str, promql: str) -> list[dict]:
    try:
        answer = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    except requests.ConnectionError:
        return []  # still starting
    return answer.json()["data"]["result"] if answer.ok else []


def start_prometheus(directory, target: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: alnair\n    static_configs:\n      - targets: ['{target}']\n"
    )
    with open(directory / "prometheus.log", "w") as log:
        proc = subprocess.Popen(
            [
                require_binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=log,
        )
    return proc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """One job recorded: (Prometheus URL, exporter URL, the job's pid, its wall time, the range around it)."""
    directory = tmp_path_factory.mktemp("profile")
    shm = directory / "shm"
    shm.mkdir()
    exporter = Exporter(
        [f"--shm.dir={shm}", "--collector.python.interval=200ms", "--node.name=e2e-node"], directory / "exporter.log"
    )
    prometheus, url = start_prometheus(directory, f"127.0.0.1:{exporter.port}")
    try:
        wait_until(lambda: query(url, 'up{job="alnair"} == 1'), timeout=60)
        began = time.time()
        job = subprocess.Popen(
            [require_binary("alnair-run"), sys.executable, "-c", TRAINING, str(STEPS), str(BATCH)],
            env={**os.environ, "ALNAIR_SHM_DIR": str(shm)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The job's wall time ends with its last step (the line it prints then), not with the interpreter's
        # teardown after its final publish, which takes 0.7 s or more on a loaded machine.
        assert " steps of " in job.stdout.readline()
        ended = time.time()
        _, errors = job.communicate(timeout=120)
        assert job.returncode == 0, errors
        pid = _pid_of(url)
        wait_until(lambda: query(url, f'alnair_python_process_exited_timestamp_seconds{{pid="{pid}"}}'), timeout=30)
        yield url, exporter.url, pid, ended - began, (began - 60, ended + 5)
    finally:
        end_all([prometheus, exporter.proc])


def _pid_of(url: str) -> str:
    """The one training process Prometheus saw (the launcher execs it: same pid)."""
    found = wait_until(lambda: query(url, "alnair_python_steps_total"), timeout=30)
    return found[0]["metric"]["pid"]


def profile(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PROFILE, *args], capture_output=True, text=True, timeout=120)


def window(recorded) -> list[str]:
    start, end = recorded[4]
    return ["--start", f"{start:.3f}", "--end", f"{end:.3f}"]


def test_the_jobs_row_holds_its_duration_steps_and_node(recorded):
    url, _, pid, wall, _ = recorded
    result = profile("--prometheus", url, *window(recorded))
    assert result.returncode == 0, result.stderr
    [row] = list(csv.DictReader(io.StringIO(result.stdout)))
    assert row["job"] == f"{pid}@{row['instance']}" and row["pid"] == pid
    assert row["duration_source"] == "record"
    assert abs(float(row["duration_seconds"]) - wall) <= 0.1 * wall, (row["duration_seconds"], wall)
    assert (float(row["steps"]), float(row["samples"]), float(row["optimizer_steps"])) == (STEPS, STEPS * BATCH, STEPS)
    # comm is the name the job's interpreter was started by (python or python3, as the suite itself was), at most 15
    # bytes
    comm = Path(sys.executable).name[:15]
    assert (row["node"], row["namespace"], row["comm"], row["gpu_count"]) == ("e2e-node", "<none>", comm, "0")
    assert row["exporter_version"] and int(row["node_cpus"]) == os.cpu_count()
    training = float(row["duration_seconds"]) - float(row["time_to_first_step_seconds"])
    # one a second at least while it trained (its record begins with torch)
    assert int(row["scrapes"]) >= 0.8 * training
    assert (
        0
        <= float(row["cpu_util_ratio_min"])
        <= float(row["cpu_util_ratio_mean"])
        <= float(row["cpu_util_ratio_max"])
        <= 1 + 1e-9
    )
    assert 0 < float(row["sys_memory_util_ratio_min"]) <= float(row["sys_memory_util_ratio_max"]) < 1
    assert 0 < float(row["step_seconds_p50"]) <= float(row["step_seconds_p95"])
    assert 0 <= float(row["data_stall_ratio"]) < 1
    seconds_in_steps = STEPS * BATCH / float(row["samples_per_second"])
    assert seconds_in_steps < float(row["duration_seconds"])
    assert "[38/38] alnair_nvml_energy_joules_total: 0 series" in result.stderr  # progress, one line per query


def test_parquet_holds_the_same_row_with_types(recorded, tmp_path):
    url, _, pid, _, _ = recorded
    out = tmp_path / "jobs.parquet"
    result = profile("--prometheus", url, *window(recorded), "--pid", pid, "-o", str(out), "-q")
    assert (result.returncode, result.stderr) == (0, "")
    [row] = pq.read_table(out).to_pylist()
    assert row["steps"] == STEPS and row["node_cpus"] == os.cpu_count() and row["gpu_model"] is None
    assert isinstance(row["duration_seconds"], float) and row["duration_source"] == "record"


def test_selectors_choose_the_job(recorded):
    url, _, pid, _, _ = recorded
    for chosen in (["--pid", pid], ["--namespace", "<none>"], ["--selector", '{job="alnair"}']):
        result = profile("--prometheus", url, *window(recorded), "-q", *chosen)
        assert result.returncode == 0, result.stderr
        assert [r["pid"] for r in csv.DictReader(io.StringIO(result.stdout))] == [pid], chosen


@pytest.mark.parametrize(
    "case, message",
    [
        ("no scheme", "--prometheus: not an http:// or https:// URL: 'localhost:9090'"),
        ("not prometheus", "is not a Prometheus: HTTP 404 for /api/v1/status/buildinfo"),
        ("reversed range", "empty range: the start ("),
        ("range without data", "no Alnair job in the range 2001-09-09T01:46:40Z to 2001-09-09T01:56:40Z (empty range)"),
        ("no match", 'no job matches {namespace="nowhere"} from '),
    ],
)
def test_bad_input_is_one_line_and_exit_2(recorded, case, message):
    url, exporter_url, _, _, (start, end) = recorded
    args = {
        "no scheme": ["--prometheus", "localhost:9090"],
        "not prometheus": ["--prometheus", exporter_url],
        "reversed range": ["--prometheus", url, "--start", f"{end}", "--end", f"{start}"],
        "range without data": ["--prometheus", url, "--start", "1000000000", "--end", "1000000600"],
        "no match": ["--prometheus", url, "--start", f"{start}", "--end", f"{end}", "--namespace", "nowhere"],
    }[case]
    result = profile(*args)
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith("alnair profile: error: ") and message in line, line
    assert result.stdout == ""
