"""Fast Prometheus text exposition for collectors with thousands of samples.

prometheus_client validates and escapes every label name of every sample; a
collector with one series set per process can instead escape each label set once,
keep it across samples, and join lines here. The output is the same text format.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric

# Sample names a family of each type owns besides its own name (text format 0.0.4); a counter's
# name ends in _total, which its _created sample drops.
_SUFFIXES = {b"histogram": (b"_bucket", b"_sum", b"_count", b"_created"), b"summary": (b"_sum", b"_count", b"_created")}


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_set(labels: Mapping[str, str]) -> str:
    """'{name="value",...}' with values escaped; names must be valid label names."""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items()) + "}"


def format_value(value: float | int) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


class ExpositionBuilder:
    """Accumulates metric families as text; `text()` gives the exposition bytes."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[tuple[str, float | int]]) -> None:
        """One family; `samples` are (label set from label_set(), value). Counters get `_total`."""
        if kind == "counter":
            name += "_total"
        help_line = help_text.replace("\\", "\\\\").replace("\n", "\\n")
        self._lines.append(f"# HELP {name} {help_line}\n# TYPE {name} {kind}")
        self._lines.extend(f"{name}{labels} {format_value(value)}" for labels, value in samples)

    def text(self) -> bytes:
        return ("\n".join(self._lines) + "\n").encode() if self._lines else b""


class LabelSets:
    """Escaped label sets kept from one sample to the next, so a live series' labels are escaped once.

    Call `new_sample()` at the start of each collect(); `get(key, labels)` gives the escaped set for a
    key (anything hashable naming the series), escaping only keys the last sample did not use."""

    def __init__(self) -> None:
        self._previous: dict[tuple, str] = {}
        self._current: dict[tuple, str] = {}

    def new_sample(self) -> None:
        """Forget label sets the last sample did not use: those of series gone."""
        self._previous, self._current = self._current, {}

    def get(self, key: tuple, labels: dict[str, str]) -> str:
        text = self._previous.get(key) or label_set(labels)
        self._current[key] = text
        return text


class _Families:
    """Adapter: generate_latest renders any object with collect()."""

    def __init__(self, families: Iterable[Metric]):
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(collected: Iterable[Metric] | bytes) -> bytes:
    """Prometheus text exposition of what a collector returned (families, or text already)."""
    if isinstance(collected, bytes):
        return collected
    return generate_latest(_Families(list(collected)))


def family_names(text: bytes) -> frozenset[str]:
    """Every sample name the families in `text` own: each TYPE line's name, and a histogram's _bucket,
    _sum and _count, a counter's _created. Label values and HELP cannot hold a raw newline, so each
    match is a real TYPE line; the scan costs about a millisecond per megabyte."""
    names: set[str] = set()
    lines = b"\n" + text
    position = lines.find(b"\n# TYPE ")
    while position != -1:
        end = lines.find(b"\n", position + 8)
        name, _, kind = lines[position + 8 : end if end != -1 else None].partition(b" ")
        names.add(name.decode(errors="replace"))
        kind = kind.strip()
        names.update((name + suffix).decode(errors="replace") for suffix in _SUFFIXES.get(kind, ()))
        if kind == b"counter":
            names.add(name.removesuffix(b"_total").decode(errors="replace") + "_created")
        position = lines.find(b"\n# TYPE ", end) if end != -1 else -1
    return frozenset(names)
