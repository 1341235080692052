"""PromQL building blocks. Every query the dashboards and the rules share is written once, as a function of a
Scope: the dashboards render it with Grafana's variables and `$__rate_interval`, the rules without filters over a
fixed window, so a recorded series and the panel that shows the same thing cannot drift apart."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Scope:
    """Where a query runs: the range of its rate()s and, per label, the regex it filters that label with
    (a label not named here is not filtered)."""

    window: str
    filters: dict[str, str] = field(default_factory=dict)


# Grafana variables by the label they filter (dashboards/dashgen/variables.py defines them).
DASHBOARD = Scope(
    "$__rate_interval",
    {
        "instance": "$instance",
        "uuid": "$gpu",
        "namespace": "$namespace",
        "pod": "$pod",
        "redis": "$redis",
        "dataset": "$dataset",
        "job_name": "$cache_job",
    },
)
# Rules see no variables. 5m holds at least four scrapes at Prometheus's default 1m interval and ten at the common
# 30s, so one missed scrape does not empty a rate; the alerts read these series, so their windows are the same.
RULES = Scope("5m")

# The labels of each kind of series that a scope may filter on.
NODE = ("instance",)  # everything the exporter serves
GPU = ("instance", "uuid")  # per device: nvml, and the cuda collector's per-device series
POD = ("instance", "namespace", "pod")  # the _process_info series
REDIS = ("redis",)
DATASET = ("redis", "dataset")
CACHE_JOB = ("redis", "job_name")

IDENTITY = "namespace, pod, container"  # what the _process_info joins bring onto a process's series

_PRIMARY = re.compile(r"[A-Za-z_:][\w:]*(\{[^{}]*\})?")


def selector(scope: Scope, metric: str, labels: Sequence[str] = (), *matchers: str) -> str:
    """`metric{...}` with the scope's filters for `labels` and the given fixed matchers (`type="uncorrected"`)."""
    parts = [f'{label}=~"{scope.filters[label]}"' for label in labels if label in scope.filters] + list(matchers)
    return f"{metric}{{{', '.join(parts)}}}" if parts else metric


def rate(scope: Scope, metric: str, labels: Sequence[str] = (), *matchers: str) -> str:
    return f"rate({selector(scope, metric, labels, *matchers)}[{scope.window}])"


def increase(scope: Scope, metric: str, labels: Sequence[str] = (), *matchers: str) -> str:
    return f"increase({selector(scope, metric, labels, *matchers)}[{scope.window}])"


def atom(expr: str) -> str:
    """`expr` as an operand: parenthesised unless it is a selector or one function call."""
    if _PRIMARY.fullmatch(expr) or (
        re.match(r"[a-z_]+\s*\(", expr) and _closing_paren(expr, expr.index("(")) == len(expr) - 1
    ):
        return expr
    return f"({expr})"


def _closing_paren(expr: str, opening: int) -> int:
    depth = 0
    for position in range(opening, len(expr)):
        depth += {"(": 1, ")": -1}.get(expr[position], 0)
        if depth == 0:
            return position
    raise ValueError(f"unbalanced parentheses: {expr}")


def by(labels: Sequence[str], operation: str, expr: str) -> str:
    return f"{operation} by ({', '.join(labels)}) ({expr})"


def with_pod(scope: Scope, expr: str, collector: str, *matchers: str) -> str:
    """`expr`, a per-process vector, with its pod's names: the process's `_info` series of `collector` (one per pid
    and exporter, the names never on the value series themselves: docs/metrics.md), filtered by namespace and pod
    (and by `matchers`, such as `pod!~"<none>|<unknown>"`)."""
    info = selector(scope, f"alnair_{collector}_process_info", POD, *matchers)
    return f"{atom(expr)} * on (instance, pid) group_left ({IDENTITY}) {info}"


def with_node(scope: Scope, expr: str) -> str:
    """`expr` with the exporter's node name: `instance` names the exporter, `alnair_node_info` its node."""
    return f"{atom(expr)} * on (instance) group_left (node) {selector(scope, 'alnair_node_info', NODE)}"


