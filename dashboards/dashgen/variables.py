"""The dashboards' template variables. `instance` (hidden) follows `node`: the exporter's `alnair_node_info{node}`
names its node and Prometheus's `instance` label the exporter, so every query filters on `instance` alone."""

from __future__ import annotations

from collections.abc import Sequence

from .model import Variable

DATASOURCE = Variable("datasource", "Data source")  # dashboard-linter's name and label for a single data source
# The per-node dashboards open at one node: on a fleet, "All" draws thousands of series no one can read, and
# bench/dashboard_queries.py measured its 6 h range queries at 5-35 s on 1,000 GPUs (docs/benchmarks.md).
# Exporter health opens at All: a few series per node.
NODE = Variable("node", "Node", "label_values(alnair_node_info, node)", all_value=".*", starts_at_all=False)
FLEET = Variable("node", "Node", "label_values(alnair_node_info, node)", all_value=".*")
# Its "All" is the values joined (no all_value): with node=X that is X's exporters, where ".*" would be all of them.
INSTANCE = Variable("instance", "Exporter", 'label_values(alnair_node_info{node=~"$node"}, instance)', hidden=True)
GPU = Variable("gpu", "GPU", 'label_values(alnair_nvml_gpu_info{instance=~"$instance"}, uuid)', all_value=".*")
REDIS = Variable("redis", "Redis", "label_values(alnair_cache_up, redis)", all_value=".*")
DATASET = Variable(
    "dataset", "Dataset", 'label_values(alnair_cache_dataset_samples{redis=~"$redis"}, dataset)', all_value=".*"
)
CACHE_JOB = Variable(
    "cache_job", "Job", 'label_values(alnair_cache_job_hits_total{redis=~"$redis"}, job_name)', all_value=".*"
)


def _process_info(collectors: Sequence[str]) -> str:
    return f'{{__name__=~"alnair_({"|".join(collectors)})_process_info", instance=~"$instance"'


def namespace(*collectors: str) -> Variable:
    """Namespaces of the processes the given collectors see (their `_process_info` series)."""
    return Variable("namespace", "Namespace", f"label_values({_process_info(collectors)}}}, namespace)", all_value=".*")


def pod(*collectors: str) -> Variable:
    return Variable(
        "pod", "Pod", f'label_values({_process_info(collectors)}, namespace=~"$namespace"}}, pod)', all_value=".*"
    )
