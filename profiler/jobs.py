"""Jobs from a Prometheus's Alnair series: which processes ran in the range (their *_process_info series), every
family they and their nodes and GPUs have, one query per family for all jobs, and one row per job.

A job is one process: `pid@instance`. A pod with several processes gives a row for each (a launcher and its
ranks differ in GPUs, steps and memory, and summing them would hide that); each row carries the pod's names
and `pod_processes`, so grouping by (namespace, pod) is one step. DataLoader workers are no rows of their own:
their parent counts the steps, and their CPU and memory show in the node's columns.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from . import series as ts
from .columns import NAMES, STATISTICS
from .prometheus import Prometheus, Series

INFO_FAMILIES = ("alnair_python_process_info", "alnair_cuda_process_info", "alnair_nvml_process_info")
# each record's (python, cuda) start and exit: a run spans the earliest start to the latest exit
STARTS = ("alnair_python_process_start_time_seconds", "alnair_cuda_process_start_time_seconds")
EXITS = ("alnair_python_process_exited_timestamp_seconds", "alnair_cuda_process_exited_timestamp_seconds")
PROCESS_FAMILIES = (
    *STARTS,
    *EXITS,
    "alnair_python_dataloader_worker",
    "alnair_python_steps_total",
    "alnair_python_samples_total",
    "alnair_python_step_seconds_total",
    "alnair_python_data_wait_seconds_total",
    "alnair_python_epochs_total",
    "alnair_python_optimizer_steps_total",
    "alnair_python_time_to_first_step_seconds",
    "alnair_cuda_kernel_launches_total",
    "alnair_cuda_graph_launches_total",
    "alnair_cuda_memory_peak_bytes",
    "alnair_cuda_allocations_total",
    "alnair_cuda_allocations_denied_total",
    "alnair_cuda_throttled_seconds_total",
    "alnair_cuda_gpu_time_seconds_total",
    "alnair_cuda_memory_limit_bytes",
    "alnair_cuda_compute_limit_ratio",
    "alnair_cuda_compute_share_ratio",
    "alnair_nvml_process_sm_utilization_ratio",
    "alnair_nvml_process_memory_used_bytes",
)
NODE_FAMILIES = (
    "alnair_node_info",
    "alnair_exporter_build_info",
    "alnair_host_cpus",
    "alnair_host_cpu_seconds_total",
    "alnair_host_memory_total_bytes",
    "alnair_host_memory_available_bytes",
    "alnair_nvml_gpu_info",
    "alnair_nvml_sm_utilization_ratio",
    "alnair_nvml_memory_utilization_ratio",
    "alnair_nvml_memory_used_bytes",
    "alnair_nvml_memory_total_bytes",
    "alnair_nvml_temperature_celsius",
    "alnair_nvml_power_watts",
    "alnair_nvml_energy_joules_total",
)
IDLE_MODES = ("idle", "iowait")
# Steps the training minimum leaves out as warm-up (kernels built and tuned, lazy allocations): in block 22 a BERT's
# counter stayed at 1 for two scrapes with its GPU idle
WARMUP_STEPS = 2
NO_POD = ("", "<none>", "<unknown>")


def key(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("instance", ""), labels.get("pid", "")


def timeline(s: Series) -> ts.Timeline:
    return ts.Timeline(s.times, s.values)


@dataclass
class Job:
    instance: str
    pid: str
    info: dict[str, str] = field(default_factory=dict)
    families: dict[str, list[Series]] = field(default_factory=lambda: defaultdict(list))

    def one(self, family: str) -> Series | None:
        found = self.families.get(family)
        return found[0] if found else None

    def uuids(self) -> list[str]:
        seen = {s.labels["uuid"] for family, found in self.families.items() for s in found if "uuid" in s.labels}
        return sorted(seen)

    def total(self, family: str) -> float | None:
        """A per-device counter or gauge's last value, summed over devices."""
        found = [s.values[-1] for s in self.families.get(family, []) if s.values]
        return sum(found) if found else None


