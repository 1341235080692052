"""The exporter's public plug-in API: everything a collector, built in or third-party, may use.

A collector is any object with `collect()` (the `Collector` protocol). It is registered under the
`alnair.collectors` entry-point group as a factory: a class or function taking the parsed options and
returning a collector. The factory may carry, as attributes: `help` (one line for --help),
`default_enabled` (True), `default_interval_seconds` (5.0) and `add_arguments(parser)`, which declares
the collector's flags with `add_flag`, named --collector.NAME.OPTION; `shared_arguments(parser)`, flags
that several collectors declare with the same function (added once); and `check_options(options)`, which
returns why the options cannot work (the exporter exits 2 with it) when the collector is enabled. See
docs/plugins.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from prometheus_client.metrics_core import Metric

from alnair.commandline import RepeatedList, add_flag, comma_separated, duration, flag_type, int_between, parse_bool

from .exposition import ExpositionBuilder, LabelSets, label_set, render

__all__ = [
    "Collector",
    "CollectorUnavailable",
    "ExpositionBuilder",
    "LabelSets",
    "label_set",
    "render",
    "add_flag",
    "duration",
    "comma_separated",
    "RepeatedList",
    "flag_type",
    "int_between",
    "parse_bool",
]


class CollectorUnavailable(Exception):
    """The collector's source does not exist here (no GPU, no Redis...): not a failure of the exporter.
    Raised by the factory or by collect(); reported once in the log, as success=0, and retried later."""


@runtime_checkable
class Collector(Protocol):
    """One source of metrics, sampled in the background on its own thread, never during a scrape.

    `collect()` returns metric families (prometheus_client's GaugeMetricFamily etc.) or exposition text
    already rendered (bytes, from ExpositionBuilder) when there are too many samples for generic
    rendering; or it raises. A collector may also have `close()`, called when the exporter stops.
    Each family name belongs to one collector: a collector that emits a family another collector or
    the exporter emits is refused (it stops serving; the others go on)."""

    def collect(self) -> Iterable[Metric] | bytes: ...
