"""Arithmetic on raw samples: a window of a timeline, its min/max/mean/range, a counter's increase, per-scrape rates
of two counters, and percentiles weighted by how many events each value stands for."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class Timeline:
    """Sorted (time, value) samples of one quantity."""

    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def window(self, start: float, end: float) -> list[float]:
        """The values sampled in [start, end]."""
        low = bisect.bisect_left(self.times, start)
        high = bisect.bisect_right(self.times, end)
        return self.values[low:high]

    def pairs(self, start: float, end: float) -> list[tuple[float, float]]:
        low = bisect.bisect_left(self.times, start)
        high = bisect.bisect_right(self.times, end)
        return list(zip(self.times[low:high], self.values[low:high]))

    def last(self) -> float | None:
        return self.values[-1] if self.values else None


def steady(steps: Timeline, warmup: int) -> tuple[float, float] | None:
    """The samples of a step counter's scrapes during which the job was past its first `warmup` steps and not yet
    past its last: from the scrape after the first showing `warmup` steps to the scrape before the first showing
    the final count (a reading stands for the time before its scrape). None when no scrape lies between."""
    samples = list(zip(steps.times, steps.values))
    warm = next((t for t, v in samples if v >= warmup), None)
    if warm is None:
        return None
    final = max(steps.values)
    done = next(t for t, v in samples if v == final)
    inside = [t for t in steps.times if warm < t < done]
    return (inside[0], inside[-1]) if inside else None


def combine(timelines: list[Timeline], how) -> Timeline:
    """One timeline from several sampled at the same scrapes (a node's CPUs and modes): `how` maps the values
    present at one timestamp to one value."""
    at: dict[float, list[float]] = {}
    for timeline in timelines:
        for t, v in zip(timeline.times, timeline.values):
            at.setdefault(t, []).append(v)
    times = sorted(at)
    return Timeline(times, [how(at[t]) for t in times])


def ratio(numerators: Timeline, denominators: Timeline) -> Timeline:
    """numerator / denominator at the timestamps both have (one scrape's samples share its timestamp)."""
    below = dict(zip(denominators.times, denominators.values))
    out = Timeline()
    for t, v in zip(numerators.times, numerators.values):
        d = below.get(t)
        if d:
            out.times.append(t)
            out.values.append(v / d)
    return out


def rate_ratio(numerators: Timeline, denominators: Timeline) -> Timeline:
    """Δnumerator / Δdenominator between consecutive common samples of two counters (busy CPU seconds over all
    CPU seconds), stamped at the later sample; resets and empty intervals are skipped."""
    below = dict(zip(denominators.times, denominators.values))
    common = [(t, v, below[t]) for t, v in zip(numerators.times, numerators.values) if t in below]
    out = Timeline()
    for (_, n0, d0), (t, n1, d1) in zip(common, common[1:]):
        if d1 > d0 and n1 >= n0:
            out.times.append(t)
            out.values.append((n1 - n0) / (d1 - d0))
    return out


def summary(values: list[float]) -> tuple[float | None, float | None, float | None, float | None]:
    """(min, max, mean, range), all None without values."""
    if not values:
        return None, None, None, None
    low, high = min(values), max(values)
    return low, high, sum(values) / len(values), high - low


def increase(pairs: list[tuple[float, float]]) -> float | None:
    """A counter's rise over the samples, counting through resets (a reset starts again from 0)."""
    if not pairs:
        return None
    total = 0.0
    for (_, a), (_, b) in zip(pairs, pairs[1:]):
        total += b - a if b >= a else b
    return total


def per_event(amounts: Timeline, events: Timeline) -> tuple[list[float], list[float]]:
    """For each scrape interval in which `events` rose: Δamount / Δevents (the mean seconds per step in it) and
    Δevents, its weight."""
    below = dict(zip(amounts.times, amounts.values))
    common = [(e, below[t]) for t, e in zip(events.times, events.values) if t in below]
    values, weights = [], []
    for (e0, a0), (e1, a1) in zip(common, common[1:]):
        if e1 > e0 and a1 >= a0:
            values.append((a1 - a0) / (e1 - e0))
            weights.append(e1 - e0)
    return values, weights


def weighted_percentile(values: list[float], weights: list[float], q: float) -> float | None:
    """The smallest value at or below which a share q of the total weight lies."""
    if not values:
        return None
    ordered = sorted(zip(values, weights))
    target, seen = q * sum(weights), 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= target:
            return value
    return ordered[-1][0]
