"""What a scrape returns: the collectors' latest snapshots plus the exporter's own metrics.

The collectors' part changes only when a sample finishes, so it is joined (and
gzipped) once per change; only the small self-metrics part is built per scrape.
A gzip stream may hold several members, so the two compressed parts concatenate.
Each family name belongs to one collector: a join refuses, for good, a collector that
emits a family the exporter or a collector before it in the registry's order emits,
so two collectors never repeat a HELP/TYPE and Prometheus never rejects the scrape.
"""

from __future__ import annotations

import gzip
import platform
import threading
from collections.abc import Iterator

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from alnair.commandline import version

from .exposition import family_names, render
from .sampler import CollectorRunner, Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
EXPORTER = "the exporter"  # owner of the self-metrics' family names


class ScrapeAssembler:
    def __init__(self, runners: list[CollectorRunner], node_name: str):
        self.runners = runners
        self.node_name = node_name
        self.rejected_scrapes = 0
        self._process = ProcessCollector(registry=None)
        self._lock = threading.Lock()
        self._cache_key: tuple | None = None
        self._cached_plain = b""
        self._cached_gzip = b""
        self._identity = render(self._identity_metrics())  # never changes: rendered once
        self._own_families = family_names(render(self._own_metrics()) + self._identity)

    def count_rejected_scrape(self) -> None:
        with self._lock:
            self.rejected_scrapes += 1

    def render(self, compress: bool) -> bytes:
        collectors_part = self._collectors_part(compress)
        own = render(self._own_metrics()) + self._identity
        return collectors_part + (gzip.compress(own, compresslevel=1) if compress else own)

    def _collectors_part(self, compress: bool) -> bytes:
        fresh = [(r, r.snapshot, not r.hung()) for r in self.runners]
        key = tuple((s.generation, ok) for _, s, ok in fresh)
        with self._lock:
            if key != self._cache_key:
                self._cache_key = key
                self._cached_plain = self._join(fresh)
                self._cached_gzip = b""
            if compress and not self._cached_gzip:
                self._cached_gzip = gzip.compress(self._cached_plain, compresslevel=1)
            return self._cached_gzip if compress else self._cached_plain

    def _join(self, fresh: list[tuple[CollectorRunner, Snapshot, bool]]) -> bytes:
        """The fresh snapshots' text, each family from its first claimant (the exporter, then runners in
        order); a hung collector keeps the names of its last sample, so they stay its own."""
        owners = dict.fromkeys(self._own_families, EXPORTER)
        parts = []
        for runner, snapshot, ok in fresh:
            if runner.refusal:
                continue
            clash = min((name for name in snapshot.families if name in owners), default=None)
            if clash is not None:
                runner.refuse(f"it emits {clash}, which {owners[clash]} emits")
                continue
            owners.update(dict.fromkeys(snapshot.families, f"collector {runner.name}"))
            if ok:
                parts.append(snapshot.text)
        return b"".join(parts)

    def _own_metrics(self) -> Iterator[Metric]:
        duration = GaugeMetricFamily(
            "alnair_exporter_collector_duration_seconds",
            "Duration of the collector's last sample.",
            labels=["collector"],
        )
        success = GaugeMetricFamily(
            "alnair_exporter_collector_success",
            "1 if the collector's last sample succeeded and is fresh.",
            labels=["collector"],
        )
        last = GaugeMetricFamily(
            "alnair_exporter_collector_last_success_timestamp_seconds",
            "When the collector last sampled successfully.",
            labels=["collector"],
        )
        refused = GaugeMetricFamily(
            "alnair_exporter_collector_refused",
            "1 if the collector is not served: it emits a family another collector or the exporter emits.",
            labels=["collector"],
        )
        for runner in self.runners:
            snapshot = runner.snapshot
            duration.add_metric([runner.name], snapshot.duration_seconds)
            success.add_metric([runner.name], float(snapshot.success and not runner.hung() and not runner.refusal))
            refused.add_metric([runner.name], float(bool(runner.refusal)))
            if snapshot.last_success_unix is not None:
                last.add_metric([runner.name], snapshot.last_success_unix)
        yield from (duration, success, last, refused)
        rejected = CounterMetricFamily(
            "alnair_exporter_scrapes_rejected", "Scrapes refused because --web.max-requests were in flight."
        )
        rejected.add_metric([], self.rejected_scrapes)
        yield rejected
        yield from self._process.collect()

    def _identity_metrics(self) -> Iterator[Metric]:
        build = InfoMetricFamily("alnair_exporter_build", "Exporter version.")
        build.add_metric([], {"version": version(), "python_version": platform.python_version()})
        yield build
        node = InfoMetricFamily("alnair_node", "The node this exporter runs on.")
        node.add_metric([], {"node": self.node_name})
        yield node