class Node:
    """One instance's node and GPU series, prepared once for all its jobs."""

    def __init__(self, families: dict[str, list[Series]]):
        self.families = families
        cpu = families.get("alnair_host_cpu_seconds_total", [])
        busy = [timeline(s) for s in cpu if s.labels.get("mode") not in IDLE_MODES]
        self.cpu_util = ts.rate_ratio(ts.combine(busy, sum), ts.combine([timeline(s) for s in cpu], sum))
        total = self._first("alnair_host_memory_total_bytes")
        available = self._first("alnair_host_memory_available_bytes")
        free = ts.ratio(available, total)
        # (total - available) / total, as psutil
        self.memory_util = ts.Timeline(free.times, [1 - v for v in free.values])
        self.gpus = self._by_uuid()

    def _first(self, family: str) -> ts.Timeline:
        found = self.families.get(family)
        return timeline(found[0]) if found else ts.Timeline()

    def _by_uuid(self) -> dict[str, dict[str, Series]]:
        out: dict[str, dict[str, Series]] = defaultdict(dict)
        for family, found in self.families.items():
            for s in found:
                if family.startswith("alnair_nvml_") and "uuid" in s.labels:
                    out[s.labels["uuid"]][family] = s
        return out

    def label(self, family: str, name: str) -> str | None:
        found = self.families.get(family)
        return found[0].labels.get(name) if found else None

    def last(self, family: str) -> float | None:
        found = self.families.get(family)
        return found[0].values[-1] if found and found[0].values else None


def discover(prometheus: Prometheus, info_selector: str, start: float, end: float) -> dict[tuple[str, str], Job]:
    """The processes with a *_process_info series matching the selector in the range."""
    jobs: dict[tuple[str, str], Job] = {}
    for family in INFO_FAMILIES:
        for s in prometheus.raw(f"{family}{{{info_selector}}}", start, end):
            job = jobs.setdefault(key(s.labels), Job(*key(s.labels)))
            for name in ("namespace", "pod", "container", "pod_uid", "comm"):
                # the collectors agree on a pid's pod, but one may not know its name yet: a known name wins
                if name not in job.info or s.labels.get(name, "") not in NO_POD:
                    job.info[name] = s.labels.get(name, "")
    return jobs


def fetch(
    prometheus: Prometheus,
    jobs: dict[tuple[str, str], Job],
    process_selector: str,
    node_selector: str,
    start: float,
    end: float,
    progress,
) -> dict[str, dict[str, list[Series]]]:
    """Every family, one query each for all jobs: process families go to their jobs, node families are returned
    by instance."""
    nodes: dict[str, dict[str, list[Series]]] = defaultdict(lambda: defaultdict(list))
    instances = {instance for instance, _ in jobs}
    families = [(f, process_selector) for f in PROCESS_FAMILIES] + [(f, node_selector) for f in NODE_FAMILIES]
    for index, (family, selector) in enumerate(families, 1):
        found = prometheus.raw(f"{family}{{{selector}}}", start, end)
        for s in found:
            if family in PROCESS_FAMILIES:
                job = jobs.get(key(s.labels))
                if job is not None:
                    job.families[family].append(s)
            elif s.labels.get("instance", "") in instances:
                nodes[s.labels.get("instance", "")][family].append(s)
        progress(f"[{index}/{len(families)}] {family}: {len(found)} series")
    return nodes


def rows(jobs: dict[tuple[str, str], Job], nodes: dict[str, dict[str, list[Series]]]) -> list[dict]:
    """One row per job that is not a DataLoader worker, in order of start."""
    prepared = {instance: Node(families) for instance, families in nodes.items()}
    empty = Node({})
    kept = [job for job in jobs.values() if not _is_worker(job)]
    out = [row(job, prepared.get(job.instance, empty)) for job in kept]
    pods: dict[tuple[str, str], int] = defaultdict(int)
    for r in out:
        if r["pod"] not in NO_POD:
            pods[r["namespace"], r["pod"]] += 1
    for r in out:
        r["pod_processes"] = pods.get((r["namespace"], r["pod"]))
    # a job whose series hold no sample in the range (only its info series has one) has no start: it goes last
    return sorted(out, key=lambda r: (math.inf if r["start_time"] is None else r["start_time"], r["job"]))