def renamed(expr: str, label: str, source: str, value: str = "$1") -> str:
    """`expr` with `label` set from `source`'s value (`value` may wrap it: "nvidia$1"); `source` stays."""
    return f'label_replace({expr}, "{label}", "{value}", "{source}", "(.*)")'


def ratio(numerator: str, denominator: str) -> str:
    """numerator / denominator, without series whose denominator is 0 (no NaN where nothing happened)."""
    return f"{atom(numerator)} / ({denominator} > 0)"


# What the dashboards show and the rules record alike.


def gpu_memory_used_share(scope: Scope) -> str:
    return ratio(
        selector(scope, "alnair_nvml_memory_used_bytes", GPU), selector(scope, "alnair_nvml_memory_total_bytes", GPU)
    )


def memory_of_limit(scope: Scope) -> str:
    """Per process and device: device memory in use over its ALNAIR_MEMORY_LIMIT (absent without a limit)."""
    used = selector(scope, "alnair_cuda_memory_used_bytes", GPU)
    return with_pod(scope, ratio(used, selector(scope, "alnair_cuda_memory_limit_bytes", GPU)), "cuda")


def gpu_time_share(scope: Scope) -> str:
    """Per pod and GPU: the share of the GPU's time the pod's processes got, from the intercept's GPU time (each moment
    divided among the processes busy on the GPU then), so a time-sliced GPU's pods add up to its busy share, at most 1.
    By `uuid` alone: the cuda collector's `gpu` is the CUDA ordinal each process sees, which processes may not share."""
    return by(
        ["instance", "uuid", "namespace", "pod"],
        "sum",
        with_pod(scope, rate(scope, "alnair_cuda_gpu_time_seconds_total", GPU), "cuda"),
    )


def data_stall(scope: Scope, labels: Sequence[str] | None = None) -> str:
    """The share of step time spent waiting for the next batch: per process, or summed by `labels`."""
    wait, step = (rate(scope, f"alnair_python_{name}_seconds_total", NODE) for name in ("data_wait", "step"))
    if labels is None:
        return with_pod(scope, ratio(wait, step), "python")
    wait, step = (by(labels, "sum", with_pod(scope, e, "python")) for e in (wait, step))
    return ratio(wait, step)


def cache_hit_ratio(scope: Scope, kind: str, labels: Sequence[str]) -> str:
    """Hits over all fetches (hits, misses, fallbacks) of the dataset cache, per `kind` ("dataset" or "job")."""
    filtered = DATASET if kind == "dataset" else CACHE_JOB
    hits, misses, fallbacks = (
        by(labels, "sum", rate(scope, f"alnair_cache_{kind}_{c}_total", filtered))
        for c in ("hits", "misses", "fallbacks")
    )
    return ratio(hits, f"{hits} + {misses} + {fallbacks}")


def dedupe_ratio(scope: Scope) -> str:
    """Bytes the datasets' manifests reference, as if each sample were stored alone, over the distinct bytes stored."""
    logical = by(["redis"], "sum", selector(scope, "alnair_cache_dataset_logical_bytes", DATASET))
    return ratio(logical, by(["redis"], "sum", selector(scope, "alnair_cache_physical_bytes", REDIS)))


CLUSTER_SLOTS = 16384  # hash slots of every Redis Cluster


def cache_node_memory_of_max(scope: Scope) -> str:
    """Per Redis Cluster node (`redis`, `node`): memory used over its maxmemory (nodes without a maximum left out)."""
    return ratio(
        selector(scope, "alnair_cache_node_memory_used_bytes", REDIS),
        selector(scope, "alnair_cache_node_memory_max_bytes", REDIS),
    )


def gpus_answering(scope: Scope) -> str:
    """Per exporter: GPUs (not MIG instances) that answered NVML; 0, not nothing, when none did."""
    answered = by(["instance"], "count", selector(scope, "alnair_nvml_gpu_info", NODE, 'parent_uuid=""'))
    known = by(["instance"], "count", selector(scope, "alnair_nvml_up", NODE))
    return f"{answered} or on (instance) 0 * {known}"
