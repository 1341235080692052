"""The C library in layers: every call between its files goes down, never up or sideways, so the hooks count,
the limiter decides and the monitor publishes without a circle among intercept/*.c (docs/architecture.md).
The calls are read from the compiler's objects: each file's undefined symbols that another file defines."""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

INTERCEPT = Path(__file__).resolve().parents[2] / "intercept"
# Bottom first. A file may call files of lower layers only.
LAYERS = [
    {"driver", "alloc_table", "shm_segment", "device_busy", "turns"},  # the real driver, data structures, the segment
    # file, the GPU's busy time's arithmetic, the turns' states
    {"state"},  # the process's devices, configuration, clocks and log
    # NVML; the copies' pointer map; the share table; busy time to GPU time; launches by kernel name
    {"nvml", "address_map", "gpu_share", "gpu_time", "kernel_names"},
    {"nvml_reader"},  # NVML on a thread of its own
    {"compute_limit", "pools", "held_memory"},  # the limiter decides, memory is accounted
    {"monitor", "hooks_launch", "hooks_memory", "hooks_copy", "hooks_context", "hooks_sync"},  # publishes; counts
    {"hook_registry"},  # hands out the hooks
]


def library_sources() -> list[str]:
    makefile = (INTERCEPT / "Makefile").read_text().replace("\\\n", " ")
    return re.search(r"^LIB_SOURCES = (.*)$", makefile, re.M)[1].split()


def calls_between_files(build: Path) -> dict[str, set[str]]:
    """file -> the files whose functions or data it uses, from `nm` of each compiled object."""
    defined, undefined = {}, {}
    for source in library_sources():
        name, obj = source[:-2], build / f"{source[:-2]}.o"
        subprocess.run(
            ["gcc", "-I../abi", "-O2", "-std=gnu11", "-fPIC", "-fvisibility=hidden", "-c", source, "-o", str(obj)],
            cwd=INTERCEPT,
            check=True,
        )
        symbols = [
            line.split()
            for line in subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()
        ]
        defined[name] = {s[2] for s in symbols if len(s) == 3 and s[1] in "TDBRCG"}
        undefined[name] = {s[1] for s in symbols if len(s) == 2 and s[0] == "U"}
    owner = {symbol: name for name, symbols in defined.items() for symbol in symbols}
    graph = defaultdict(set)
    for name, symbols in undefined.items():
        graph[name] |= {owner[s] for s in symbols if s in owner and owner[s] != name}
    return graph


def violations(graph: dict[str, set[str]], layers: list[set[str]]) -> list[str]:
    level = {name: i for i, layer in enumerate(layers) for name in layer}
    return sorted(
        f"{caller} -> {callee}"
        for caller, callees in graph.items()
        for callee in callees
        if level[callee] >= level[caller]
    )


def test_every_library_file_has_a_layer():
    assert sorted(source[:-2] for source in library_sources()) == sorted(set().union(*LAYERS))


def test_calls_between_the_files_only_go_down(tmp_path):
    assert violations(calls_between_files(tmp_path), LAYERS) == []


@pytest.mark.parametrize(
    "graph, found",
    [
        ({"state": {"monitor"}, "monitor": {"state"}}, ["state -> monitor"]),  # the circle this test removed
        ({"compute_limit": {"pools"}}, ["compute_limit -> pools"]),  # sideways
    ],
    ids=["up", "sideways"],
)
def test_a_call_up_or_sideways_is_found(graph, found):
    assert violations(graph, LAYERS) == found
