"""Tests for alnair.exporter.registry: built-in and third-party collectors found through the
`alnair.collectors` entry-point group, and broken plug-ins skipped with an error."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from alnair.collectors.cuda import CudaCollector
from alnair.collectors.host import HostCollector
from alnair.exporter.collector import Collector
from alnair.exporter.registry import discover_collectors
from alnair.exporter.sampler import render
from support import parse_samples, wait_until

DEMO_MODULE = '''
from prometheus_client.core import GaugeMetricFamily
from alnair.exporter.collector import Collector


class DemoCollector(Collector):
    name = "demo"
    default_enabled = False
    help = "A third-party demo collector."

    def collect(self):
        yield GaugeMetricFamily("alnair_demo_value", "Demo value.", value=42)
'''

BROKEN_MODULE = 'raise ImportError("plugin dependency missing")\n'

NOT_A_COLLECTOR_MODULE = '''
class Plain:
    name = "plain"


from alnair.exporter.collector import Collector


class Misnamed(Collector):
    name = "other"
'''


def install_distribution(root, name, modules, entry_points):
    """A distribution as pip would leave it: modules plus NAME-0.1.dist-info, under `root`."""
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "".join(f"{entry} = {target}\n" for entry, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[alnair.collectors]\n{lines}")


@pytest.fixture
def plugin_root(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield root
    for module in ("thirdparty_demo", "broken_plugin", "not_a_collector"):
        sys.modules.pop(module, None)


@pytest.fixture
def demo_root(plugin_root):
    install_distribution(plugin_root, "thirdparty-demo", {"thirdparty_demo": DEMO_MODULE},
                         {"demo": "thirdparty_demo:DemoCollector"})
    return plugin_root


@pytest.fixture
def broken_root(plugin_root):
    install_distribution(
        plugin_root, "broken-plugins",
        {"broken_plugin": BROKEN_MODULE, "not_a_collector": NOT_A_COLLECTOR_MODULE},
        {"broken": "broken_plugin:Anything", "plain": "not_a_collector:Plain",
         "misnamed": "not_a_collector:Misnamed", "missing": "not_a_collector:NoSuchClass"},
    )
    return plugin_root


def env_with_path(root) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}


def scrape(exporter) -> str:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(exporter.url + "/metrics", timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def test_builtin_host_and_cuda_collectors_are_discovered():
    found = {c.name: c for c in discover_collectors()}
    assert found["host"] is HostCollector
    assert found["cuda"] is CudaCollector
    assert "demo" not in found


def test_discovery_is_sorted_by_name(demo_root):
    names = [c.name for c in discover_collectors()]
    assert names == sorted(names)
    assert {"cuda", "demo", "host"} <= set(names)


def test_third_party_distribution_on_sys_path_is_discovered(demo_root):
    found = {c.name: c for c in discover_collectors()}
    demo = found["demo"]
    assert issubclass(demo, Collector) and demo.__module__ == "thirdparty_demo"
    assert parse_samples(render(demo(None).collect()).decode()) == {"alnair_demo_value": 42.0}


def test_exporter_serves_third_party_collector_enabled_by_flag(demo_root, start_exporter):
    exporter = start_exporter("--collector.demo", "--no-collector.cuda", "--no-collector.host",
                              env=env_with_path(demo_root))
    text = wait_until(lambda: (t := scrape(exporter)) and "alnair_demo_value" in t and t)
    assert "alnair_demo_value 42.0\n" in text
    assert parse_samples(text)['alnair_exporter_collector_success{collector="demo"}'] == 1.0


def test_third_party_collector_flags_are_in_help(demo_root):
    result = subprocess.run([sys.executable, "-m", "alnair.exporter", "--help"], capture_output=True, text=True,
                            timeout=30, env={**os.environ, **env_with_path(demo_root)})
    assert result.returncode == 0, result.stderr
    for flag in ("--collector.demo", "--no-collector.demo", "--collector.demo.interval"):
        assert flag in result.stdout
    assert "A third-party demo collector." in result.stdout


def test_broken_entry_points_are_skipped_with_an_error_log(broken_root, caplog):
    caplog.set_level(logging.ERROR, logger="alnair.exporter.registry")
    names = [c.name for c in discover_collectors()]
    assert "host" in names and "cuda" in names
    assert not {"broken", "plain", "misnamed", "missing", "other"} & set(names)
    messages = {r.getMessage() for r in caplog.records if r.levelno == logging.ERROR}
    assert ("collector entry point broken (broken_plugin:Anything) failed to load: "
            "plugin dependency missing") in messages
    assert "collector entry point plain (not_a_collector:Plain) is not a Collector named 'plain'" in messages
    assert "collector entry point misnamed (not_a_collector:Misnamed) is not a Collector named 'misnamed'" in messages
    assert any(m.startswith("collector entry point missing (not_a_collector:NoSuchClass) failed to load")
               for m in messages)


def test_exporter_starts_despite_broken_entry_points(broken_root, start_exporter):
    exporter = start_exporter("--no-collector.cuda", env=env_with_path(broken_root))
    assert "broken (broken_plugin:Anything) failed to load: plugin dependency missing" in exporter.log()
    assert "is not a Collector named 'plain'" in exporter.log()
    wait_until(lambda: "alnair_host_cpus" in scrape(exporter))
