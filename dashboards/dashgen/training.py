"""Training: per pod, what the Python intercept measures in PyTorch training loops: steps and samples per
second, the data-stall fraction, phases and custom counters, beside the pods' GPU kernel launches."""

from __future__ import annotations

from . import variables as v
from .model import Dashboard, Query, row, stat, timeseries
from .promql import DASHBOARD as S, NODE, by, data_stall, rate, ratio, selector, with_pod

POD = ("namespace", "pod")
POD_NAME = ("namespace", "pod", "name")  # phases and custom counters are named


def per_pod(operation: str, expr: str, labels=POD) -> str:
    return by(labels, operation, with_pod(S, expr, "python"))


def pod_rate(metric: str, labels=POD) -> str:
    return per_pod("sum", rate(S, metric, NODE), labels)


THROUGHPUT = row(
    "Throughput",
    timeseries(
        "Steps per second",
        "Batches the pod's training loops took from their DataLoaders, per second (a step "
        "is one batch; evaluation under torch.no_grad() is not counted).",
        "ops",
        Query(pod_rate("alnair_python_steps_total"), "{{namespace}}/{{pod}}"),
        min=0,
    ),
    timeseries(
        "Samples per second",
        "Samples in those batches per second.",
        "ops",
        Query(pod_rate("alnair_python_samples_total"), "{{namespace}}/{{pod}}"),
        min=0,
    ),
    timeseries(
        "Data-stall fraction",
        "Share of step time spent waiting for the next batch: above a few percent the "
        "GPU waits for input (more DataLoader workers, prefetching, the dataset cache). AlnairTrainingDataStallHigh "
        "fires above its threshold.",
        "percentunit",
        Query(data_stall(S, POD), "{{namespace}}/{{pod}}"),
        min=0,
        max=1,
    ),
    timeseries(
        "GPU kernel launches",
        "The same pods' kernel launches per second through the CUDA intercept: a stall "
        "that rises while launches fall is a GPU starved by its input.",
        "ops",
        Query(
            by(POD, "sum", with_pod(S, rate(S, "alnair_cuda_kernel_launches_total", NODE), "cuda")),
            "{{namespace}}/{{pod}}",
        ),
        min=0,
    ),
)

PHASES = row(
    "Phases and counters",
    timeseries(
        "Time in phases",
        "Share of time inside each `with alnair.phase(name):` block, per pod (processes "
        "add up: 2 means two processes in the phase all the time).",
        "percentunit",
        Query(pod_rate("alnair_python_phase_seconds_total", POD_NAME), "{{namespace}}/{{pod}} {{name}}"),
        min=0,
    ),
    timeseries(
        "Mean phase duration",
        "Mean time of one pass through each phase over the interval.",
        "s",
        Query(
            ratio(
                pod_rate("alnair_python_phase_seconds_total", POD_NAME),
                pod_rate("alnair_python_phase_completions_total", POD_NAME),
            ),
            "{{namespace}}/{{pod}} {{name}}",
        ),
        min=0,
    ),
    timeseries(
        "Custom counters",
        "alnair.counter(name).inc() per second, per pod and name.",
        "ops",
        Query(pod_rate("alnair_python_custom_total", POD_NAME), "{{namespace}}/{{pod}} {{name}}"),
        min=0,
    ),
    timeseries(
        "Optimizer steps per second",
        "Completed optimizer.step() calls per second.",
        "ops",
        Query(pod_rate("alnair_python_optimizer_steps_total"), "{{namespace}}/{{pod}}"),
        min=0,
    ),
)

PROGRESS = row(
    "Progress",
    stat(
        "Epochs completed",
        "Training loops that ran their DataLoader to the end, per pod.",
        "none",
        Query(per_pod("sum", selector(S, "alnair_python_epochs_total", NODE)), "{{namespace}}/{{pod}}"),
        width=8,
    ),
    stat(
        "Time to first step",
        "From the process's start to its first training step: imports, data set-up and the first batch.",
        "s",
        Query(per_pod("max", selector(S, "alnair_python_time_to_first_step_seconds", NODE)), "{{namespace}}/{{pod}}"),
        width=8,
    ),
    stat(
        "DataLoader worker processes",
        "The pod's DataLoader worker processes the intercept sees.",
        "none",
        Query(per_pod("sum", selector(S, "alnair_python_dataloader_worker", NODE)), "{{namespace}}/{{pod}}"),
        width=8,
    ),
)

DASHBOARD = Dashboard(
    "alnair-training",
    "Alnair / Training",
    "Per pod: training steps and samples per second, the data stall, phases and counters from the Python intercept.",
    (v.DATASOURCE, v.NODE, v.INSTANCE, v.namespace("python"), v.pod("python")),
    (THROUGHPUT, PHASES, PROGRESS),
)
