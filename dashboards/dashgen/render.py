"""Grafana dashboard JSON from the model through grafana-foundation-sdk's builders: the classic dashboard JSON that
file provisioning and the dashboard sidecar accept (they refuse schema v2). Panels are laid out row by row, 24
columns wide, and numbered in order, so the output depends on the model alone."""

from __future__ import annotations

import itertools
import string
import warnings

from .model import Dashboard, Panel, Query, Row, Variable

with warnings.catch_warnings():  # the SDK warns, when imported, that it prefers schema v2
    warnings.simplefilter("ignore", DeprecationWarning)
    from grafana_foundation_sdk.builders import common, dashboard, prometheus, stat, statetimeline, table, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models import common as common_model, dashboard as model
    from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
GRID_WIDTH = 24
TAG = "alnair"  # every Alnair dashboard carries it; the links list the dashboards with it
BUILDERS = {
    "timeseries": timeseries.Panel,
    "stat": stat.Panel,
    "table": table.Panel,
    "state-timeline": statetimeline.Panel,
}


def render(board: Dashboard) -> str:
    """The dashboard's JSON text, keys sorted, ending in a newline."""
    builder = (
        dashboard.Dashboard(board.title)
        .uid(board.uid)
        .description(board.description)
        .tags([TAG])
        .timezone("browser")
        .time("now-1h", "now")
        .refresh("30s")
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .variables([variable(v) for v in board.variables])
        .link(
            dashboard.DashboardLink("Alnair dashboards")
            .type(model.DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for item in layout(board.rows):
        builder = builder.with_row(item) if isinstance(item, dashboard.Row) else builder.with_panel(item)
    return JSONEncoder(sort_keys=True, indent=2).encode(builder.build()) + "\n"


def layout(rows: tuple[Row, ...]) -> list:
    """Row headers and panel builders with ids from 1 and grid positions: panels fill each line left to right and
    wrap to the next when they would pass the grid's width."""
    items, ids, y = [], itertools.count(1), 0
    for r in rows:
        items.append(dashboard.Row(r.title).id(next(ids)).grid_pos(model.GridPos(h=1, w=GRID_WIDTH, x=0, y=y)))
        x, y, line_height = 0, y + 1, 0
        for p in r.panels:
            if x + p.width > GRID_WIDTH:
                x, y, line_height = 0, y + line_height, 0
            items.append(panel(p).id(next(ids)).grid_pos(model.GridPos(h=p.height, w=p.width, x=x, y=y)))
            x, line_height = x + p.width, max(line_height, p.height)
        y += line_height
    return items


def panel(p: Panel):
    builder = (
        BUILDERS[p.kind]()
        .title(p.title)
        .description(p.description)
        .unit(p.unit)
        .datasource(DATASOURCE)
        .targets([target(q, ref) for q, ref in zip(p.queries, string.ascii_uppercase)])
    )
    if p.min is not None:
        builder = builder.min(p.min)
    if p.max is not None:
        builder = builder.max(p.max)
    return OPTIONS[p.kind](builder, p)


def target(q: Query, ref: str):
    t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
    if q.legend:
        t = t.legend_format(q.legend)
    return t.instant().format(PromQueryFormat.TABLE) if q.instant else t


def legend():
    return (
        common.VizLegendOptions()
        .display_mode(common_model.LegendDisplayMode.LIST)
        .placement(common_model.LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def tooltip():
    return (
        common.VizTooltipOptions().mode(common_model.TooltipDisplayMode.MULTI).sort(common_model.SortOrder.DESCENDING)
    )


DASHED = [
    model.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
    model.DynamicConfigValue(id_val="custom.lineStyle", value={"dash": [10, 10], "fill": "dash"}),
]


def _timeseries(builder, p: Panel):
    if p.fill_opacity is not None:
        builder = builder.fill_opacity(p.fill_opacity)
    for q, ref in zip(p.queries, string.ascii_uppercase):
        if q.line:
            builder = builder.override_by_query(ref, DASHED)
    return builder.legend(legend()).tooltip(tooltip())


def _stat(builder, p: Panel):
    return builder.graph_mode(common_model.BigValueGraphMode.NONE).reduce_options(
        common.ReduceDataOptions().calcs(["lastNotNull"]).values(False)
    )


def _table(builder, p: Panel):
    hidden = {column: True for column in p.hidden_columns}
    return builder.with_transformation(
        model.DataTransformerConfig(id_val="organize", options={"excludeByName": hidden})
    )


def _states(builder, p: Panel):
    options = {
        str(value): model.ValueMappingResult(text=text, color=colour) for value, (text, colour) in p.states.items()
    }
    return (
        builder.mappings([model.ValueMap(options)])
        .show_value(common_model.VisibilityMode.NEVER)
        .legend(legend())
        .tooltip(tooltip())
    )


OPTIONS = {"timeseries": _timeseries, "stat": _stat, "table": _table, "state-timeline": _states}


def variable(v: Variable):
    if not v.query:
        return dashboard.DatasourceVariable(v.name).label(v.label).type("prometheus")
    q = (
        dashboard.QueryVariable(v.name)
        .label(v.label)
        .datasource(DATASOURCE)
        .query(v.query)
        .definition(v.query)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.NATURAL_ASC)
        .multi(True)
        .include_all(True)
    )
    if v.starts_at_all:
        q = q.current(model.VariableOption(selected=True, text=["All"], value=["$__all"]))
    if v.all_value is not None:
        q = q.all_value(v.all_value)
    return q.hide(model.VariableHide.HIDE_VARIABLE) if v.hidden else q
