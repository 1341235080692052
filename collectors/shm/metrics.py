"""Self-metrics of a segment directory, shared by the collectors that read segments."""
from __future__ import annotations

import os
from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from . import layout
from .segments import SKIP_REASONS, SegmentDirectory


def directory_metrics(directory: SegmentDirectory, live: int) -> Iterator[Metric]:
    """alnair_<kind>_segments*: named by kind so each collector owns its metric names."""
    prefix = f"alnair_{layout.KIND_NAMES[directory.kind]}_segments"
    yield GaugeMetricFamily(prefix, "Live writer segments read in the last sample.", value=live)
    skipped = GaugeMetricFamily(
        f"{prefix}_skipped",
        "Segments skipped in the last sample: truncated, foreign magic or ABI version, garbage, torn.",
        labels=["reason"],
    )
    for reason in SKIP_REASONS:
        skipped.add_metric([reason], directory.skipped[reason])
    yield skipped
    yield CounterMetricFamily(f"{prefix}_reclaimed", "Segments of dead writers removed by the exporter.", value=directory.reclaimed)


def boot_time_seconds(procfs: str) -> float:
    """The kernel's boot time (btime in /proc/stat), to turn start ticks into a timestamp."""
    with open(os.path.join(procfs, "stat"), "rb") as f:
        for line in f:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError(f"no btime in {procfs}/stat")
