"""The alert rules. Their thresholds, `for:` durations and severities live in one table, DEFAULTS; groups() takes
overrides of it (the Helm chart passes the user's values), so the same code renders the committed rules file and
a chart's. Every alert has a summary, a description and an action: what to do when it fires."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from . import recording as r
from .promql import CACHE_JOB, CLUSTER_SLOTS, RULES, by, rate, ratio, with_node

DEFAULTS: dict[str, dict[str, object]] = {
    "AlnairExporterDown": {"for": "2m", "severity": "critical"},
    "AlnairCollectorFailing": {"for": "5m", "severity": "warning"},
    "AlnairGpuMissing": {"lookback": "1h", "for": "0s", "severity": "critical"},
    "AlnairGpuXidError": {"threshold": 0, "window": "10m", "for": "0s", "severity": "critical"},
    "AlnairGpuEccUncorrectable": {"threshold": 0, "window": "10m", "for": "0s", "severity": "critical"},
    "AlnairGpuRowRemapFailed": {"for": "0s", "severity": "critical"},
    "AlnairGpuRowRemapPending": {"for": "0s", "severity": "warning"},
    "AlnairGpuHardwareThrottling": {
        "reasons": "hw_thermal_slowdown|hw_power_brake_slowdown",
        "for": "2m",
        "severity": "warning",
    },
    "AlnairGpuTemperatureHigh": {"threshold": 85, "for": "5m", "severity": "warning"},
    "AlnairProcessNearMemoryLimit": {"threshold": 0.9, "for": "5m", "severity": "warning"},
    "AlnairAllocationsDenied": {"threshold": 0, "for": "0s", "severity": "warning"},
    "AlnairComputeThrottled": {"threshold": 0.5, "for": "15m", "severity": "info"},
    "AlnairTrainingDataStallHigh": {"threshold": 0.3, "for": "15m", "severity": "warning"},
    "AlnairCacheHitRatioLow": {"threshold": 0.5, "for": "30m", "severity": "warning"},
    "AlnairCacheJobStarved": {"threshold": 0.3, "for": "15m", "severity": "warning"},
    "AlnairRedisDown": {"for": "2m", "severity": "critical"},
    "AlnairRedisClusterNodeDown": {"for": "2m", "severity": "warning"},
    "AlnairRedisClusterStateNotOk": {"for": "2m", "severity": "critical"},
    "AlnairRedisClusterSlotsUncovered": {"for": "2m", "severity": "critical"},
    "AlnairRedisClusterNodeNearMaxMemory": {"threshold": 0.9, "for": "10m", "severity": "warning"},
}


@dataclass(frozen=True)
class Alert:
    expr: str
    summary: str
    description: str
    action: str


def label(name: str) -> str:
    return f"{{{{ $labels.{name} }}}}"


def value(decimals: int = 0) -> str:
    return f'{{{{ printf "%.{decimals}f" $value }}}}'


PERCENT = "{{ $value | humanizePercentage }}"
GPU = f"GPU {label('gpu')} ({label('uuid')}) on {label('node')}"
PROCESS = (
    f"process {label('pid')} of pod {label('namespace')}/{label('pod')} (container {label('container')}) "
    f"on {label('node')}"
)


def exporter_down(t) -> Alert:
    return Alert(
        f'up{{job="{t["job"]}"}} == 0',
        f"Alnair exporter {label('instance')} is down",
        f"Prometheus has failed to scrape the exporter {label('instance')} of job {label('job')} for {t['for']}: that "
        "node's GPU, CUDA, training and cache metrics are missing.",
        "Look at the exporter's DaemonSet pod on that node (kubectl get pods -o wide, kubectl logs): a bad flag or a "
        "busy "
        "port exits with one line saying why. Check that Prometheus reaches port 9876 (network policy, TLS and basic "
        "auth settings).",
    )


def collector_failing(t) -> Alert:
    return Alert(
        with_node(RULES, "alnair_exporter_collector_success == 0 or alnair_exporter_collector_refused == 1"),
        f"Collector {label('collector')} on {label('node')} is failing",
        f"For {t['for']} the collector {label('collector')} of {label('instance')} has failed its samples, been "
        "unavailable, stale (no sample finished within max(3 intervals, 30 s)) or refused: its metrics are missing or "
        "old.",
        "Open the exporter's / page on that node: it shows each collector's state and last error; the log says the "
        "same. "
        "nvml unavailable: no driver or GPU visible to the pod. cache: give --collector.cache.redis-url. Stale: the "
        "source hangs (a stuck driver call); /healthz is 503 meanwhile. Refused: a plug-in emits a family another "
        "collector owns.",
    )


def gpu_missing(t) -> Alert:
    return Alert(
        f"{r.GPUS} < max_over_time({r.GPUS}[{t['lookback']}])",
        f"{label('node')} sees fewer GPUs than in the last {t['lookback']}",
        f"GPUs answering NVML on {label('node')} ({label('instance')}): {value()}, fewer than at some time in the last "
        f"{t['lookback']}. A GPU fell off the bus, fails every query, or the driver lost it.",
        "Run nvidia-smi on the node and read dmesg for XID 79 (fallen off the bus) or driver errors. Drain the node "
        "(kubectl drain), reset or reseat the GPU, and replace it if it drops out again.",
    )


def gpu_xid_error(t) -> Alert:
    return Alert(
        with_node(RULES, f"increase(alnair_nvml_xid_errors_total[{t['window']}]) > {t['threshold']}"),
        f"XID errors on {GPU}",
        f"{GPU} reported {value()} XID critical errors in the last {t['window']}. Its XID code "
        "(alnair_nvml_xid_errors_by_code_total, on the Node GPUs dashboard) says what failed.",
        "Look the code up in NVIDIA's XID catalog. 13, 31 and 43 usually come from the application: read the pod's "
        "logs. 48, 63, 64, 74, 79, 92, 94, 95 and most others are hardware or driver faults: drain the node, reset the "
        "GPU, and replace it if the error comes back.",
    )


def gpu_ecc_uncorrectable(t) -> Alert:
    return Alert(
        with_node(
            RULES, f'increase(alnair_nvml_ecc_errors_total{{type="uncorrected"}}[{t["window"]}]) > {t["threshold"]}'
        ),
        f"Uncorrectable ECC errors on {GPU}",
        f"{GPU} counted {value()} uncorrected ECC errors in the last {t['window']}: data in its memory was corrupted, "
        "and the processes using it may have crashed or computed wrong results.",
        "Drain the node and reset the GPU to retire or remap the failing memory (see remapped rows on the Node GPUs "
        "dashboard); rerun the affected jobs from a checkpoint. Replace the GPU if the errors return.",
    )


def gpu_row_remap_failed(t) -> Alert:
    return Alert(
        with_node(RULES, "alnair_nvml_remapped_rows_failed == 1"),
        f"Row remapping failed on {GPU}",
        f"{GPU} could not remap a memory row with uncorrectable errors: it has no spare rows left and will keep "
        "failing.",
        "Drain the node and replace the GPU (RMA).",
    )


def gpu_row_remap_pending(t) -> Alert:
    return Alert(
        with_node(RULES, "alnair_nvml_remapped_rows_pending == 1"),
        f"A row remapping is pending on {GPU}",
        f"{GPU} has a memory row with errors waiting to be remapped, which happens at its next reset; until then the "
        "row may keep producing errors.",
        "Drain the node and reset the GPU (nvidia-smi -r, or reboot the node) at the next opportunity.",
    )


def gpu_hardware_throttling(t) -> Alert:
    return Alert(
        with_node(RULES, f'alnair_nvml_throttle_reason_active{{reason=~"{t["reasons"]}"}} == 1'),
        f"{GPU} is throttled by {label('reason')}",
        f"For {t['for']} the hardware has held the clocks of {GPU} down ({label('reason')}): it runs at half its "
        "clocks "
        "or less.",
        "hw_thermal_slowdown: check the node's fans, airflow and inlet temperature, and the GPU's temperature beside "
        "its "
        "neighbours'. hw_power_brake_slowdown: the power supply asserted the brake: check the PSUs and the rack's "
        "power "
        "budget.",
    )


def gpu_temperature_high(t) -> Alert:
    return Alert(
        with_node(RULES, f"alnair_nvml_temperature_celsius > {t['threshold']}"),
        f"{GPU} is at {value()} °C",
        f"{GPU} has been above {t['threshold']} °C for {t['for']}; hot GPUs slow their clocks down and age faster.",
        "Check the node's fans, airflow and the data centre's cooling, and compare with the node's other GPUs; move "
        "work off the node if it keeps rising.",
    )


def near_memory_limit(t) -> Alert:
    return Alert(
        f"{r.MEMORY_OF_LIMIT} > {t['threshold']}",
        f"Pod {label('namespace')}/{label('pod')} uses {PERCENT} of its GPU memory limit",
        f"For {t['for']} {PROCESS} has held more than {t['threshold']} of its ALNAIR_MEMORY_LIMIT on GPU "
        f"{label('gpu')}; "
        "allocations past the limit are denied with an out-of-memory error.",
        "Raise the pod's ALNAIR_MEMORY_LIMIT (and the GPU memory it requests), or make it use less: a smaller batch, "
        "activation checkpointing, mixed precision.",
    )


def allocations_denied(t) -> Alert:
    return Alert(
        f"{r.process_rate('alnair_cuda_allocations_denied_total')} > {t['threshold']}",
        f"Pod {label('namespace')}/{label('pod')} had GPU allocations denied by its memory limit",
        f"The intercept denied {value(3)} allocations per second ({RULES.window} mean) of {PROCESS} on GPU "
        f"{label('gpu')}: they would have passed its ALNAIR_MEMORY_LIMIT, and the program saw out-of-memory errors.",
        "Raise the pod's ALNAIR_MEMORY_LIMIT or make the program use less GPU memory; the GPU sharing dashboard shows "
        "its memory against the limit.",
    )


def compute_throttled(t) -> Alert:
    return Alert(
        f"{r.process_rate('alnair_cuda_throttled_seconds_total')} > {t['threshold']}",
        f"Pod {label('namespace')}/{label('pod')} is held back by its compute limit {PERCENT} of the time",
        f"For {t['for']} {PROCESS} has waited for its compute limit (cap or share) on GPU {label('gpu')} more than "
        f"{t['threshold']} of the time: it wants more of the GPU than it may use.",
        "If the job runs too slowly, raise its ALNAIR_COMPUTE_LIMIT (cap) or ALNAIR_COMPUTE_SHARE (share), or give it "
        "a GPU of its own; if the limit is intended, silence this alert for its namespace.",
    )


def data_stall_high(t) -> Alert:
    return Alert(
        f"{r.POD_DATA_STALL} > {t['threshold']}",
        f"Training in {label('namespace')}/{label('pod')} waits for data {PERCENT} of its step time",
        f"For {t['for']} the training loops of pod {label('namespace')}/{label('pod')} have spent more than "
        f"{t['threshold']} of their step time waiting for the next batch: the GPU is starved by its input.",
        "Raise the DataLoader's num_workers and prefetch_factor, pin memory, move decoding off the training process, "
        "or "
        "cache the dataset in Redis (alnair.datacache); check the node's CPU on the Node GPUs dashboard.",
    )


def cache_hit_ratio_low(t) -> Alert:
    return Alert(
        f"{r.DATASET_HIT_RATIO} < {t['threshold']}",
        f"Dataset {label('dataset')} is served from the cache for only {PERCENT} of its fetches",
        f"For {t['for']} fewer than {t['threshold']} of the samples of dataset {label('dataset')} fetched through "
        f"{label('redis')} came from Redis: the rest were read from the origin.",
        "A first epoch is all misses. Otherwise look at evictions and memory used against maxmemory on the Dataset "
        "cache dashboard: raise Redis's maxmemory, or make sure its policy evicts (allkeys-lru) rather than refusing "
        "writes.",
    )


def cache_job_starved(t) -> Alert:
    stall, consumer, refused = (
        by(CACHE_JOB, "sum", rate(RULES, f"alnair_cache_job_{name}", CACHE_JOB))
        for name in ("stall_seconds_total", "consumer_seconds_total", "rejected_total")
    )
    return Alert(
        f"{ratio(stall, consumer)} > {t['threshold']} and on (redis, job_name) {refused} > 0",
        f"Job {label('job_name')} waits for data {PERCENT} of its loop and the cache refuses its samples",
        f"For {t['for']} the consumers of job {label('job_name')} have spent more than {t['threshold']} of their loop "
        f"waiting for batches while the space policy of {label('redis')} refused to cache the samples it missed: over "
        "its "
        "quota or its namespace's, or no room its value (priority x stall per miss x reads per second per byte) could "
        "take from a job of less value.",
        "Open the Space row of the Dataset cache dashboard: who holds the space, and each job's value. Raise the job's "
        "priority (ALNAIR_CACHE_PRIORITY, within its namespace's max_priority), its quota (ALNAIR_CACHE_QUOTA) or its "
        "namespace's (alnair:policy), or the policy's capacity with Redis's maxmemory; or accept it, if the jobs "
        "holding the space matter more.",
    )


def redis_down(t) -> Alert:
    return Alert(
        "alnair_cache_up == 0",
        f"Redis {label('redis')} is down",
        f"For {t['for']} the cache collector has not reached {label('redis')}: jobs using the dataset cache read their "
        "samples from the origin (fallbacks) meanwhile.",
        "Check the Redis pod or service and its logs, the URL given to --collector.cache.redis-url, and network "
        "policies "
        "between the exporter, the jobs and Redis.",
    )


CLUSTER_NODE = f"node {label('node')} of the Redis Cluster {label('redis')}"


def redis_cluster_node_down(t) -> Alert:
    return Alert(
        "alnair_cache_node_up == 0",
        f"Redis Cluster node {label('node')} of {label('redis')} is down",
        f"For {t['for']} {CLUSTER_NODE} has not answered the cache collector. A primary's replica takes over its "
        "slots once the cluster's node timeout passes; until then, or with no replica, jobs read the samples of its "
        "slots from the origin (fallbacks). A replica down leaves its primary without a standby.",
        "Check the node's pod or host and its log, and CLUSTER NODES from another node (fail or pfail flags). "
        "Restart it: it rejoins, as a replica of the promoted node if it was a primary. The Cluster row of the "
        "Dataset cache dashboard shows which nodes answer.",
    )


def redis_cluster_state_not_ok(t) -> Alert:
    return Alert(
        "alnair_cache_cluster_state_ok == 0",
        f"Redis Cluster {label('redis')} says cluster_state:fail",
        f"For {t['for']} CLUSTER INFO of {label('redis')} has said cluster_state:fail: a primary is down with no "
        "replica to promote, or the primaries lost their majority. Its nodes refuse commands (all of them, unless "
        "cluster-require-full-coverage is no), and jobs read their samples from the origin.",
        "Run redis-cli --cluster check HOST:PORT against a live node: bring back the failed primaries (or their "
        "replicas), and assign slots left without a node (redis-cli --cluster fix).",
    )


def redis_cluster_slots_uncovered(t) -> Alert:
    return Alert(
        f"alnair_cache_cluster_slots_covered < {CLUSTER_SLOTS}",
        f"Redis Cluster {label('redis')} serves {value()} of its {CLUSTER_SLOTS} hash slots",
        f"For {t['for']} the cluster {label('redis')} has served only {value()} of {CLUSTER_SLOTS} hash slots "
        "(cluster_slots_ok): samples whose keys hash to the others are read from the origin (fallbacks), and "
        "writes to them fail.",
        "Run redis-cli --cluster check HOST:PORT: a primary failed without a replica to promote (restart it), or "
        "slots were never assigned or were left migrating (redis-cli --cluster fix).",
    )


def redis_cluster_node_near_max_memory(t) -> Alert:
    return Alert(
        f"{r.CACHE_NODE_MEMORY} > {t['threshold']}",
        f"Redis Cluster node {label('node')} of {label('redis')} uses {PERCENT} of its maxmemory",
        f"For {t['for']} {CLUSTER_NODE} has used more than {t['threshold']} of its maxmemory: it evicts samples "
        "(allkeys-lru) or refuses writes (noeviction), and the hit ratio of the datasets on its slots falls.",
        "Raise the nodes' maxmemory, or add shards (redis-cli --cluster add-node, then --cluster rebalance). One node "
        "far above the others: its slots hold more (redis-cli --cluster rebalance); the Cluster row of the Dataset "
        "cache dashboard shows each node's memory, keys and evictions.",
    )


GROUPS: dict[str, dict[str, Callable[[Mapping], Alert]]] = {
    "alnair-exporter": {"AlnairExporterDown": exporter_down, "AlnairCollectorFailing": collector_failing},
    "alnair-gpu": {
        "AlnairGpuMissing": gpu_missing,
        "AlnairGpuXidError": gpu_xid_error,
        "AlnairGpuEccUncorrectable": gpu_ecc_uncorrectable,
        "AlnairGpuRowRemapFailed": gpu_row_remap_failed,
        "AlnairGpuRowRemapPending": gpu_row_remap_pending,
        "AlnairGpuHardwareThrottling": gpu_hardware_throttling,
        "AlnairGpuTemperatureHigh": gpu_temperature_high,
    },
    "alnair-workloads": {
        "AlnairProcessNearMemoryLimit": near_memory_limit,
        "AlnairAllocationsDenied": allocations_denied,
        "AlnairComputeThrottled": compute_throttled,
        "AlnairTrainingDataStallHigh": data_stall_high,
    },
    "alnair-cache": {
        "AlnairCacheHitRatioLow": cache_hit_ratio_low,
        "AlnairCacheJobStarved": cache_job_starved,
        "AlnairRedisDown": redis_down,
        "AlnairRedisClusterNodeDown": redis_cluster_node_down,
        "AlnairRedisClusterStateNotOk": redis_cluster_state_not_ok,
        "AlnairRedisClusterSlotsUncovered": redis_cluster_slots_uncovered,
        "AlnairRedisClusterNodeNearMaxMemory": redis_cluster_node_near_max_memory,
    },
}


def settings(overrides: Mapping[str, Mapping[str, object]] | None = None) -> dict[str, dict[str, object]]:
    """DEFAULTS with `overrides` ({alert: {setting: value}}) laid over it; a name or setting it does not have is an
    error rather than silently ignored."""
    merged = {name: dict(values) for name, values in DEFAULTS.items()}
    for name, values in (overrides or {}).items():
        if name not in merged:
            raise ValueError(f"no alert named {name!r}: {', '.join(DEFAULTS)}")
        unknown = set(values) - set(merged[name])
        if unknown:
            raise ValueError(
                f"{name} has no setting {', '.join(sorted(map(repr, unknown)))}: {', '.join(merged[name])}"
            )
        merged[name].update(values)
    return merged


def groups(overrides: Mapping[str, Mapping[str, object]] | None = None, job: str = "alnair") -> list[dict]:
    """The alert rule groups as a rules file holds them; `job` is the Prometheus job that scrapes the exporters."""
    chosen = settings(overrides)
    return [
        {
            "name": group,
            "rules": [rule(name, make({**chosen[name], "job": job}), chosen[name]) for name, make in alerts.items()],
        }
        for group, alerts in GROUPS.items()
    ]


def rule(name: str, a: Alert, t: Mapping[str, object]) -> dict:
    return {
        "alert": name,
        "expr": a.expr,
        "for": t["for"],
        "labels": {"severity": t["severity"]},
        "annotations": {"summary": a.summary, "description": a.description, "action": a.action},
    }
