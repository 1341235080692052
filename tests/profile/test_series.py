"""The profile's arithmetic on raw samples: windows, summaries, counters through resets, per-scrape ratios,
weighted percentiles, windows of a long range merged without duplicates, and selectors quoted for PromQL."""

from __future__ import annotations

import pytest

from alnair.profiler import series as ts
from alnair.profiler.prometheus import ProfileError, _merge
from alnair.profiler.selection import Selection, parse_time, regex_of


def test_window_keeps_the_samples_inside_both_ends():
    line = ts.Timeline([1, 2, 3, 4], [10, 20, 30, 40])
    assert line.window(2, 3) == [20, 30] and line.window(5, 9) == []
    assert ts.summary([3.0, 1.0, 2.0]) == (1.0, 3.0, 2.0, 2.0) and ts.summary([]) == (None,) * 4


def test_steady_state_lies_between_the_warm_up_and_the_last_step():
    steps = ts.Timeline([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 1, 5, 10, 15, 20, 20])
    # 2 steps first at 3 s, all 20 at 6 s: the readings of 4 and 5 s stand for time inside the two
    assert ts.steady(steps, 2) == (4, 5) and ts.steady(steps, 1) == (2, 5)
    assert ts.steady(ts.Timeline([0, 1, 2], [0, 3, 3]), 2) is None  # no scrape between the warm-up and the end
    assert ts.steady(ts.Timeline([0, 1, 2], [0, 1, 1]), 2) is None and ts.steady(ts.Timeline(), 2) is None


def test_increase_counts_through_a_reset():
    assert ts.increase([(0, 5.0), (1, 8.0), (2, 2.0), (3, 4.0)]) == 3 + 2 + 2
    assert ts.increase([]) is None


def test_cpu_share_is_busy_over_all_seconds_per_interval():
    busy, total = ts.Timeline([0, 1, 2], [0, 1.5, 2.0]), ts.Timeline([0, 1, 2], [0, 2.0, 4.0])
    assert ts.rate_ratio(busy, total).values == [0.75, 0.25]


def test_step_time_percentiles_weigh_each_interval_by_its_steps():
    steps, seconds = ts.Timeline([0, 1, 2, 3], [0, 9, 10, 10]), ts.Timeline([0, 1, 2, 3], [0, 0.9, 1.9, 1.9])
    values, weights = ts.per_event(seconds, steps)
    assert values == pytest.approx([0.1, 1.0]) and weights == [9, 1]  # the idle interval is no step
    assert ts.weighted_percentile(values, weights, 0.5) == pytest.approx(0.1)
    assert ts.weighted_percentile(values, weights, 0.95) == pytest.approx(1.0)


def test_windows_of_a_long_range_merge_once_per_sample():
    merged = {}
    _merge(merged, {"metric": {"pid": "1"}, "values": [[9, "0"], [10, "1"], [20, "2"]]}, 10)
    _merge(merged, {"metric": {"pid": "1"}, "values": [[20, "2"], [30, "3"]]}, 10)  # the boundary sample again
    [series] = merged.values()
    assert (series.times, series.values) == ([10, 20, 30], [1.0, 2.0, 3.0])


def test_selectors_quote_values_and_narrow_to_chosen_pids():
    chosen = Selection(0, 10, namespace='a"b', pids=("7",), raw='{job="alnair"}')
    assert chosen.info() == 'namespace="a\\"b",pid=~"7",job="alnair"'
    assert chosen.process(["1.5", "2"]) == 'job="alnair",pid=~"1\\\\.5|2"'
    assert chosen.node() == 'job="alnair"'
    assert regex_of(["12@4026531836"]) == '"12@4026531836"'


def test_times_are_unix_seconds_or_rfc3339_and_the_range_must_not_be_empty():
    assert parse_time("2001-09-09T01:46:40Z") == parse_time("1000000000") == 1e9
    with pytest.raises(ValueError):
        parse_time("yesterday")
    with pytest.raises(ProfileError, match="empty range"):
        Selection(10, 10)
