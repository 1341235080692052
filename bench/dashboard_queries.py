"""Every dashboard query over 6 h of a synthetic fleet, timed against a real Prometheus.

    python bench/dashboard_queries.py [--nodes 125] [--gpus-per-node 8] [--processes-per-gpu 2] [--hours 6]
                                      [--repeats 5] [--all-repeats 1] [--json PATH] [--work DIR]

The fleet (bench/fleet.py: by default 1,000 GPUs on 125 nodes, 2 processes per GPU, one sample a minute)
is written as OpenMetrics and turned into TSDB blocks by `promtool tsdb create-blocks-from openmetrics`;
the recording rules (dashboards/rules/recording.yaml) are backfilled over the same 6 h by `promtool tsdb
create-blocks-from rules`, so panels reading recorded series have them. Debian's prometheus then serves
the blocks, and every target of every panel of every dashboard (dashboards/json/*.json) runs as Grafana
would run it for "last 6 hours" on a 1,000-pixel panel: a range query with step 60 s, `$__rate_interval`
4m (four scrape intervals), the template variables resolved in order against Prometheus as Grafana opens
the dashboard (a variable saved at All is its allValue or every option as a regex; one saved at no value
takes the first option: the per-node dashboards open at one node). A panel's time is its targets' run one
after another. Panels run round-robin, `--repeats` times; the figure is each panel's median. Target: every
panel under 2 s median, each with data. Variable queries (label_values) are timed too. Then, as a stress
figure with no target, the same with every variable at All (`--all-repeats` times): the whole fleet at once.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from fleet import ROOT, Fleet, write_openmetrics
from scrape_latency import free_port, machine, wait_until

DASHBOARDS = ROOT / "dashboards" / "json"
RECORDING_RULES = ROOT / "dashboards" / "rules" / "recording.yaml"
STEP_SECONDS = 60
RATE_INTERVAL = "4m"
TARGET_SECONDS = 2.0


def panels(dashboard: dict) -> list[dict]:
    out = []
    for panel in dashboard.get("panels", []):
        out += [panel, *panel.get("panels", [])]
    return [p for p in out if p.get("targets")]


def grafana_to_promql(expr: str, hours: float, values: dict[str, str]) -> str:
    """The query Grafana sends: its own variables at their values for this range, template variables at `values`."""
    expr = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__interval", f"{STEP_SECONDS}s")
    expr = expr.replace("$__range", f"{int(hours * 3600)}s")
    return re.sub(r"\$\{?(\w+)(?::\w+)?\}?", lambda m: values.get(m.group(1), m.group(0)), expr)


def variable_value(variable: dict, options: list[str], everything_all: bool) -> str:
    """As Grafana opens the dashboard: a variable saved at All is its allValue or every option as a regex; one with
    no saved value takes its first option (natural sort)."""
    saved_all = "$__all" in (variable.get("current") or {}).get("value", [])
    if saved_all or everything_all:
        return variable.get("allValue") or "(" + "|".join(map(_promql_regex, options)) + ")"
    return _promql_regex(sorted(options, key=_natural)[0]) if options else ""


def _promql_regex(value: str) -> str:
    """A value as Grafana's Prometheus data source writes it into a regex in a PromQL string: metacharacters
    behind a backslash that is itself escaped for the string."""
    return re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\\\1", value)


def _natural(text: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def dashboards() -> list[tuple[str, dict]]:
    return [(path.stem, json.loads(path.read_text())) for path in sorted(DASHBOARDS.glob("*.json"))]


def queries(
    url: str, hours: float, start: float, end: float, everything_all: bool
) -> list[tuple[str, str, list[tuple[str, bool]]]]:
    """(dashboard, panel title, [(PromQL, instant)]) for every variable and panel, variables resolved in order
    against Prometheus as Grafana resolves them."""
    out = []
    for name, dashboard in dashboards():
        values: dict[str, str] = {}
        for variable in dashboard.get("templating", {}).get("list", []):
            query = variable.get("query")
            query = query.get("query") if isinstance(query, dict) else query
            if variable.get("type") != "query" or not query:
                continue
            promql = grafana_to_promql(query, hours, values)
            out.append((name, f"variable ${variable['name']}", [(promql, False)]))
            values[variable["name"]] = variable_value(variable, label_values(url, promql, start, end), everything_all)
        for panel in panels(dashboard):
            targets = [
                (grafana_to_promql(t["expr"], hours, values), bool(t.get("instant")))
                for t in panel["targets"]
                if t.get("expr")
            ]
            out.append((name, panel.get("title", "?"), targets))
    return out


def label_values(url: str, promql: str, start: float, end: float) -> list[str]:
    match = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", promql.strip())
    params = {"start": start, "end": end, **({"match[]": match.group(1)} if match.group(1) else {})}
    return requests.get(f"{url}/api/v1/label/{match.group(2)}/values", params=params, timeout=120).json()["data"]


def run_query(url: str, promql: str, instant: bool, start: float, end: float) -> tuple[float, int]:
    """Seconds taken and series returned; label_values(...) as Grafana asks for it."""
    began = time.perf_counter()
    match = re.fullmatch(r"label_values\((?:(.+),\s*)?(\w+)\)", promql.strip())
    if match:
        params = {"start": start, "end": end, **({"match[]": match.group(1)} if match.group(1) else {})}
        response = requests.get(f"{url}/api/v1/label/{match.group(2)}/values", params=params, timeout=120)
    elif instant:
        response = requests.get(f"{url}/api/v1/query", params={"query": promql, "time": end}, timeout=120)
    else:
        response = requests.get(
            f"{url}/api/v1/query_range",
            params={"query": promql, "start": start, "end": end, "step": STEP_SECONDS},
            timeout=120,
        )
    elapsed = time.perf_counter() - began
    body = response.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{promql}: {body.get('error')}")
    return elapsed, len(body["data"]) if match else len(body["data"]["result"])


@contextlib.contextmanager
def prometheus(data: Path, config: Path, log: Path):
    port = free_port()
    with open(log, "a") as out:
        proc = subprocess.Popen(
            [
                shutil.which("prometheus") or "prometheus",
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                "--storage.tsdb.retention.time=30d",
                f"--web.listen-address=127.0.0.1:{port}",
                "--query.timeout=2m",
            ],
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url), "Prometheus to load the blocks")
        yield url
    finally:
        proc.terminate()
        proc.wait(60)


def _ready(url: str) -> bool:
    with contextlib.suppress(requests.RequestException):
        return requests.get(f"{url}/-/ready", timeout=2).ok
    return False


def build_blocks(fleet: Fleet, work: Path, start: int, steps: int) -> int:
    source = work / "fleet.om"
    began = time.monotonic()
    with open(source, "w", buffering=1 << 20) as out:
        samples = write_openmetrics(fleet, start, steps, STEP_SECONDS, out)
    print(
        f"wrote {samples:,} samples ({source.stat().st_size / 2**30:.2f} GiB) in {time.monotonic() - began:.0f} s",
        flush=True,
    )
    began = time.monotonic()
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(work / "data")], check=True
    )
    source.unlink()
    print(f"promtool made the blocks in {time.monotonic() - began:.0f} s", flush=True)
    return samples


def backfill_rules(url: str, work: Path, start: int, end: int) -> None:
    if not RECORDING_RULES.exists():
        return
    began = time.monotonic()
    subprocess.run(
        [
            "promtool",
            "tsdb",
            "create-blocks-from",
            "rules",
            f"--start={start}",
            f"--end={end}",
            f"--url={url}",
            f"--output-dir={work / 'rules'}",
            "--eval-interval=1m",
            str(RECORDING_RULES),
        ],
        check=True,
        cwd=work,
        capture_output=True,
    )
    for block in (work / "rules").iterdir():
        if block.is_dir():
            shutil.move(str(block), work / "data" / block.name)
    print(f"recording rules backfilled in {time.monotonic() - began:.0f} s", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=125)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--processes-per-gpu", type=int, default=2)
    parser.add_argument("--hours", type=float, default=6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--all-repeats", type=int, default=1, help="repeats of the every-variable-at-All stress run")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--work", help="a directory for the blocks (default: a temporary one)")
    args = parser.parse_args()
    fleet = Fleet(args.nodes, args.gpus_per_node, args.processes_per_gpu)
    steps = int(args.hours * 3600 / STEP_SECONDS)
    end = int(time.time()) // STEP_SECONDS * STEP_SECONDS - 2 * STEP_SECONDS
    start = end - (steps - 1) * STEP_SECONDS
    with tempfile.TemporaryDirectory(prefix="alnair-fleet-", dir=args.work) as tmp:
        work = Path(tmp)
        config = work / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n")
        samples = build_blocks(fleet, work, start, steps)
        with prometheus(work / "data", config, work / "prometheus.log") as url:
            backfill_rules(url, work, start, end)
        with prometheus(work / "data", config, work / "prometheus.log") as url:
            opened = time_panels(url, queries(url, args.hours, start, end, False), start, end, args.repeats)
            everything = time_panels(url, queries(url, args.hours, start, end, True), start, end, args.all_repeats)
    for panel, stressed in zip(opened, everything):
        panel["all_median_s"], panel["all_series"] = stressed["median_s"], stressed["series"]
    report = {
        "machine": machine(),
        "fleet": vars(fleet) | {"gpus": fleet.gpu_count},
        "samples": samples,
        "hours": args.hours,
        "step_seconds": STEP_SECONDS,
        "panels": opened,
    }
    print_table(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    slow = [p for p in opened if p["median_s"] >= TARGET_SECONDS or not p["series"]]
    print(
        "all panels under 2 s median, each with data"
        if not slow
        else f"NOT met: {[(p['dashboard'], p['panel']) for p in slow]}"
    )
    return 0 if not slow else 1


def time_panels(url: str, panel_queries, start: float, end: float, repeats: int) -> list[dict]:
    times: dict[int, list[float]] = {i: [] for i in range(len(panel_queries))}
    series: dict[int, int] = {}
    for _ in range(repeats):
        for i, (_, _, targets) in enumerate(panel_queries):
            results = [run_query(url, promql, instant, start, end) for promql, instant in targets]
            times[i].append(sum(t for t, _ in results))
            series[i] = sum(n for _, n in results)
    return [
        {
            "dashboard": d,
            "panel": title,
            "targets": len(targets),
            "series": series[i],
            "median_s": statistics.median(times[i]),
            "max_s": max(times[i]),
        }
        for i, (d, title, targets) in enumerate(panel_queries)
    ]


def print_table(report: dict) -> None:
    print(
        f"machine: {report['machine']}; {report['fleet']['gpus']:,} GPUs on {report['fleet']['nodes']} nodes, "
        f"{report['samples']:,} samples over {report['hours']:g} h"
    )
    print(
        f"{'dashboard':16} {'panel':44} {'targets':>7} {'series':>6} {'median s':>8} {'max s':>6}   "
        f"{'all: series':>11} {'median s':>8}"
    )
    for p in report["panels"]:
        print(
            f"{p['dashboard']:16} {p['panel'][:44]:44} {p['targets']:>7} {p['series']:>6} {p['median_s']:>8.3f} "
            f"{p['max_s']:>6.3f}   {p['all_series']:>11} {p['all_median_s']:>8.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
