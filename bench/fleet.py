"""A synthetic fleet's series, as the exporters of every node would serve them, written as OpenMetrics.

Every family the golden exposition fixture lists (tests/e2e/fixtures/exposition.txt: name, type, labels) is
given series for each entity its labels name: a GPU (gpu, uuid), a process on a GPU (pid with gpu), a
process (pid alone), a node (no entity label), a Redis (redis, with dataset or job_name), each on its
node's exporter (instance, job). Values move plausibly (counters only rise, ratios stay in 0-1); what
matters for query cost is the number of series and samples, and that the joins the dashboards make
(pid and instance to the *_process_info series, instance to alnair_node_info) meet.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ROOT / "tests" / "e2e" / "fixtures" / "exposition.txt"
THROTTLE_REASONS = (
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "display_clock_setting",
)
LABEL_VALUES = {  # the values a label other than an entity's takes on every series of its family
    ("alnair_nvml_throttle_reason_active", "reason"): THROTTLE_REASONS,
    ("alnair_nvml_ecc_errors_total", "type"): ("corrected", "uncorrected"),
    ("alnair_nvml_remapped_rows", "type"): ("correctable", "uncorrectable"),
    ("alnair_nvml_retired_pages", "cause"): ("single_bit_ecc", "double_bit_ecc"),
    ("alnair_nvml_xid_errors_by_code_total", "xid"): ("13", "48"),
    ("alnair_host_cpu_seconds_total", "mode"): ("user", "system", "idle", "iowait"),
    ("alnair_python_custom_total", "name"): ("images_decoded",),
    ("alnair_python_phase_seconds_total", "name"): ("forward", "backward", "data"),
    ("alnair_python_phase_completions_total", "name"): ("forward", "backward", "data"),
}
BUCKETS = ("0.001", "0.005", "0.025", "0.1", "0.5", "+Inf")
DATASETS = ("imagenet-train", "gtsrb", "cifar10", "librispeech", "squad")
COLLECTORS = ("nvml", "cuda", "python", "host", "cache")
GPU_MEMORY = 150_000_000_000


@dataclass(frozen=True)
class Fleet:
    nodes: int = 125
    gpus_per_node: int = 8
    processes_per_gpu: int = 2
    namespaces: int = 10

    def instances(self) -> list[str]:
        return [f"node-{n:03d}:9876" for n in range(self.nodes)]

    def gpus(self, node: int) -> list[dict[str, str]]:
        return [
            {"gpu": str(g), "uuid": f"GPU-{node:04x}{g:04x}-0000-4000-8000-000000000000"}
            for g in range(self.gpus_per_node)
        ]

    def processes(self, node: int) -> list[dict[str, str]]:
        """Each GPU's processes, each the only container of its own pod."""
        out = []
        for gpu in self.gpus(node):
            for k in range(self.processes_per_gpu):
                pid = 10_000 + int(gpu["gpu"]) * 100 + k
                pod = f"train-{node:03d}-{gpu['gpu']}-{k}"
                out.append(
                    {
                        **gpu,
                        "pid": str(pid),
                        "pod": pod,
                        "namespace": f"team-{(node + k) % self.namespaces}",
                        "container": "trainer",
                        "container_id": f"containerd://{node:04x}{pid:08x}",
                        "pod_uid": f"{node:08x}-0000-4000-8000-{pid:012x}",
                        "comm": "python",
                        "pid_namespace": "4026531836",
                    }
                )
        return out

    @property
    def gpu_count(self) -> int:
        return self.nodes * self.gpus_per_node


def families() -> list[tuple[str, str, list[str]]]:
    out = []
    for line in FAMILIES.read_text().splitlines():
        name, kind, labels = line.split()
        out.append((name, kind, [] if labels == "-" else labels.split(",")))
    return out


