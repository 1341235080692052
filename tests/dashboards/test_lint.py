"""The checks grafana/dashboard-linter makes (lint/rule_*.go), on the committed dashboards: a templated Prometheus
data source that every panel and query uses, `$__rate_interval` in every rate(), irate() and increase(), a valid
unit, a title and a description on every panel, unique panel ids, no overlapping panels, query variables that
reload on time change; and, beyond the linter, that every variable a query names exists, every metric it names is
served, and every per-process series is joined with its pod's names."""

from __future__ import annotations

import re

from dashboard_support import ROOT, panels, targets

# Grafana's unit ids, as dashboard-linter's panel-units-rule lists them (lint/rule_panel_units.go, commit
# 4d0844b40d49cbfd442916fc6c0c3c6fc81084e3, from Grafana's valueFormats/categories.ts).
VALID_UNITS = set(
    """
none string short percent percentunit humidity dB hex0x hex sci locale pixel accMS2 accFS2 accG degree radian grad
arcmin arcsec areaM2 areaF2 areaMI2 flops mflops gflops tflops pflops eflops zflops yflops ppm conppb conngm3
conngNm3 conμgm3 conμgNm3 conmgm3 conmgNm3 congm3 congNm3 conmgdL conmmolL bytes decbytes bits decbits kbytes
deckbytes mbytes decmbytes gbytes decgbytes tbytes dectbytes pbytes decpbytes pps binBps Bps binbps bps KiBs Kibits
KBs Kbits MiBs Mibits MBs Mbits GiBs Gibits GBs Gbits TiBs Tibits TBs Tbits PiBs Pibits PBs Pbits dateTimeAsIso
dateTimeAsIsoNoDateIfToday dateTimeAsUS dateTimeAsUSNoDateIfToday dateTimeAsLocal dateTimeAsLocalNoDateIfToday
dateTimeAsSystem dateTimeFromNow watt kwatt megwatt gwatt mwatt Wm2 voltamp kvoltamp voltampreact kvoltampreact watth
watthperkg kwatth kwattm amph kamph mamph joule ev amp kamp mamp volt kvolt mvolt dBm ohm kohm Mohm farad µfarad
nfarad pfarad ffarad henry mhenry µhenry lumens flowgpm flowcms flowcfs flowcfm litreh flowlpm flowmlpm lux forceNm
forcekNm forceN forcekN Hs KHs MHs GHs THs PHs EHs massmg massg masslb masskg masst lengthmm lengthin lengthft
lengthm lengthkm lengthmi pressurembar pressurebar pressurekbar pressurepa pressurehpa pressurekpa pressurehg
pressurepsi radbq radci radgy radrad radsv radmsv radusv radrem radexpckg radr radsvh radmsvh radusvh rotrpm rothz
rotrads rotdegs celsius fahrenheit kelvin hertz ns µs ms s m h d dtdurationms dtdurations dthms dtdhms timeticks
clockms clocks cps ops reqps rps wps iops cpm opm rpm wpm mps mpm velocityms velocitykmh velocitymph velocityknot
mlitre litre m3 Nm3 dm3 gallons bool bool_yes_no bool_on_off
""".split()
)
# Every family the exporter serves: "name type labels" (tests/e2e/fixtures/exposition.txt, the golden exposition).
FAMILIES = {
    name: (kind, labels.split(","))
    for name, kind, labels in (
        line.split() for line in (ROOT / "tests/e2e/fixtures/exposition.txt").read_text().splitlines()
    )
}
SERVED = {"up"} | {
    name + suffix
    for name, (kind, _) in FAMILIES.items()
    for suffix in ("", *(("_bucket", "_sum", "_count") if kind == "histogram" else ()))
}
PER_PROCESS = {name for name, (_, labels) in FAMILIES.items() if "pid" in labels and not name.endswith("_info")}
GLOBAL_VARIABLES = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s", "__range_ms"}
RANGED_FUNCTIONS = re.compile(r"\b(rate|irate|increase)\s*\(")
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def without_strings(promql: str) -> str:
    """PromQL with its string literals emptied, so a regex's [ or ( inside a matcher is not read as syntax."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', promql)


def call_argument(promql: str, opening: int) -> str:
    depth = 0
    for position in range(opening, len(promql)):
        depth += {"(": 1, ")": -1}.get(promql[position], 0)
        if depth == 0:
            return promql[opening + 1 : position]
    raise AssertionError(f"unbalanced parentheses: {promql}")


def ranges_of_rate_calls(promql: str) -> list[tuple[str, list[str]]]:
    """(function, the ranges of its argument) for every rate(), irate() and increase() call."""
    bare = without_strings(promql)
    return [
        (m.group(1), re.findall(r"\[([^\]]*)\]", call_argument(bare, m.end() - 1)))
        for m in RANGED_FUNCTIONS.finditer(bare)
    ]


def test_the_dashboard_has_one_templated_prometheus_data_source(board):
    sources = [v for v in board["templating"]["list"] if v["type"] == "datasource"]
    assert [(v["name"], v["label"], v["query"]) for v in sources] == [("datasource", "Data source", "prometheus")]


def test_every_panel_and_query_uses_the_templated_data_source(board):
    templated = {"$datasource", "${datasource}"}
    wrong = [p["title"] for p in panels(board) if p["datasource"]["uid"] not in templated]
    wrong += [f"{p['title']} {t['refId']}" for p, t in targets(board) if t["datasource"]["uid"] not in templated]
    assert wrong == []


def test_every_rate_irate_and_increase_uses_rate_interval(board):
    wrong = [
        f"{p['title']}: {fn}() over {ranges or 'no range'} in {t['expr']}"
        for p, t in targets(board)
        for fn, ranges in ranges_of_rate_calls(t["expr"])
        if ranges != ["$__rate_interval"]
    ]
    assert wrong == []


def test_no_range_but_rate_interval_anywhere(board):
    """Stricter than the linter: no query has a fixed window, so every panel follows the time picker."""
    wrong = [
        f"{p['title']}: {t['expr']}"
        for p, t in targets(board)
        if set(re.findall(r"\[([^\]]*)\]", without_strings(t["expr"]))) - {"$__rate_interval"}
    ]
    assert wrong == []


def test_every_panel_has_a_valid_unit(board):
    wrong = [
        (p["title"], p["fieldConfig"]["defaults"].get("unit"))
        for p in panels(board)
        if p["fieldConfig"]["defaults"].get("unit") not in VALID_UNITS
    ]
    assert wrong == []


def test_every_panel_has_a_title_a_description_and_queries(board):
    wrong = [
        p.get("title") or p["id"]
        for p in panels(board)
        if not p.get("title")
        or not p.get("description")
        or not p["targets"]
        or not all(t.get("expr") for t in p["targets"])
    ]
    assert wrong == []
    assert all(r.get("title") for r in board["panels"] if r["type"] == "row")


def test_queries_of_a_panel_have_distinct_ref_ids(board):
    assert [p["title"] for p in panels(board) if len({t["refId"] for t in p["targets"]}) != len(p["targets"])] == []


def test_panel_ids_are_unique(board):
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_panels_fit_the_grid_and_do_not_overlap(board):
    cells: dict[tuple[int, int], str] = {}
    overlaps = []
    for p in board["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, (p["title"], g)
        for cell in ((x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])):
            if cell in cells:
                overlaps.append((cells[cell], p["title"], cell))
            cells[cell] = p["title"]
    assert overlaps == []


def test_query_variables_reload_on_time_range_change_and_use_label_values(board):
    queries = [v for v in board["templating"]["list"] if v["type"] == "query"]
    assert [v["name"] for v in queries if v["refresh"] != 2] == []
    assert [v["name"] for v in queries if not re.fullmatch(r"label_values\((.+), \w+\)", v["query"])] == []


def test_every_variable_a_query_names_is_defined(board):
    defined = {v["name"] for v in board["templating"]["list"]} | GLOBAL_VARIABLES
    used = [
        (where, name)
        for where, text in [
            *((p["title"], t["expr"]) for p, t in targets(board)),
            *((v["name"], v.get("query", "")) for v in board["templating"]["list"]),
        ]
        for name in (a or b for a, b in VARIABLE.findall(text))
    ]
    assert [f"{where}: ${name}" for where, name in used if name not in defined] == []


def metric_names(promql: str) -> set[str]:
    return set(re.findall(r"\b(?:alnair|process)_\w+|\bup\b", without_strings(promql)))


def test_every_metric_a_query_names_is_served(board):
    assert [
        f"{p['title']}: {name}" for p, t in targets(board) for name in sorted(metric_names(t["expr"]) - SERVED)
    ] == []


def test_every_per_process_series_carries_its_pods_names(board):
    """The issue's promise: pod names reach every per-process panel, through the _process_info joins."""
    bare = [
        f"{p['title']}: {t['expr']}"
        for p, t in targets(board)
        if metric_names(t["expr"]) & PER_PROCESS and "group_left (namespace, pod, container)" not in t["expr"]
    ]
    assert bare == []


def test_the_dashboard_links_to_the_others_with_its_variables_and_time(board):
    assert "alnair" in board["tags"]
    assert [(link["type"], link["tags"], link["includeVars"], link["keepTime"]) for link in board["links"]] == [
        ("dashboards", ["alnair"], True, True)
    ]


def test_the_rate_interval_check_sees_a_fixed_window():
    """The check above can fail: it finds a fixed window and a missing one, and a regex's brackets are no range."""
    assert ranges_of_rate_calls('sum(rate(x{a=~"[ab]"}[5m])) / increase(y[$__rate_interval])') == [
        ("rate", ["5m"]),
        ("increase", ["$__rate_interval"]),
    ]
    assert ranges_of_rate_calls("rate(x)") == [("rate", [])]
