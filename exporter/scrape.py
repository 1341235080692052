"""What a scrape returns: the collectors' latest snapshots plus the exporter's own metrics.

The collectors' part changes only when a sample finishes, so it is joined (and
gzipped) once per change; only the small self-metrics part is built per scrape.
A gzip stream may hold several members, so the two compressed parts concatenate.
"""
from __future__ import annotations

import gzip
import platform
import threading
from typing import Iterator

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from .sampler import CollectorRunner, render

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
VERSION = "0.1.0"


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

    def count_rejected_scrape(self) -> None:
        with self._lock:
            self.rejected_scrapes += 1

    def render(self, compress: bool) -> bytes:
        collectors_part = self._collectors_part(compress)
        own = render(self._own_metrics())
        return collectors_part + (gzip.compress(own, compresslevel=1) if compress else own)

    def _collectors_part(self, compress: bool) -> bytes:
        fresh = [(r, r.snapshot, not r.hung()) for r in self.runners]
        key = tuple((s.generation, ok) for _, s, ok in fresh)
        with self._lock:
            if key != self._cache_key:
                self._cache_key = key
                self._cached_plain = b"".join(s.text for _, s, ok in fresh if ok)
                self._cached_gzip = b""
            if compress and not self._cached_gzip:
                self._cached_gzip = gzip.compress(self._cached_plain, compresslevel=1)
            return self._cached_gzip if compress else self._cached_plain

    def _own_metrics(self) -> Iterator[Metric]:
        duration = GaugeMetricFamily("alnair_exporter_collector_duration_seconds", "Duration of the collector's last sample.", labels=["collector"])
        success = GaugeMetricFamily("alnair_exporter_collector_success", "1 if the collector's last sample succeeded and is fresh.", labels=["collector"])
        last = GaugeMetricFamily("alnair_exporter_collector_last_success_timestamp_seconds", "When the collector last sampled successfully.", labels=["collector"])
        for runner in self.runners:
            snapshot = runner.snapshot
            duration.add_metric([runner.name], snapshot.duration_seconds)
            success.add_metric([runner.name], float(snapshot.success and not runner.hung()))
            if snapshot.last_success_unix is not None:
                last.add_metric([runner.name], snapshot.last_success_unix)
        yield from (duration, success, last)
        rejected = CounterMetricFamily("alnair_exporter_scrapes_rejected", "Scrapes refused because --web.max-requests were in flight.")
        rejected.add_metric([], self.rejected_scrapes)
        yield rejected
        build = InfoMetricFamily("alnair_exporter_build", "Exporter version.")
        build.add_metric([], {"version": VERSION, "python_version": platform.python_version()})
        yield build
        node = InfoMetricFamily("alnair_node", "The node this exporter runs on.")
        node.add_metric([], {"node": self.node_name})
        yield node
        yield from self._process.collect()
