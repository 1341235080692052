"""Tests for alnair.exporter.registry: built-in and third-party collectors found through the
`alnair.collectors` entry-point group, and broken plug-ins skipped with an error."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from alnair.collectors.cuda import CudaCollector
from alnair.collectors.host import HostCollector
from alnair.exporter.plugin import render
from alnair.exporter.registry import discover_collectors
from support import env_with_path, install_distribution, parse_samples, scrape_text, wait_until

DEMO_MODULE = """
from prometheus_client.core import GaugeMetricFamily


class DemoCollector:
    default_enabled = False
    help = "A third-party demo collector."

    def __init__(self, options):
        pass

    def collect(self):
        yield GaugeMetricFamily("alnair_demo_value", "Demo value.", value=42)
"""

BROKEN_MODULE = 'raise ImportError("plugin dependency missing")\n'

NOT_A_COLLECTOR_MODULE = """
NOT_CALLABLE = 3


def no_collect(options):
    return object()
"""


@pytest.fixture
def demo_root(plugin_root):
    install_distribution(
        plugin_root, "thirdparty-demo", {"thirdparty_demo": DEMO_MODULE}, {"demo": "thirdparty_demo:DemoCollector"}
    )
    return plugin_root


@pytest.fixture
def broken_root(plugin_root):
    install_distribution(
        plugin_root,
        "broken-plugins",
        {"broken_plugin": BROKEN_MODULE, "not_a_collector": NOT_A_COLLECTOR_MODULE},
        {
            "broken": "broken_plugin:Anything",
            "constant": "not_a_collector:NOT_CALLABLE",
            "Bad-Name": "not_a_collector:no_collect",
            "missing": "not_a_collector:NoSuchClass",
            "nocollect": "not_a_collector:no_collect",
        },
    )
    return plugin_root


def scrape(exporter) -> str:
    return scrape_text(exporter.url)


def test_builtin_host_and_cuda_collectors_are_discovered():
    found = {c.name: c for c in discover_collectors()}
    assert found["host"].factory is HostCollector and found["host"].built_in
    assert found["cuda"].factory is CudaCollector and found["cuda"].default_interval_seconds == 1.0
    assert "demo" not in found


def test_built_in_collectors_come_first_then_plug_ins_by_name(demo_root):
    specs = discover_collectors()
    built_in = [c.name for c in specs if c.built_in]
    assert [c.name for c in specs] == sorted(built_in) + ["demo"]
    assert {"cache", "cuda", "host", "nvml", "python"} <= set(built_in)


def test_third_party_distribution_on_sys_path_is_discovered(demo_root):
    demo = {c.name: c for c in discover_collectors()}["demo"]
    assert (demo.factory.__module__, demo.built_in, demo.default_enabled) == ("thirdparty_demo", False, False)
    assert demo.help == "A third-party demo collector."
    assert parse_samples(render(demo.factory(None).collect()).decode()) == {"alnair_demo_value": 42.0}


def test_exporter_serves_third_party_collector_enabled_by_flag(demo_root, start_exporter):
    exporter = start_exporter(
        "--collector.demo", "--no-collector.cuda", "--no-collector.host", env=env_with_path(demo_root)
    )
    text = wait_until(lambda: (t := scrape(exporter)) and "alnair_demo_value" in t and t)
    assert "alnair_demo_value 42.0\n" in text
    assert parse_samples(text)['alnair_exporter_collector_success{collector="demo"}'] == 1.0


def test_third_party_collector_flags_and_their_defaults_are_in_help(demo_root):
    result = subprocess.run(
        [sys.executable, "-m", "alnair.exporter", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, **env_with_path(demo_root), "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    for flag in ("--collector.demo", "--no-collector.demo", "--collector.demo.interval"):
        assert flag in result.stdout
    assert "A third-party demo collector." in result.stdout
    assert "Enable the demo collector (default: disabled)" in result.stdout
    assert "(default: 5s) [env ALNAIR_COLLECTOR_DEMO_INTERVAL]" in result.stdout


def test_broken_entry_points_are_skipped_with_an_error_log(broken_root, caplog):
    caplog.set_level(logging.ERROR, logger="alnair.exporter.registry")
    names = [c.name for c in discover_collectors()]
    assert "host" in names and "cuda" in names and "nocollect" in names  # found; refused when it is built
    assert not {"broken", "constant", "Bad-Name", "missing"} & set(names)
    messages = {r.getMessage() for r in caplog.records if r.levelno == logging.ERROR}
    assert (
        "collector entry point broken (broken_plugin:Anything) failed to load: plugin dependency missing"
    ) in messages
    assert (
        "collector entry point constant (not_a_collector:NOT_CALLABLE) failed to load: int is not callable" in messages
    )
    assert (
        "collector entry point 'Bad-Name' (not_a_collector:no_collect): a name must match [a-z][a-z0-9_]*" in messages
    )
    assert any(
        m.startswith("collector entry point missing (not_a_collector:NoSuchClass) failed to load") for m in messages
    )


def test_exporter_starts_despite_broken_entry_points(broken_root, start_exporter):
    exporter = start_exporter("--no-collector.cuda", "--collector.nocollect", env=env_with_path(broken_root))
    assert "broken (broken_plugin:Anything) failed to load: plugin dependency missing" in exporter.log()
    samples = wait_until(lambda: (s := parse_samples(scrape(exporter))) and "alnair_host_cpus" in s and s)
    assert samples['alnair_exporter_collector_success{collector="nocollect"}'] == 0.0
    wait_until(
        lambda: (
            "collector nocollect error: TypeError: the factory gave a object, which has no collect()" in exporter.log()
        )
    )
