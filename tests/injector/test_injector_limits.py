"""The webhook's ALNAIR_MEMORY_LIMIT / ALNAIR_COMPUTE_LIMIT / ALNAIR_COMPUTE_SHARE grammar is the intercept's: the
cases of tests/intercept/test_configuration.py (there run through libalnair.so), each with the same verdict and
reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import limit_cases
from alnair.injector import limits
from alnair.injector.limits import (
    BAD_DEVICE,
    EMPTY_ITEM,
    FRACTIONAL,
    NOT_AN_ITEM,
    TOO_BIG,
    TWICE,
    WANT_BYTES,
    WANT_PERCENT,
    ZERO,
)
from alnair.injector.patch import OWN_LIMITS

ROOT = Path(__file__).resolve().parents[2]

# The intercept's refusals (tests/limit_cases.py) as (value, reason), then cases beyond its table.
BAD_MEMORY = [(value, why) for value, _shown, why in limit_cases.BAD_MEMORY] + [
    # beyond the intercept's table, where a Python port could part ways with C: another script's digit (str.isdigit
    # takes it), a NUL (it would end C's string), runs of digits longer than int() converts
    ("١Mi", WANT_BYTES),
    ("1\x00Mi", WANT_BYTES),
    ("1." + "0" * 5000 + "1Mi", FRACTIONAL),
    ("0" * 5000 + "1=1Mi,1=1Mi", TWICE),
    ("1." + "0" * 49 + "1Pi", FRACTIONAL),
]

# ENFORCED_MEMORY and the per-device cases there, each accepted.
GOOD_MEMORY = [
    "1048576",
    "3Mi",
    "3MiB",
    "3mi",
    "3Mib",
    "5M",
    "5MB",
    "5m",
    "2048K",
    "2048Ki",
    "2048k",
    "1.5Mi",
    "1.50Mi",
    "1.0Mi",
    "007Mi",
    "0.25Gi",
    "0.001G",
    "1.5Gi",
    "1Gi",
    "1.000001M",
    "0=3Mi",
    "1=1Mi,0=3Mi",
    "8Gi",
    "0=8Gi,1=4Gi",
    "5=1.5Gi,2=512M,63=1",
    "00=1Mi",
    "2Ti",
    "1.5Ti",
    "1T",
    "1P",
    "0=1Pi,1=1125899906842624,2=0.5Pi",
    "1." + "0" * 5000 + "Mi",
    "0" * 5000 + "1Ki",
    # 2^-50 Pi: exactly one byte
    "0.00000000000000088817841970012523233890533447265625Pi",
]

BAD_COMPUTE, GOOD_COMPUTE = limit_cases.BAD_COMPUTE, limit_cases.GOOD_COMPUTE
# The cap and the share have one grammar, as the intercept's tests run both through one table: each is checked
# here as the webhook checks it, by the variable's own entry.
COMPUTE_VARIABLES = ["ALNAIR_COMPUTE_LIMIT", "ALNAIR_COMPUTE_SHARE"]


@pytest.mark.parametrize("value, why", BAD_MEMORY, ids=[repr(v[:30]) for v, _ in BAD_MEMORY])
def test_a_memory_limit_the_intercept_ignores_is_refused_for_its_reason(value, why):
    assert limits.memory_limit(value) == why


@pytest.mark.parametrize("value", GOOD_MEMORY, ids=[repr(v[:30]) for v in GOOD_MEMORY])
def test_a_memory_limit_the_intercept_applies_is_accepted(value):
    assert limits.memory_limit(value) is None


@pytest.mark.parametrize("variable", COMPUTE_VARIABLES)
@pytest.mark.parametrize("value, why", BAD_COMPUTE)
def test_a_compute_limit_or_share_the_intercept_ignores_is_refused_for_its_reason(variable, value, why):
    assert OWN_LIMITS[variable](value) == why


@pytest.mark.parametrize("variable", COMPUTE_VARIABLES)
@pytest.mark.parametrize("value", GOOD_COMPUTE)
def test_a_compute_limit_or_share_the_intercept_applies_is_accepted(variable, value):
    assert OWN_LIMITS[variable](value) is None


def test_the_reasons_are_the_intercepts_own_words():
    """Each reason is a string literal of intercept/state.c, so the two cannot drift apart unnoticed."""
    literals = set(re.findall(r'"((?:[^"\\]|\\.)*)"', (ROOT / "intercept" / "state.c").read_text()))
    reasons = [WANT_BYTES, FRACTIONAL, TOO_BIG, ZERO, WANT_PERCENT, EMPTY_ITEM, NOT_AN_ITEM, BAD_DEVICE, TWICE]
    assert [r for r in reasons if r not in literals] == []
