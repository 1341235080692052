"""What the collectors that read segments share: per-process identity families and the directory's self-metrics."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from alnair.abi import layout
from alnair.abi.segments import SCAN_BOUNDS, SKIP_REASONS, ParsedSegment, SegmentDirectory
from alnair.exporter.plugin import ExpositionBuilder, LabelSets

from ..pods.identity import PodIdentity


def process_families(
    out: ExpositionBuilder,
    kind: str,
    processes: list[ParsedSegment],
    labels: LabelSets,
    boot_seconds: float,
    clock_ticks: int,
    identity: PodIdentity,
) -> None:
    """alnair_<kind>_process_info, _process_start_time_seconds, _last_update_timestamp_seconds per process, and
    _process_exited_timestamp_seconds for those whose last record lingers after they exited."""
    info, started, updated, exited = [], [], [], []
    identity.retain((p.segment.holder_pid, p.segment.header.start_time_ticks) for p in processes)
    for p in processes:
        s, h = p.segment, p.segment.header
        pid = s.pid_label
        # The cgroup of the lock's holder decides; a claim counts only where it cannot (identity.py).
        who = identity.of_pid(
            s.holder_pid if s.holder_pid > 0 else None,
            s.pod_uid,
            s.container_id,
            h.start_time_ticks,
            alive=not s.exited,
        )
        info.append(
            (
                labels.get(
                    (s.name, pid, "info", who),
                    {"pid": pid, "comm": s.comm, **who.labels(), "pid_namespace": str(h.pid_namespace_inode)},
                ),
                1,
            )
        )
        pid_only = labels.get((s.name, pid), {"pid": pid})
        started.append((pid_only, boot_seconds + h.start_time_ticks / clock_ticks))
        updated.append((pid_only, h.update_time_ns / 1e9))
        if s.exited:
            exited.append((pid_only, s.ended_unix))
    out.family(
        f"alnair_{kind}_process_info", "gauge", f"Identity of a process publishing {kind} counters; join on pid.", info
    )
    out.family(
        f"alnair_{kind}_process_start_time_seconds",
        "gauge",
        "Start time of the process, seconds since the epoch.",
        started,
    )
    out.family(
        f"alnair_{kind}_last_update_timestamp_seconds",
        "gauge",
        "When the process last published its counters.",
        updated,
    )
    out.family(
        f"alnair_{kind}_process_exited_timestamp_seconds",
        "gauge",
        "When a process that has exited last published: its series hold its final counters while they linger "
        "(--shm.linger).",
        exited,
    )
    out.family(
        f"alnair_{kind}_identity_claims_ignored",
        "counter",
        "Writers whose claimed pod or container contradicted their cgroup, which was believed instead.",
        [("", identity.claims_ignored)],
    )


def directory_metrics(directory: SegmentDirectory, processes: list[ParsedSegment]) -> Iterator[Metric]:
    """alnair_<kind>_segments*: named by kind so each collector owns its metric names."""
    prefix = f"alnair_{layout.KIND_NAMES[directory.kind]}_segments"
    lingering = sum(p.segment.exited for p in processes)
    yield GaugeMetricFamily(prefix, "Live writer segments read in the last sample.", value=len(processes) - lingering)
    yield GaugeMetricFamily(
        f"{prefix}_lingering", "Segments of exited writers still served (--shm.linger).", value=lingering
    )
    skipped = GaugeMetricFamily(
        f"{prefix}_skipped",
        "Segments skipped, by reason: among writers seen alive in the last sample and in the last whole sweep.",
        labels=["reason"],
    )
    for reason in SKIP_REASONS:
        skipped.add_metric([reason], directory.skipped[reason])
    yield skipped
    yield GaugeMetricFamily(
        f"{prefix}_sweep_passes",
        "Samples the last whole sweep of the directory took: new writers "
        "are found within that many (at once when the arrival watcher sees them).",
        value=directory.sweep_passes,
    )
    bounded = CounterMetricFamily(
        f"{prefix}_scan_bounded",
        "Samples whose scan of the directory stopped at a bound: "
        "names listed, files opened, junk remembered, temp files checked.",
        labels=["bound"],
    )
    for bound in SCAN_BOUNDS:
        bounded.add_metric([bound], directory.scan_bounded[bound])
    yield bounded
    yield CounterMetricFamily(
        f"{prefix}_reclaimed", "Segments of dead writers removed by the exporter.", value=directory.reclaimed
    )


def boot_time_seconds(procfs: str) -> float:
    """The kernel's boot time as a timestamp, to turn start ticks into one. /proc/stat's btime is cut to whole
    seconds, which put every start time up to 1 s early (0.66 s on the VM that showed it, a job's duration as
    much too long); the wall clock less CLOCK_BOOTTIME is exact. btime is kept where the two disagree by more
    than its cut: that procfs sees another clock (a time namespace)."""
    with open(os.path.join(procfs, "stat"), "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                btime = float(line.split()[1])
                exact = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
                return exact if -0.1 <= exact - btime < 1.1 else btime
    raise OSError(f"no btime in {procfs}/stat")