def label_sets(fleet: Fleet, node: int, name: str, labels: list[str]) -> Iterator[dict[str, str]]:
    """The label sets one node's exporter serves for the family, entity labels first."""
    base = {"instance": fleet.instances()[node], "job": "alnair"}
    if "pid" in labels and ("gpu" in labels or "pod" in labels or "comm" in labels):
        entities = [{k: p[k] for k in labels if k in p} for p in fleet.processes(node)]
    elif "pid" in labels:
        entities = [{"pid": p["pid"]} for p in fleet.processes(node)]
    elif "uuid" in labels:
        entities = fleet.gpus(node)
    elif "collector" in labels:
        entities = [{"collector": c} for c in COLLECTORS]
    elif "redis" in labels:
        redis = {"redis": "redis://cache.alnair:6379"}
        if "dataset" in labels:
            entities = [{**redis, "dataset": d} for d in DATASETS]
        elif "job_name" in labels:
            entities = [{**redis, "job_name": f"job-{node:03d}-{k}"} for k in range(2)]
        else:
            entities = [redis]
    elif "cpu" in labels:
        entities = [{"cpu": str(c)} for c in range(4)]
    else:
        entities = [{}]
    for entity in entities:
        extra = [
            (label, LABEL_VALUES.get((name, label), ())) for label in labels if label not in entity and label != "le"
        ]
        fixed = {label: _identity_value(name, label, node) for label, values in extra if not values}
        varying = [(label, values) for label, values in extra if values]
        for combination in _product(varying):
            yield {**base, **entity, **fixed, **combination}


def _identity_value(name: str, label: str, node: int) -> str:
    return {
        "node": f"node-{node:03d}",
        "version": "0.1.0",
        "python_version": "3.11.7",
        "name": "NVIDIA H200",
        "driver_version": "570.86.15",
        "parent_uuid": "",
        "role": "master",
        "maxmemory_policy": "allkeys-lru",
        "db": "db0",
    }.get(label, f"{label}-value")


def _product(varying: list[tuple[str, tuple[str, ...]]]) -> Iterator[dict[str, str]]:
    if not varying:
        yield {}
        return
    (label, values), rest = varying[0], varying[1:]
    for value in values:
        for tail in _product(rest):
            yield {label: value, **tail}


def value_walk(name: str, kind: str, rng: random.Random, steps: int) -> Iterator[float]:
    """One series' values at each step."""
    if name.endswith("_info") or name.endswith("_up") or name == "up":
        yield from (1.0 for _ in range(steps))
        return
    if kind == "counter":
        rate, total = rng.uniform(0.1, 1000.0), rng.uniform(0, 1e6)
        for _ in range(steps):
            total += rate * 60 * rng.uniform(0.5, 1.5)
            yield total
        return
    if "ratio" in name or name.endswith("_active") or name.endswith("_success") or "watch_up" in name:
        level = rng.random()
        for _ in range(steps):
            level = min(1.0, max(0.0, level + rng.uniform(-0.05, 0.05)))
            yield round(level, 3)
        return
    level = rng.uniform(1, GPU_MEMORY if "bytes" in name else 100)
    for _ in range(steps):
        level = max(0.0, level * rng.uniform(0.98, 1.02))
        yield round(level, 1)


def write_openmetrics(fleet: Fleet, start: int, steps: int, step_seconds: int, out: TextIO) -> int:
    """Writes every family's series over `steps` samples from `start` (unix seconds); returns the sample count."""
    rng = random.Random(20261201)
    times = [start + i * step_seconds for i in range(steps)]
    samples = 0
    for name, kind, labels in [("up", "gauge", []), *families()]:
        base_name = name[: -len("_total")] if kind == "counter" else name
        out.write(f"# TYPE {base_name} {kind}\n")
        for node in range(fleet.nodes):
            for labelset in label_sets(fleet, node, name, labels):
                if kind == "histogram":
                    samples += _write_histogram(base_name, labelset, times, rng, out)
                    continue
                text = _labels(labelset)
                for t, value in zip(times, value_walk(name, kind, rng, steps)):
                    out.write(f"{name}{text} {value} {t}\n")
                samples += steps
    out.write("# EOF\n")
    return samples


def _write_histogram(name: str, labelset: dict[str, str], times: list[int], rng: random.Random, out: TextIO) -> int:
    rate = rng.uniform(10, 1000)
    shares = sorted(rng.random() for _ in BUCKETS[:-1]) + [1.0]
    for i, t in enumerate(times):
        count = rate * 60 * (i + 1)
        for bound, share in zip(BUCKETS, shares):
            out.write(f"{name}_bucket{_labels({**labelset, 'le': bound})} {count * share:.1f} {t}\n")
        out.write(
            f"{name}_count{_labels(labelset)} {count:.1f} {t}\n{name}_sum{_labels(labelset)} {count * 0.01:.3f} {t}\n"
        )
    return len(times) * (len(BUCKETS) + 2)


def _labels(labelset: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labelset.items()) + "}"