def _is_worker(job: Job) -> bool:
    worker = job.one("alnair_python_dataloader_worker")
    return bool(worker and worker.values and max(worker.values) == 1)


def span(job: Job) -> tuple[float, float, str]:
    """(start, end, source): the records' start and exit times where present, else the first and last sample."""
    sampled = [s for found in job.families.values() for s in found if s.times]
    first = min((s.times[0] for s in sampled), default=None)
    last = max((s.times[-1] for s in sampled), default=None)
    started = [s.values[-1] for f in STARTS if (s := job.one(f)) and s.values]
    exited = [s.values[-1] for f in EXITS if (s := job.one(f)) and s.values]
    start = min(started) if started else first
    end = max(exited) if exited else last
    return start, end, "record" if started and exited else "samples"


def row(job: Job, node: Node) -> dict:
    out = dict.fromkeys(NAMES)
    start, end, source = span(job)
    out.update(
        job=f"{job.pid}@{job.instance}",
        instance=job.instance,
        pid=job.pid,
        start_time=start,
        end_time=end,
        duration_seconds=None if start is None or end is None else end - start,
        duration_source=source,
        **job.info,
    )
    out["scrapes"] = max((len(s.times) for found in job.families.values() for s in found), default=0)
    out.update(_metadata(job, node))
    window = (start if start is not None else 0.0, end if end is not None else 0.0)
    steps = job.one("alnair_python_steps_total")
    out.update(_statistics(job, node, window, ts.steady(timeline(steps), WARMUP_STEPS) if steps else None))
    out.update(_cuda(job, out["duration_seconds"]))
    out.update(_python(job))
    return out


def _metadata(job: Job, node: Node) -> dict:
    uuids = job.uuids()
    gpu = node.gpus.get(uuids[0], {}).get("alnair_nvml_gpu_info") if uuids else None
    cpus = node.last("alnair_host_cpus")
    return {
        "node": node.label("alnair_node_info", "node"),
        "exporter_version": node.label("alnair_exporter_build_info", "version"),
        "node_cpus": None if cpus is None else int(cpus),
        "node_memory_total_bytes": node.last("alnair_host_memory_total_bytes"),
        "gpu_count": len(uuids),
        "gpu_uuids": ",".join(uuids),
        "gpu_model": gpu.labels.get("name") if gpu else None,
        "driver_version": gpu.labels.get("driver_version") if gpu else None,
    }


