"""Tests for alnair.exporter.sampler (CollectorRunner) and alnair.exporter.scrape (ScrapeAssembler),
in-process, with tiny collectors driven through their options namespace."""

from __future__ import annotations

import gzip
import logging
import threading
import time
import zlib
from argparse import Namespace

import pytest
from prometheus_client.core import GaugeMetricFamily

from alnair.exporter import scrape
from alnair.exporter.plugin import CollectorUnavailable
from alnair.exporter.registry import CollectorSpec
from alnair.exporter.sampler import CollectorRunner
from alnair.exporter.scrape import ScrapeAssembler
from support import parse_samples, wait_until


class Switchable:
    """Yields alnair_test_value, or fails as options.mode says (read on every sample)."""

    def __init__(self, options):
        self.options = options

    def collect(self):
        if self.options.mode == "fail":
            raise RuntimeError("boom")
        if self.options.mode == "unavailable":
            raise CollectorUnavailable("no device here")
        return [GaugeMetricFamily("alnair_test_value", "A test value.", value=self.options.value)]


class AbsentSource:
    """A collector whose source is missing: construction itself raises."""

    constructed = 0

    def __init__(self, options):
        type(self).constructed += 1
        raise CollectorUnavailable("no GPU on this node")


class HangsOnSecondSample:
    """Succeeds once, then blocks in collect() until options.release is set."""

    def __init__(self, options):
        self.options = options
        self.calls = 0

    def collect(self):
        self.calls += 1
        if self.calls > 1:
            self.options.entered.set()
            self.options.release.wait(30)
        return [GaugeMetricFamily("alnair_blocked_value", "Blocked collector output.", value=1)]


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


NAMES = {Switchable: "switchable", AbsentSource: "absent", HangsOnSecondSample: "blocked"}


def spec(factory) -> CollectorSpec:
    return CollectorSpec.of(NAMES[factory], factory)


EXPECTED_TEXT = b"# HELP alnair_test_value A test value.\n# TYPE alnair_test_value gauge\nalnair_test_value 7.0\n"


@pytest.fixture
def runners():
    started: list[CollectorRunner] = []

    def make(cls, options, interval, **kwargs) -> CollectorRunner:
        runner = CollectorRunner(spec(cls), options, interval, **kwargs)
        runner.start()
        started.append(runner)
        return runner

    yield make
    for runner in started:
        release = getattr(runner.options, "release", None)
        if release is not None:
            release.set()
        runner.stop()


def collectors_part(exposition: bytes) -> bytes:
    """Everything before the exporter's own metrics."""
    return exposition.split(b"# HELP alnair_exporter_collector_duration_seconds")[0]


def alnair_samples(exposition: bytes) -> dict[str, float]:
    return {k: v for k, v in parse_samples(exposition.decode()).items() if k.startswith("alnair_")}


def test_successful_sample_renders_metrics_and_marks_success_with_duration():
    runner = CollectorRunner(spec(Switchable), Namespace(mode="ok", value=7), interval=1.0)
    before = time.time()
    snapshot = runner.sample_once()
    assert snapshot.text == EXPECTED_TEXT
    assert (snapshot.state, snapshot.success, snapshot.detail, snapshot.generation) == ("ok", True, "", 1)
    assert 0 < snapshot.duration_seconds < 5
    assert before <= snapshot.last_success_unix <= time.time()
    assert runner.snapshot is snapshot


def test_exception_gives_error_state_and_last_success_survives_until_recovery():
    options = Namespace(mode="ok", value=7)
    runner = CollectorRunner(spec(Switchable), options, interval=1.0)
    ok = runner.sample_once()
    options.mode = "fail"
    failed = runner.sample_once()
    assert (failed.state, failed.success, failed.text) == ("error", False, b"")
    assert failed.detail == "RuntimeError: boom"
    assert failed.last_success_unix == ok.last_success_unix
    assert runner.sample_once().last_success_unix == ok.last_success_unix
    options.mode = "ok"
    recovered = runner.sample_once()
    assert (recovered.state, recovered.success, recovered.text) == ("ok", True, EXPECTED_TEXT)
    assert recovered.generation == 4
    assert recovered.last_success_unix >= ok.last_success_unix


def test_sampling_thread_survives_collector_exception_and_recovers(runners, caplog):
    caplog.set_level(logging.INFO, logger="alnair.exporter.sampler")
    options = Namespace(mode="fail", value=7)
    runner = runners(Switchable, options, 0.01)
    failed = wait_until(lambda: runner.snapshot.state == "error" and runner.snapshot)
    assert (failed.success, failed.text, failed.last_success_unix) == (False, b"", None)
    # The thread keeps sampling through the failure...
    wait_until(lambda: runner.snapshot.generation >= failed.generation + 3)
    assert runner.snapshot.state == "error" and not runner.hung()
    # ...and picks the collector up again once it works.
    options.mode = "ok"
    recovered = wait_until(lambda: runner.snapshot.state == "ok" and runner.snapshot)
    assert (recovered.success, recovered.text) == (True, EXPECTED_TEXT)
    assert recovered.last_success_unix is not None
    messages = [r.getMessage() for r in caplog.records]
    assert "collector switchable error: RuntimeError: boom" in messages
    assert "collector switchable recovered" in messages
    # A failure repeated with the same detail is logged once, not once per sample.
    assert messages.count("collector switchable error: RuntimeError: boom") == 1


