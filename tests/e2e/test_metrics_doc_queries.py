"""Every PromQL example in docs/metrics.md (inline code or a fenced block) parses (`promtool check rules`, each one
wrapped in a recording rule), and returns data, without an error, from two nodes that each run a process with the
same pid (`promtool test rules`: every family of the golden exposition on two targets, node-a and node-b, pid 42 on
both). A join or aggregation by `pid` that leaves out `instance` fails here twice: Prometheus refuses a join
`on (pid)` ("found duplicate series for the match group"), and the docs may not write one.

The two nodes: node-a's pid 42 has launched and is idle (its latest launch at 1 s), node-b's pid 42 has never
launched and has exited; a query that matches `unless on (pid)` loses node-a's to node-b's and returns nothing.
Gauges are 1 on node-a and 0 on node-b (so `== 0` alerts have a series), counters grow 1 a second on both.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from support import require_binary
from test_metrics_documented import METRIC_NAME

ROOT = Path(__file__).resolve().parents[2]
METRICS_DOC = ROOT / "docs" / "metrics.md"
GOLDEN = Path(__file__).parent / "fixtures" / "exposition.txt"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NODES = ("node-a", "node-b")
ONLY_ON = {  # families a node lacks: the states the two processes with pid 42 are in
    "alnair_cuda_time_to_first_launch_seconds": "node-a",
    "alnair_cuda_last_launch_timestamp_seconds": "node-a",
    "alnair_cuda_process_exited_timestamp_seconds": "node-b",
    "alnair_python_process_exited_timestamp_seconds": "node-b",
}
LABEL_VALUES = {  # per label name, its value ({node}: the node's name); any other label is "x"
    "pid": "42",
    "gpu": "0",
    "uuid": "GPU-{node}",
    "pod": "trainer-{node}",
    "pod_uid": "uid-{node}",
    "namespace": "team",
    "direction": "host_to_device",
    "redis": "redis://cache:6379",
    "le": "+Inf",
}
STEP, POINTS, EVAL_TIME = "30s", 40, "10m"  # 20 minutes of samples, evaluated in the middle

# what makes a code span an expression rather than a name: a call, a range, or an operator between spaces
PROMQL = re.compile(r"\b[a-z_]+\s*\(|\[\d+[smhdwy]\]|\s(?:[-+*/%^]|==|!=|>=|<=|>|<|and|or|unless)\s")
PID_JOIN = re.compile(r"\b(on|by)\s*\(([^)]*)\)")


def code_spans(text: str) -> list[str]:
    """Every inline code span and every fenced block's text (a multi-line block joined into one line)."""
    fenced = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.S | re.M)
    blocks = [" ".join(b.split()) for b in fenced.findall(text)]
    inline = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", fenced.sub("", text))
    return blocks + inline


def examples(text: str) -> list[str]:
    """The code spans that are PromQL expressions: a metric of Alnair's with a call, a range or an operator."""
    return list(dict.fromkeys(s for s in code_spans(text) if METRIC_NAME.search(s) and PROMQL.search(s)))


def test_the_examples_are_found():
    found = examples(METRICS_DOC.read_text())
    assert len(found) >= 20, found
    assert "rate(alnair_python_samples_total[1m])" in found
    assert not any(METRIC_NAME.fullmatch(e) for e in found)  # a bare name is not an example


def test_every_example_parses(tmp_path):
    rules = tmp_path / "examples.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "docs-metrics-md",
                        "rules": [
                            {"record": f"docs_example_{i}", "expr": e}
                            for i, e in enumerate(examples(METRICS_DOC.read_text()))
                        ],
                    }
                ]
            }
        )
    )
    check = subprocess.run([require_binary("promtool"), "check", "rules", str(rules)], capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS" in check.stdout, check.stdout + check.stderr


def two_nodes() -> list[dict]:
    """promtool's input series: every family of the golden exposition, with its labels, on node-a and node-b."""
    series = []
    for line in GOLDEN.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        family, kind, labels = line.split()
        names = [n for n in labels.split(",") if n != "-"]
        parts = (
            [
                (f"{family}_bucket", names),
                (f"{family}_sum", [n for n in names if n != "le"]),
                (f"{family}_count", [n for n in names if n != "le"]),
            ]
            if kind == "histogram"
            else [(family, names)]
        )
        for node in NODES:
            if ONLY_ON.get(family, node) != node:
                continue
            gauge = "1+0x{}" if node == "node-a" else "0+0x{}"
            values = ("0+30x{}" if kind in ("counter", "histogram") else gauge).format(POINTS)
            for name, label_names in parts:
                labels = {
                    "instance": f"{node}:9876",
                    "job": "alnair",
                    **{n: LABEL_VALUES.get(n, "x").format(node=node) for n in label_names},
                }
                selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                series.append({"series": f"{name}{{{selector}}}", "values": values})
    return series


def test_every_example_returns_data_from_two_nodes_sharing_a_pid(tmp_path):
    """absent() of an example is empty when the example returns data; promtool prints `err:` for a query Prometheus
    refuses, and `got: {} 1E+00` for one that returned nothing."""
    tests = tmp_path / "examples_test.yaml"
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": STEP,
                        "input_series": two_nodes(),
                        "promql_expr_test": [
                            {"expr": f"absent(({e}))", "eval_time": EVAL_TIME, "exp_samples": []}
                            for e in examples(METRICS_DOC.read_text())
                        ],
                    }
                ],
            }
        )
    )
    run = subprocess.run([require_binary("promtool"), "test", "rules", str(tests)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_no_join_or_aggregation_by_pid_leaves_out_instance(doc):
    """A pid is unique on its node only: `on (pid)` and `by (pid)` mix two nodes' processes (or are refused)."""
    wrong = [
        span
        for span in code_spans(doc.read_text())
        for _, labels in PID_JOIN.findall(span)
        if "pid" in re.findall(r"\w+", labels) and "instance" not in re.findall(r"\w+", labels)
    ]
    assert wrong == []
