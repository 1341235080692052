"""A real Prometheus scrapes the exporter; promtool lints what it serves."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import requests

from support import free_port, wait_until


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is not installed: .ci/run installs it (apt-get install prometheus)")
    return path


@pytest.fixture
def prometheus(tmp_path):
    """Starts Debian's prometheus scraping the given target every `interval` (a second by default)."""
    procs = []

    def start(target: str, interval: str = "1s") -> str:
        port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            f"global:\n  scrape_interval: {interval}\n  scrape_timeout: 1s\n"
            f"scrape_configs:\n  - job_name: alnair\n    static_configs:\n      - targets: ['{target}']\n"
        )
        log = open(tmp_path / "prometheus.log", "w")
        procs.append(
            subprocess.Popen(
                [
                    require("prometheus"),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdout=log,
                stderr=log,
            )
        )
        return f"http://127.0.0.1:{port}"

    yield start
    for p in procs:
        p.terminate()
        p.wait(30)


def query(prometheus_url: str, promql: str) -> list[dict]:
    try:
        response = requests.get(f"{prometheus_url}/api/v1/query", params={"query": promql}, timeout=5)
    except requests.ConnectionError:
        return []  # still starting
    return response.json()["data"]["result"] if response.ok else []


def test_prometheus_scrapes_exporter_and_cuda_segment_metrics(start_writer, start_exporter, prometheus, shm_dir):
    writer = start_writer("--devices", "2", "--set", "kernel_launches=4242", "--set", "bytes_in_use=123456789")
    exporter = start_exporter(f"--shm.dir={shm_dir}", "--collector.cuda.interval=0.2", "--node.name=e2e-node")
    prom = prometheus(f"127.0.0.1:{exporter.port}")

    launches = wait_until(
        lambda: query(prom, f'alnair_cuda_kernel_launches_total{{pid="{writer.pid}",gpu="1"}}'), timeout=60
    )
    assert float(launches[0]["value"][1]) == 4243
    memory = query(prom, f'alnair_cuda_memory_used_bytes{{pid="{writer.pid}",gpu="0"}}')
    assert float(memory[0]["value"][1]) == 123456789
    success = query(prom, 'alnair_exporter_collector_success{collector="cuda"}')
    assert float(success[0]["value"][1]) == 1
    node = query(prom, "alnair_node_info")
    assert node[0]["metric"]["node"] == "e2e-node"
    assert float(query(prom, 'up{job="alnair"}')[0]["value"][1]) == 1


def test_promtool_check_metrics_is_clean(start_writer, start_exporter, shm_dir):
    start_writer("--devices", "2", "--set", "memory_limit_bytes=1024", "--compute-limit", "50")
    exporter = start_exporter(f"--shm.dir={shm_dir}", "--collector.cuda.interval=0.2")

    def full_body() -> str | None:
        text = requests.get(exporter.url + "/metrics").text
        return text if "alnair_cuda_compute_limit_ratio{" in text and "alnair_host_cpu" in text else None

    body = wait_until(full_body)
    result = subprocess.run([require("promtool"), "check", "metrics"], input=body, capture_output=True, text=True)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")
