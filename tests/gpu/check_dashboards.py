"""On a GPU machine: the dashboards' nvml, cuda and training panels return data from a real Prometheus that
scrapes the exporter on the real GPU while PyTorch jobs train under both intercepts.

    python3 tests/gpu/check_dashboards.py --prometheus PATH [--seconds 45]

Two jobs train for the whole check (alnair.intercept.launcher: the C intercept preloaded, the Python one
imported): one with ALNAIR_MEMORY_LIMIT=8Gi and ALNAIR_COMPUTE_LIMIT=50, one with no limit, so the sharing
panels have limits, quotas and throttled time to show. The exporter runs every collector but cache (no
Redis here); Prometheus scrapes it every second with the recording rules loaded. Then every panel of the
node-gpus, gpu-sharing, training and exporter-health dashboards runs as an instant query, variables at
All, `$__rate_interval` 15s, and prints its series count and first value. A panel is expected to return
data unless EXPECTED_EMPTY names it with the reason; exits 1 if any other panel returns nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from check_python_and_cuda_records import free_port, scrape, shim, wait_for  # noqa: E402

DASHBOARDS = ("node-gpus", "gpu-sharing", "training", "exporter-health")
EXPECTED_EMPTY = {  # panel title -> why a healthy GPU and these jobs give it nothing
    "XID errors by code": "a series per XID code seen; a healthy GPU reports none (the per-GPU total is at 0)",
    "Retired pages and remapped rows": "only if the H200 answers neither query (it remaps rows, it does not retire "
    "pages)",
    "Segments skipped": "nothing malformed in the directory",
    "Identity claims ignored": "no writer claims another pod",
    "Scrapes rejected": "the one scraper is never refused",
    "Segments reclaimed": "no writer died",
    "Collectors refused": "no collector clashes",
}
TRAINING = """
import sys, threading, time
import torch
import alnair
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
device = sys.argv[1]
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
seen = alnair.counter("rows_seen")
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(65536, 4096)), batch_size=256)
print("ready", flush=True)
while not stop.is_set():
    for (x,) in data:
        with alnair.phase("forward"):
            loss = model(x.to(device, non_blocking=True)).square().mean()
        seen.inc(len(x))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if stop.is_set():
            break
    torch.cuda.synchronize() if device == "cuda" else None
"""


def instant(prometheus: str, promql: str) -> list[dict]:
    query = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=30) as response:
        body = json.load(response)
    if body["status"] != "success":
        raise RuntimeError(f"{promql}: {body.get('error')}")
    return body["data"]["result"]


def panel_queries() -> list[tuple[str, str, list[str]]]:
    out = []
    for name in DASHBOARDS:
        dashboard = json.loads((REPO / "dashboards" / "json" / f"{name}.json").read_text())
        for panel in [p for top in dashboard["panels"] for p in (top, *top.get("panels", []))]:
            exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
            if exprs:
                out.append((name, panel["title"], [grafana(e) for e in exprs]))
    return out


def grafana(expr: str) -> str:
    expr = expr.replace("$__rate_interval", "15s").replace("$__interval", "1s").replace("$__range", "1m")
    return re.sub(r"\$\{?(\w+)(?::\w+)?\}?", ".*", expr)


def start_prometheus(binary: str, work: Path, target: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    rules = REPO / "dashboards" / "rules" / "recording.yaml"
    (work / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files: ['{rules}']\n"
        f"scrape_configs:\n  - job_name: alnair\n    static_configs:\n      - targets: ['{target}']\n"
    )
    log = open(work / "prometheus.log", "w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )
    return proc, f"http://127.0.0.1:{port}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prometheus", required=True, help="Debian's prometheus binary")
    parser.add_argument("--seconds", type=float, default=45, help="how long Prometheus scrapes before the queries")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the plumbing on a machine without a GPU")
    args = parser.parse_args()
    subprocess.run(["make", "-s", "-C", str(REPO / "intercept")], check=True)
    work = Path(tempfile.mkdtemp(prefix="alnair-dashboards-"))
    shm_dir = work / "shm"
    shm_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(shim(work / "site")), "ALNAIR_SHM_DIR": str(shm_dir)}
    port = free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alnair.exporter",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--shm.dir={shm_dir}",
                "--node.name=h200",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(work / "exporter.log", "w"),
        )
    ]
    jobs = []
    try:
        for limits in ({"ALNAIR_MEMORY_LIMIT": "8Gi", "ALNAIR_COMPUTE_LIMIT": "50"}, {}):
            jobs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "alnair.intercept.launcher", sys.executable, "-c", TRAINING, args.device],
                    env={**env, **limits},
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for job in jobs:
            assert job.stdout.readline().startswith("ready"), "a training job did not start"
        prometheus, url = start_prometheus(args.prometheus, work, f"127.0.0.1:{port}")
        procs.append(prometheus)
        wait_for(
            lambda: "alnair_cuda_kernel_launches_total" in scrape(f"http://127.0.0.1:{port}/metrics"), 60, "cuda series"
        )
        wait_for(lambda: _ready(url), 60, "Prometheus")
        time.sleep(args.seconds)  # the data the panels' 15 s rate windows need: wall time, not a speed assumption
        return report(url)
    finally:
        for job in jobs:
            job.stdin.close()
            job.wait(60)
        for proc in reversed(procs):
            proc.terminate()
            proc.wait(30)
        print(f"logs in {work}")


def _ready(url: str) -> bool:
    try:
        return bool(instant(url, 'up{job="alnair"} == 1'))
    except OSError:
        return False


def report(url: str) -> int:
    missing = []
    for dashboard, title, exprs in panel_queries():
        results = [instant(url, e) for e in exprs]
        count = sum(len(r) for r in results)
        first = next((r[0] for r in results if r), None)
        shown = f"{first['metric']} = {first['value'][1]}" if first else "-"
        status = (
            "ok"
            if count
            else ("empty (expected: " + EXPECTED_EMPTY[title] + ")" if title in EXPECTED_EMPTY else "EMPTY")
        )
        print(f"{dashboard:16} {title[:44]:44} {count:>4} series  {status}  {shown[:140]}")
        if not count and title not in EXPECTED_EMPTY:
            missing.append(f"{dashboard}/{title}")
    print("every panel returned data" if not missing else f"FAIL: no data in {missing}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
