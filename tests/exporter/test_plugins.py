"""The plug-in API as a third party meets it: a real example package installed into a venv serves through
the entry-point group, and a plug-in that emits another collector's family is refused, not served twice."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from support import env_with_path, install_distribution, parse_samples, require_binary, scrape_text, wait_until

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "collector-plugin"

CLASHING_MODULE = """
from prometheus_client.core import GaugeMetricFamily


class SameAsHost:
    def __init__(self, options):
        pass

    def collect(self):
        yield GaugeMetricFamily("alnair_clash_only_mine", "Served only if the collector is.", value=1)
        yield GaugeMetricFamily("alnair_host_cpus", "The host collector's family, again.", value=999)


class SameAsExporter:
    def __init__(self, options):
        pass

    def collect(self):
        yield GaugeMetricFamily("process_open_fds", "The exporter's own family, again.", value=999)


class Distinct:
    def __init__(self, options):
        pass

    def collect(self):
        yield GaugeMetricFamily("alnair_clash_distinct", "A family nobody else emits.", value=7)
"""


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory) -> str:
    """A venv that sees this machine's Alnair and its dependencies, with the example package pip-installed."""
    venv = tmp_path_factory.mktemp("plugin-venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    build = tmp_path_factory.mktemp("example-build")
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", str(EXAMPLE)],
        check=True,
        capture_output=True,
        cwd=build,
    )
    return python


def test_an_installed_third_party_package_registers_and_serves(plugin_venv, start_exporter):
    help_text = subprocess.run(
        [plugin_venv, "-m", "alnair.exporter", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--collector.files.source" in help_text and "(default: sys/fs/file-nr)" in help_text
    exporter = start_exporter(
        "--collector.files", "--collector.files.interval=500ms", "--no-collector.cuda", python=plugin_venv
    )
    samples = wait_until(lambda: (s := parse_samples(scrape_text(exporter.url))) and "example_files_open" in s and s)
    with open("/proc/sys/fs/file-nr") as f:
        kernel_max = int(f.read().split()[2])
    assert samples["example_files_max"] == kernel_max and samples["example_files_open"] > 0
    assert samples['alnair_exporter_collector_success{collector="files"}'] == 1.0


def test_a_plug_in_emitting_another_collectors_family_is_refused_and_the_rest_serve(plugin_root, start_exporter):
    install_distribution(
        plugin_root,
        "clashing-plugins",
        {"clashing_plugins": CLASHING_MODULE},
        {
            "samehost": "clashing_plugins:SameAsHost",
            "sameexporter": "clashing_plugins:SameAsExporter",
            "distinct": "clashing_plugins:Distinct",
        },
    )
    exporter = start_exporter(
        "--collector.host",
        "--collector.samehost",
        "--collector.sameexporter",
        "--collector.distinct",
        "--no-collector.cuda",
        "--no-collector.python",
        "--collector.host.interval=200ms",
        env=env_with_path(plugin_root),
    )
    refused = 'alnair_exporter_collector_refused{collector="%s"}'
    text = wait_until(
        lambda: (
            (t := scrape_text(exporter.url))
            and "alnair_clash_distinct" in t
            and parse_samples(t).get(refused % "samehost") == 1.0
            and parse_samples(t).get(refused % "sameexporter") == 1.0
            and t
        )
    )
    samples = parse_samples(text)
    assert samples["alnair_host_cpus"] != 999 and text.count("# TYPE alnair_host_cpus ") == 1
    assert text.count("# TYPE process_open_fds ") == 1 and "alnair_clash_only_mine" not in text
    assert samples[refused % "host"] == samples[refused % "distinct"] == 0.0
    assert samples['alnair_exporter_collector_success{collector="samehost"}'] == 0.0
    assert samples['alnair_exporter_collector_success{collector="host"}'] == 1.0
    log = exporter.log()
    assert log.count("collector samehost refused: it emits alnair_host_cpus, which collector host emits") == 1
    assert log.count("collector sameexporter refused: it emits process_open_fds, which the exporter emits") == 1
    check = subprocess.run([require_binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        exporter.url + "/healthz", timeout=10
    ) as health:
        assert health.status == 200
