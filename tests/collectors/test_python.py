"""The python collector exports a Python writer's record per pid, named so the data stall is one division."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import textwrap
import time

import psutil
import pytest
import requests

from alnair.collectors.python import PythonCollector
from alnair.exporter.plugin import render
from support import PythonProgram, parse_samples, wait_until

PROGRAM = textwrap.dedent("""
    import sys
    import alnair
    from alnair.intercept.this_process import RECORDER
    # A DataLoader pass logged as torch_hooks logs it, with times chosen: 10 steps of 4 samples,
    # each asked for at i x 100 ms and arriving 25 ms later; the next ask, at 975 ms, finds the iterator run out at 1 s.
    import time
    t0 = time.monotonic_ns()
    class Iterator:
        pass
    iterator = Iterator()
    iterator._alnair_pass = loader_pass = RECORDER.pass_started(iterator, 4, 10, 0)
    loader_pass.times.extend(t0 + t for i in range(10) for t in (i * 100_000_000, i * 100_000_000 + 25_000_000))
    loader_pass.times.append(t0 + 975_000_000)
    loader_pass.ended_at = t0 + 1_000_000_000
    RECORDER.optimizer_stepped()
    alnair.counter('tokens "in"').inc(512)
    with alnair.phase("preprocess"):
        pass
    alnair.counter("elapsed_ns").inc(time.monotonic_ns() - t0)  # the most the phase can have taken
    print("ready", flush=True)
    sys.stdin.read()
""")


def sample(shm_dir) -> dict[str, float]:
    collector = PythonCollector(argparse.Namespace(shm_dir=str(shm_dir), procfs="/proc"))
    return parse_samples(render(collector.collect()).decode())


def test_training_counters_custom_counters_and_phases_are_exported_per_pid(shm_dir):
    p = PythonProgram(PROGRAM, shm_dir, env={"ALNAIR_POD_UID": "pod-9"})  # a host process: the claim is ignored
    s = wait_until(lambda: (s := sample(shm_dir)).get(f'alnair_python_epochs_total{{pid="{p.pid}"}}') == 1 and s)
    pid = f'{{pid="{p.pid}"}}'
    assert s[f"alnair_python_steps_total{pid}"] == 10
    assert s[f"alnair_python_samples_total{pid}"] == 40
    assert s[f"alnair_python_optimizer_steps_total{pid}"] == 1
    assert s[f"alnair_python_data_wait_seconds_total{pid}"] == 0.275
    assert s[f"alnair_python_step_seconds_total{pid}"] == 1.0
    assert s[f"alnair_python_dataloader_worker{pid}"] == 0
    assert s[f'alnair_python_custom_total{{name="tokens \\"in\\"",pid="{p.pid}"}}'] == 512
    assert s[f'alnair_python_phase_completions_total{{name="preprocess",pid="{p.pid}"}}'] == 1
    elapsed = s[f'alnair_python_custom_total{{name="elapsed_ns",pid="{p.pid}"}}'] / 1e9
    assert 0 <= s[f'alnair_python_phase_seconds_total{{name="preprocess",pid="{p.pid}"}}'] <= elapsed
    lived = time.time() - psutil.Process(p.pid).create_time()
    assert 0.025 <= s[f"alnair_python_time_to_first_step_seconds{pid}"] <= lived  # its first batch came 25 ms after t0
    info = [k for k in s if k.startswith("alnair_python_process_info")]
    assert len(info) == 1 and 'pod_uid="<none>"' in info[0] and f'pid="{p.pid}"' in info[0]
    assert s["alnair_python_identity_claims_ignored_total"] == 1
    assert s["alnair_python_segments"] == 1
    p.finish()
    assert sample(shm_dir)["alnair_python_segments"] == 0


def test_killed_writer_is_reclaimed_and_its_series_disappear(shm_dir):
    p = PythonProgram(PROGRAM, shm_dir)
    wait_until(lambda: f'alnair_python_steps_total{{pid="{p.pid}"}}' in sample(shm_dir))
    p.proc.kill()
    p.proc.wait()
    s = sample(shm_dir)
    assert s["alnair_python_segments_reclaimed_total"] == 1
    assert not any(f'pid="{p.pid}"' in key for key in s)


def test_exporter_serves_python_metrics_that_promtool_accepts(shm_dir, start_exporter):
    p = PythonProgram(PROGRAM, shm_dir)
    exporter = start_exporter(f"--shm.dir={shm_dir}", "--collector.python.interval=0.2")
    body = wait_until(
        lambda: (t := requests.get(exporter.url + "/metrics").text) and "alnair_python_phase_seconds_total{" in t and t
    )
    assert 'alnair_exporter_collector_success{collector="python"} 1.0' in body
    promtool = shutil.which("promtool") or pytest.fail(
        "promtool is not installed: .ci/run installs it (apt-get install prometheus)"
    )
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
    p.finish()
