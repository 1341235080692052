"""Fast Prometheus text exposition for collectors with thousands of samples.

prometheus_client validates and escapes every label name of every sample; a
collector with one series set per process can instead escape each label set once,
keep it across samples, and join lines here. The output is the same text format.
"""
from __future__ import annotations

import math
from typing import Iterable, Mapping


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