def _statistics(job: Job, node: Node, window: tuple[float, float], training: tuple[float, float] | None) -> dict:
    gpus = [node.gpus[u] for u in job.uuids() if u in node.gpus]

    def device(family: str, within: tuple[float, float] = window) -> list[float]:
        return [v for g in gpus if family in g for v in timeline(g[family]).window(*within)]

    def used_ratio() -> list[float]:
        return [
            v
            for g in gpus
            if {"alnair_nvml_memory_used_bytes", "alnair_nvml_memory_total_bytes"} <= g.keys()
            for v in ts.ratio(
                timeline(g["alnair_nvml_memory_used_bytes"]), timeline(g["alnair_nvml_memory_total_bytes"])
            ).window(*window)
        ]

    process_util = [
        v for s in job.families.get("alnair_nvml_process_sm_utilization_ratio", []) for v in timeline(s).window(*window)
    ]
    values = {
        "cpu_util_ratio": node.cpu_util.window(*window),
        "sys_memory_util_ratio": node.memory_util.window(*window),
        "gpu_util_ratio": device("alnair_nvml_sm_utilization_ratio"),
        "gpu_memory_busy_ratio": device("alnair_nvml_memory_utilization_ratio"),
        "gpu_memory_used_ratio": used_ratio(),
        "gpu_memory_used_bytes": device("alnair_nvml_memory_used_bytes"),
        "gpu_temperature_celsius": device("alnair_nvml_temperature_celsius"),
        "gpu_power_watts": device("alnair_nvml_power_watts"),
        "gpu_process_util_ratio": process_util,
    }
    out = {}
    for prefix, _ in STATISTICS:
        for stat, value in zip(("min", "max", "mean", "range"), ts.summary(values[prefix])):
            out[f"{prefix}_{stat}"] = value
    energy = [
        ts.increase(timeline(g["alnair_nvml_energy_joules_total"]).pairs(*window))
        for g in gpus
        if "alnair_nvml_energy_joules_total" in g
    ]
    out["gpu_energy_joules"] = sum(e for e in energy if e is not None) if any(e is not None for e in energy) else None
    memory = [v for s in job.families.get("alnair_nvml_process_memory_used_bytes", []) for v in s.values]
    out["gpu_process_memory_max_bytes"] = max(memory) if memory else None
    # the run's minimum is its idle start-up (0 for most jobs); the original dataset's profiler watched training only
    trained = device("alnair_nvml_sm_utilization_ratio", training) if training else []
    out["gpu_util_ratio_training_min"] = min(trained) if trained else None
    return out


def _cuda(job: Job, duration: float | None) -> dict:
    peaks = [max(s.values) for s in job.families.get("alnair_cuda_memory_peak_bytes", []) if s.values]
    gpu_time = job.total("alnair_cuda_gpu_time_seconds_total")
    measured = sum(1 for s in job.families.get("alnair_cuda_gpu_time_seconds_total", []) if s.values)  # its GPUs
    return {
        "cuda_memory_peak_bytes": sum(peaks) if peaks else None,
        "cuda_kernel_launches": job.total("alnair_cuda_kernel_launches_total"),
        "cuda_graph_launches": job.total("alnair_cuda_graph_launches_total"),
        "cuda_allocations": job.total("alnair_cuda_allocations_total"),
        "cuda_allocations_denied": job.total("alnair_cuda_allocations_denied_total"),
        "cuda_throttled_seconds": job.total("alnair_cuda_throttled_seconds_total"),
        "cuda_gpu_time_seconds": gpu_time,
        "cuda_gpu_time_ratio": gpu_time / (duration * measured) if gpu_time is not None and duration else None,
        "cuda_memory_limit_bytes": job.total("alnair_cuda_memory_limit_bytes"),
        "cuda_compute_limit_ratio": _last(job, "alnair_cuda_compute_limit_ratio"),
        "cuda_compute_share_ratio": _last(job, "alnair_cuda_compute_share_ratio"),
    }


def _last(job: Job, family: str) -> float | None:
    s = job.one(family)
    return s.values[-1] if s and s.values else None


def _python(job: Job) -> dict:
    steps, seconds = job.one("alnair_python_steps_total"), job.one("alnair_python_step_seconds_total")
    samples, wait = _last(job, "alnair_python_samples_total"), _last(job, "alnair_python_data_wait_seconds_total")
    total_seconds = _last(job, "alnair_python_step_seconds_total")
    per_step, weights = ts.per_event(timeline(seconds), timeline(steps)) if steps and seconds else ([], [])
    return {
        "steps": _last(job, "alnair_python_steps_total"),
        "samples": samples,
        "epochs": _last(job, "alnair_python_epochs_total"),
        "optimizer_steps": _last(job, "alnair_python_optimizer_steps_total"),
        "samples_per_second": samples / total_seconds if samples is not None and total_seconds else None,
        "step_seconds_p50": ts.weighted_percentile(per_step, weights, 0.5),
        "step_seconds_p95": ts.weighted_percentile(per_step, weights, 0.95),
        "data_stall_ratio": wait / total_seconds if wait is not None and total_seconds else None,
        "time_to_first_step_seconds": _last(job, "alnair_python_time_to_first_step_seconds"),
    }
