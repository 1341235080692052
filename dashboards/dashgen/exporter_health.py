"""Exporter health: whether each exporter is scraped and each of its collectors samples, the shared-memory
segments it reads, skips and reclaims, the GPUs NVML answers for, and the exporter's own CPU, memory and files."""

from __future__ import annotations

from . import variables as v
from .model import Dashboard, Query, row, states, table, timeseries
from .promql import DASHBOARD as S, NODE, rate, selector, with_node

WRITERS = ("cuda", "python")  # the collectors that read shared-memory segments


def on_node(metric: str, legend: str) -> Query:
    return Query(with_node(S, selector(S, metric, NODE)), legend)


EXPORTER = row(
    "Exporter",
    states(
        "Exporter scraped",
        "Prometheus's up for each exporter of the chosen nodes: down means its last scrape "
        "failed (AlnairExporterDown after a while).",
        Query(selector(S, "up", NODE), "{{instance}}"),
        off=("down", "red"),
        on=("up", "green"),
    ),
    table(
        "Versions",
        "Each exporter's Alnair and Python versions.",
        "none",
        on_node("alnair_exporter_build_info", ""),
        hidden_columns=("Time", "job", "__name__", "Value"),
    ),
)

COLLECTORS = row(
    "Collectors",
    states(
        "Collector success",
        "Whether each collector's last sample succeeded and is fresh. Failing means it "
        "erred, is unavailable (no GPU, no Redis configured) or hung; the exporter's / page says why "
        "(AlnairCollectorFailing).",
        on_node("alnair_exporter_collector_success", "{{node}} {{collector}}"),
        off=("failing", "red"),
        on=("ok", "green"),
    ),
    states(
        "Collectors refused",
        "A collector is refused when it emits a family the exporter or an earlier collector "
        "already emits: its series are not served.",
        on_node("alnair_exporter_collector_refused", "{{node}} {{collector}}"),
        off=("served", "green"),
        on=("refused", "red"),
    ),
    timeseries(
        "Sample duration",
        "How long each collector's last sample took.",
        "s",
        on_node("alnair_exporter_collector_duration_seconds", "{{node}} {{collector}}"),
        min=0,
    ),
    timeseries(
        "Time since last success",
        "Seconds since each collector last sampled successfully (absent for one that never has).",
        "s",
        Query(
            with_node(S, f"time() - {selector(S, 'alnair_exporter_collector_last_success_timestamp_seconds', NODE)}"),
            "{{node}} {{collector}}",
        ),
        min=0,
    ),
)

SEGMENTS = row(
    "Shared-memory segments",
    timeseries(
        "Live and lingering segments",
        "Segments of live writers, and the last records of exited ones still served for --shm.linger.",
        "none",
        *(
            on_node(f"alnair_{kind}_segments{suffix}", f"{{{{node}}}} {kind} {label}")
            for kind in WRITERS
            for suffix, label in (("", "live"), ("_lingering", "lingering"))
        ),
        min=0,
    ),
    timeseries(
        "Segments skipped",
        "Segments the last sample skipped, by reason (docs/shm-abi.md lists them): "
        "anything but 0 is a writer of another version, a torn write retried out, or a hostile file.",
        "none",
        *(on_node(f"alnair_{kind}_segments_skipped", f"{{{{node}}}} {kind} {{{{reason}}}}") for kind in WRITERS),
        min=0,
    ),
    timeseries(
        "Directory sweep",
        "Samples the last whole sweep of the segment directory took (1 unless it holds "
        "more than a sample lists: new writers wait that many), and samples per second stopped at a bound "
        "(docs/security.md).",
        "none",
        *(on_node(f"alnair_{kind}_segments_sweep_passes", f"{{{{node}}}} {kind} sweep samples") for kind in WRITERS),
        *(
            Query(
                with_node(S, rate(S, f"alnair_{kind}_segments_scan_bounded_total", NODE)),
                f"{{{{node}}}} {kind} bounded by {{{{bound}}}}",
            )
            for kind in WRITERS
        ),
        min=0,
    ),
    timeseries(
        "Segments reclaimed",
        "Dead writers' segments removed per second.",
        "ops",
        *(
            Query(with_node(S, rate(S, f"alnair_{kind}_segments_reclaimed_total", NODE)), f"{{{{node}}}} {kind}")
            for kind in WRITERS
        ),
        min=0,
    ),
    timeseries(
        "Identity claims ignored",
        "Per second, writers whose claimed pod or container contradicted their cgroup "
        "(docs/security.md): counted once per process.",
        "ops",
        *(
            Query(with_node(S, rate(S, f"alnair_{kind}_identity_claims_ignored_total", NODE)), f"{{{{node}}}} {kind}")
            for kind in WRITERS
        ),
        min=0,
    ),
)

GPUS = row(
    "GPUs",
    states(
        "NVML and XID watch per GPU",
        "Whether NVML answered for each GPU in the last sample, and whether its XID "
        "critical errors are being watched (registering can fail, or be unsupported).",
        Query(with_node(S, selector(S, "alnair_nvml_up", NODE)), "{{node}} GPU {{gpu}} NVML"),
        Query(with_node(S, selector(S, "alnair_nvml_xid_watch_up", NODE)), "{{node}} GPU {{gpu}} XID watch"),
        off=("down", "red"),
        on=("up", "green"),
        width=24,
    ),
)

PROCESS = row(
    "Exporter process",
    timeseries(
        "CPU",
        "CPU the exporter process uses, as a share of one core.",
        "percentunit",
        Query(with_node(S, rate(S, "process_cpu_seconds_total", NODE)), "{{node}}"),
        min=0,
        width=6,
    ),
    timeseries(
        "Resident memory",
        "The exporter process's resident memory.",
        "bytes",
        on_node("process_resident_memory_bytes", "{{node}}"),
        min=0,
        width=6,
    ),
    timeseries(
        "Open file descriptors",
        "File descriptors the exporter holds, and its limit.",
        "none",
        on_node("process_open_fds", "{{node}} open"),
        on_node("process_max_fds", "{{node}} limit"),
        min=0,
        width=6,
    ),
    timeseries(
        "Scrapes rejected",
        "Scrapes per second refused with 503 because --web.max-requests were in flight "
        "(never those from --web.priority-sources).",
        "reqps",
        Query(with_node(S, rate(S, "alnair_exporter_scrapes_rejected_total", NODE)), "{{node}}"),
        min=0,
        width=6,
    ),
)

DASHBOARD = Dashboard(
    "alnair-exporter-health",
    "Alnair / Exporter health",
    "Whether every exporter is scraped and every collector samples; segments read, skipped and reclaimed; the "
    "exporter's own CPU, memory and files.",
    (v.DATASOURCE, v.FLEET, v.INSTANCE),
    (EXPORTER, COLLECTORS, SEGMENTS, GPUS, PROCESS),
)