def test_collector_unavailable_in_collect_gives_unavailable_state():
    runner = CollectorRunner(spec(Switchable), Namespace(mode="unavailable", value=7), interval=1.0)
    snapshot = runner.sample_once()
    assert (snapshot.state, snapshot.success, snapshot.text) == ("unavailable", False, b"")
    assert snapshot.detail == "no device here"


def test_collector_unavailable_at_construction_is_retried_on_next_sample():
    AbsentSource.constructed = 0
    runner = CollectorRunner(spec(AbsentSource), Namespace(), interval=1.0)
    first, second = runner.sample_once(), runner.sample_once()
    assert (first.state, second.state) == ("unavailable", "unavailable")
    assert second.detail == "no GPU on this node"
    assert runner.collector is None
    assert AbsentSource.constructed == 2


def test_an_unavailable_collector_waiting_to_retry_is_never_hung(runners):
    """No GPU, no Redis URL: the collector retries a minute later and is not sampling meanwhile, so
    /healthz (which fails only for hung collectors) stays 200."""
    clock = FakeClock()
    absent = runners(AbsentSource, Namespace(), 1.0, clock=clock)
    wait_until(lambda: absent.snapshot.state == "unavailable")
    for _ in range(240):  # two minutes of the collector's clock, past two retries
        clock.now += 0.5
        assert not absent.hung()
    assert absent.snapshot.state == "unavailable"


def test_hung_collector_goes_stale_and_scrape_drops_its_metrics_promptly(runners):
    clock = FakeClock()
    options = Namespace(entered=threading.Event(), release=threading.Event())
    blocked = runners(HangsOnSecondSample, options, 0.01, clock=clock)
    healthy = runners(Switchable, Namespace(mode="ok", value=7), 0.01)
    assert options.entered.wait(10), "second collect() never started"
    wait_until(lambda: healthy.snapshot.success)
    assembler = ScrapeAssembler([healthy, blocked], "node-a")

    fresh = alnair_samples(assembler.render(compress=False))
    assert fresh["alnair_blocked_value"] == 1.0
    assert fresh['alnair_exporter_collector_success{collector="blocked"}'] == 1.0

    clock.now += blocked.stale_after  # exactly at the window: still fresh
    assert not blocked.hung()
    clock.now += 0.5
    assert blocked.hung() and not healthy.hung()

    rendered = []  # the scrape must not wait for the blocked collector, which stays blocked meanwhile
    scrape = threading.Thread(target=lambda: rendered.append(assembler.render(compress=False)))
    scrape.start()
    scrape.join(30)
    assert rendered and not options.release.is_set(), "the scrape waited for the hung collector"
    stale = alnair_samples(rendered[0])
    assert "alnair_blocked_value" not in stale
    assert stale['alnair_exporter_collector_success{collector="blocked"}'] == 0.0
    assert stale['alnair_exporter_collector_success{collector="switchable"}'] == 1.0
    assert stale["alnair_test_value"] == 7.0
    assert stale['alnair_node_info{node="node-a"}'] == 1.0


@pytest.fixture
def idle_assembler(runners):
    """An assembler over one runner that has sampled once and will not sample again soon."""
    options = Namespace(mode="ok", value=7)
    runner = runners(Switchable, options, 3600.0)
    wait_until(lambda: runner.snapshot.generation == 1)
    return ScrapeAssembler([runner], "node-a"), runner, options


def test_gzip_output_decompresses_to_the_plain_output(idle_assembler):
    assembler, runner, _ = idle_assembler
    plain = assembler.render(compress=False)
    compressed = assembler.render(compress=True)
    assert compressed[:2] == b"\x1f\x8b"
    unzipped = gzip.decompress(compressed)
    assert collectors_part(unzipped) == collectors_part(plain) == EXPECTED_TEXT
    assert alnair_samples(unzipped) == alnair_samples(plain)
    assert alnair_samples(plain)["alnair_exporter_scrapes_rejected_total"] == 0.0
    # The stream is two gzip members: the cached collectors part, then the per-scrape part.
    first = zlib.decompressobj(wbits=31)
    assert first.decompress(compressed) == EXPECTED_TEXT
    assert first.unused_data[:2] == b"\x1f\x8b"


def test_collectors_part_is_compressed_once_until_a_new_sample(idle_assembler, monkeypatch):
    assembler, runner, options = idle_assembler
    calls = []
    real_compress = gzip.compress
    monkeypatch.setattr(scrape.gzip, "compress", lambda data, **kw: calls.append(data) or real_compress(data, **kw))

    first, second = assembler.render(compress=True), assembler.render(compress=True)
    assert collectors_part(gzip.decompress(first)) == collectors_part(gzip.decompress(second)) == EXPECTED_TEXT
    assert calls.count(EXPECTED_TEXT) == 1  # the second scrape reused the cached member
    assert len(calls) == 3  # plus one self-metrics member per scrape
    assert collectors_part(assembler.render(compress=False)) == EXPECTED_TEXT

    options.value = 8
    runner.sample_once()  # a new generation invalidates the cache
    third = assembler.render(compress=True)
    assert collectors_part(gzip.decompress(third)) == EXPECTED_TEXT.replace(b"7.0", b"8.0")
    assert len(calls) == 5
