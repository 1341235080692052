"""The collector interface every built-in and third-party collector implements."""
from __future__ import annotations

import argparse
from typing import ClassVar, Iterable, Union

from prometheus_client.metrics_core import Metric


class CollectorUnavailable(Exception):
    """The collector's source does not exist here (no GPU, no Redis...): not a failure
    of the exporter, reported once in the log and as success=0 for that collector."""


class Collector:
    """One source of metrics, sampled in the background by the exporter.

    Subclasses set `name` (used in --collector.NAME and in self-metric labels),
    `default_enabled`, and implement `collect()`, which returns metric families
    (prometheus_client's GaugeMetricFamily etc.), or text already in the exposition
    format (bytes, see exporter/exposition.py) when there are too many samples for
    generic rendering, or raises. `collect()` runs on the collector's own thread,
    never on a scrape, so it may take its time.
    """

    name: ClassVar[str]
    default_enabled: ClassVar[bool] = True
    default_interval_seconds: ClassVar[float] = 5.0
    help: ClassVar[str] = ""

    def __init__(self, options: argparse.Namespace):
        self.options = options

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Declare collector-specific flags, named --collector.NAME.OPTION."""

    def collect(self) -> Union[Iterable[Metric], bytes]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the collector holds (file descriptors, clients)."""
