"""ALNAIR_MEMORY_LIMIT, ALNAIR_COMPUTE_LIMIT and ALNAIR_COMPUTE_SHARE exactly as libalnair.so parses them
(intercept/state.c, docs/intercept.md): the same grammar, bounds and reasons, so an annotation the webhook accepts
is a value the intercept applies, and one it refuses is one the intercept would have ignored with the same words.

A parser returns the reason a value is refused, or None. The C side has no Python twin to import (the
intercept's Python half never reads these variables), so this is the one Python definition; the tests mirror
tests/intercept/test_configuration.py case for case.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MAX_DEVICES = 64  # the segment's device slots: the C side's ALNAIR_CUDA_MAX_DEVICES
MAX_LIMIT_BYTES = 1 << 50  # 1Pi: far above any GPU, far below overflow in the C side's sums

WANT_BYTES = "want bytes like 8Gi, 512M or 1073741824, or per device 0=8Gi,1=4Gi"
FRACTIONAL = "not a whole number of bytes"
TOO_BIG = "more than 1Pi (2^50 bytes)"
ZERO = "a limit of 0 bytes (leave it unset for no limit)"
WANT_PERCENT = "want a percent 1-100, or per device 0=30,1=70"
EMPTY_ITEM = "an empty item in the per-device list"
NOT_AN_ITEM = "an item of the per-device list is not DEV=VALUE"
BAD_DEVICE = "a device index is not 0-63"
TWICE = "a device is given twice"

# DIGITS[.DIGITS][UNIT]: ASCII digits only (str.isdigit would take other scripts' digits, which C's test does not).
_SIZE = re.compile(r"([0-9]+)(?:\.([0-9]+))?(?:([KMGTPkmgtp])(i?)[Bb]?)?", re.ASCII)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
_POWERS = "KMGTP"
# 10^n divides fraction x scale only if n <= 50 once the fraction's trailing zeros are gone (scale is at most
# 2^50 or 10^15): a longer fraction is fractional, and int() is never asked for thousands of digits.
_MAX_FRACTION_DIGITS = 50


def parse_bytes(text: str) -> str | None:
    """One size: 1 byte to 1Pi, a whole number of bytes, computed exactly ("1.5Gi" is 1610612736)."""
    match = _SIZE.fullmatch(text)
    if match is None:
        return WANT_BYTES
    whole, fraction, unit, binary = match.groups()
    scale = (1024 if binary else 1000) ** (_POWERS.index(unit.upper()) + 1) if unit else 1
    whole_value = _saturated(whole, MAX_LIMIT_BYTES)
    if whole_value > MAX_LIMIT_BYTES // scale:  # checked before the fraction, as the C side does
        return TOO_BIG
    fraction = (fraction or "").rstrip("0")
    if len(fraction) > _MAX_FRACTION_DIGITS:
        return FRACTIONAL
    part, remainder = divmod(int(fraction or "0") * scale, 10 ** len(fraction))
    if remainder:
        return FRACTIONAL
    total = whole_value * scale + part
    if total > MAX_LIMIT_BYTES:
        return TOO_BIG
    return ZERO if total == 0 else None


def parse_percent(text: str) -> str | None:
    """One percent of a GPU: 1 to 100, digits only (no %, no fraction)."""
    if not _DIGITS.fullmatch(text) or not 1 <= _saturated(text, 100) <= 100:
        return WANT_PERCENT
    return None


def _saturated(digits: str, cap: int) -> int:
    """The digits' value, or cap + 1 when it is larger: leading zeros are decimal ("007" is 7) and a run of
    digits too long for C's uint64 reads as too big, without converting thousands of digits."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(cap)):
        return cap + 1
    return min(int(significant or "0"), cap + 1)


def per_device(parse: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """VALUE for every device, or DEV=VALUE,DEV=VALUE for some: taken whole, the first problem from the left
    is the reason (the C side's parse_per_device)."""

    def check(text: str) -> str | None:
        if "=" not in text:
            return parse(text)
        given: set[int] = set()
        for item in text.split(","):
            why = _item(item, parse, given)
            if why:
                return why
        return None

    return check


def _item(item: str, parse: Callable[[str], str | None], given: set[int]) -> str | None:
    if not item:
        return EMPTY_ITEM
    device, equals, value = item.partition("=")
    if not equals:
        return NOT_AN_ITEM
    index = _saturated(device, MAX_DEVICES) if _DIGITS.fullmatch(device) else MAX_DEVICES
    if index >= MAX_DEVICES:
        return BAD_DEVICE
    if index in given:  # "0=..." and "00=..." are one device
        return TWICE
    given.add(index)
    return parse(value)


memory_limit = per_device(parse_bytes)
compute_limit = per_device(parse_percent)
compute_share = compute_limit  # the cap's grammar exactly: state.c parses both with parse_percent
