"""bench/stack_overhead.py's two estimates of the whole stack's cost: the mean ratio (Student's t) that one slow run
drags, and the median ratio with its sign-test interval that it cannot."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "stack_overhead.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("stack_overhead", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_twenty_pairs_take_the_sixth_and_fifteenth_ratio(bench):
    ratios = [1 + i / 1000 for i in range(20)]  # 1.000 .. 1.019
    median, low, high = bench.median_interval(list(reversed(ratios)))
    assert (low, high) == (ratios[5], ratios[14])
    assert median == pytest.approx((ratios[9] + ratios[10]) / 2)


def test_one_slow_bare_run_moves_the_mean_not_the_median(bench):
    steady = [1.0 + (-1) ** i * 0.001 for i in range(19)]
    with_outlier = steady + [1.39]  # a bare run 28% slow makes its pair's ratio 1.39
    excess, half = bench.interval(with_outlier)  # mean ratio - 1
    median, low, high = bench.median_interval(with_outlier)
    assert half > 0.03 and excess > 0.015
    assert abs(median - 1) <= 0.001 and high - low <= 0.002


def test_too_few_pairs_have_no_sign_test_interval(bench):
    median, low, high = bench.median_interval([1.0, 1.01, 0.99, 1.02, 0.98])  # 5 pairs: 2 x 1/32 > 5%
    assert median == 1.0 and math.isnan(low) and math.isnan(high)
    assert not math.isnan(bench.median_interval([1.0] * 6)[1])
