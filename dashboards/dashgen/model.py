"""What a dashboard is made of, as plain data: the dashboard modules declare these, render.py turns them into
Grafana's JSON through grafana-foundation-sdk, docs.py into docs/dashboards.md."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False  # a table's query: the latest value of each series, one row each
    line: bool = False  # in a filled time series: drawn as a dashed line without fill (a limit, a threshold)


@dataclass(frozen=True)
class Panel:
    kind: str  # a Grafana panel plugin: timeseries, stat, table, state-timeline
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None
    fill_opacity: float | None = None  # a time series' fill under its lines, 0-100 (Grafana's default: none)
    states: dict[int, tuple[str, str]] = field(default_factory=dict)  # value -> (text, colour), for state series
    hidden_columns: tuple[str, ...] = ()  # a table's columns not worth showing


@dataclass(frozen=True)
class Row:
    title: str
    panels: tuple[Panel, ...]


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str = ""  # a Prometheus template query (label_values(...)); empty for the data source
    hidden: bool = False
    all_value: str | None = None  # "All" as this regex instead of every value joined (fleets have thousands)
    starts_at_all: bool = True  # False: Grafana opens the dashboard at the first value


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]


def timeseries(title: str, description: str, unit: str, *queries: Query, **options) -> Panel:
    return Panel("timeseries", title, description, unit, queries, **options)


def stat(title: str, description: str, unit: str, *queries: Query, **options) -> Panel:
    return Panel(
        "stat", title, description, unit, tuple(Query(q.expr, q.legend, instant=True) for q in queries), **options
    )


def table(title: str, description: str, unit: str, query: Query, **options) -> Panel:
    return Panel("table", title, description, unit, (Query(query.expr, query.legend, instant=True),), **options)


def states(
    title: str, description: str, *queries: Query, off: tuple[str, str], on: tuple[str, str], **options
) -> Panel:
    """A state timeline of 0/1 series, each value shown as its (text, colour)."""
    return state_timeline(title, description, *queries, states={0: off, 1: on}, **options)


def state_timeline(
    title: str, description: str, *queries: Query, states: dict[int, tuple[str, str]], **options
) -> Panel:
    """A state timeline of series whose values name states: each value shown as its (text, colour)."""
    return Panel("state-timeline", title, description, "none", queries, states=states, **options)


def row(title: str, *panels: Panel) -> Row:
    return Row(title, panels)
