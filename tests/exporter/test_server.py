"""Tests for alnair.exporter.server: the real exporter as a subprocess, plus in-process
ExporterServer instances where a deterministic hold or a fake clock is needed."""

from __future__ import annotations

import base64
import gzip
import http.client
import ipaddress
import logging
import re
import socket
import ssl
import subprocess
import threading
from argparse import Namespace

import bcrypt
import pytest
from prometheus_client.core import GaugeMetricFamily

from alnair.exporter import server as server_module
from alnair.exporter.registry import CollectorSpec
from alnair.exporter.sampler import CollectorRunner
from alnair.exporter.scrape import ScrapeAssembler
from alnair.exporter.server import ExporterServer, accepts_gzip
from alnair.exporter.webconfig import WebConfig
from support import parse_samples, serving_in_thread, wait_until, write_tls_files


def get(port, path="/", headers=None, context=None, source="127.0.0.1"):
    """(status, headers, raw body) of one GET, without proxies or transparent decompression."""
    if context is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers, response.read()
    finally:
        conn.close()


def metric_names(body: bytes, prefix: str) -> set[str]:
    return {key.split("{")[0] for key in parse_samples(body.decode()) if key.startswith(prefix)}


def test_metrics_has_text_content_type_node_info_and_build_info(start_exporter):
    exporter = start_exporter("--node.name=node-a", "--no-collector.cuda")
    status, headers, body = get(exporter.port, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = parse_samples(body.decode())
    assert samples['alnair_node_info{node="node-a"}'] == 1.0
    assert any(k.startswith("alnair_exporter_build_info{") and 'version="0.1.0"' in k for k in samples)
    wait_until(
        lambda: (
            parse_samples(get(exporter.port, "/metrics")[2].decode()).get(
                'alnair_exporter_collector_success{collector="host"}'
            )
            == 1.0
        )
    )


def test_node_name_comes_from_alnair_node_name_env(start_exporter):
    exporter = start_exporter("--no-collector.cuda", env={"ALNAIR_NODE_NAME": "node-from-env"})
    samples = parse_samples(get(exporter.port, "/metrics")[2].decode())
    assert samples['alnair_node_info{node="node-from-env"}'] == 1.0


def test_healthz_ok_and_unknown_paths_are_404(start_exporter):
    exporter = start_exporter("--no-collector.cuda")
    assert get(exporter.port, "/healthz")[::2] == (200, b"ok\n")
    assert get(exporter.port, "/nope")[::2] == (404, b"Not Found\n")
    assert get(exporter.port, "/metrics/extra")[0] == 404


def test_index_lists_enabled_and_disabled_collectors(start_exporter):
    exporter = start_exporter("--no-collector.cuda")
    status, headers, body = get(exporter.port, "/")
    page = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "<tr><td>cuda</td><td>disabled</td>" in page
    assert "<tr><td>host</td><td>" in page and "<tr><td>host</td><td>disabled</td>" not in page
    assert '<a href="/metrics">' in page


def test_gzip_when_accepted_has_same_host_metrics(start_exporter):
    exporter = start_exporter("--no-collector.cuda")
    wait_until(lambda: b"alnair_host_cpus" in get(exporter.port, "/metrics")[2])
    status, headers, raw = get(exporter.port, "/metrics", {"Accept-Encoding": "gzip"})
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    plain = get(exporter.port, "/metrics")
    assert "Content-Encoding" not in plain[1]
    names = metric_names(gzip.decompress(raw), "alnair_host_")
    assert "alnair_host_cpus" in names and "alnair_host_memory_total_bytes" in names
    assert names == metric_names(plain[2], "alnair_host_")


def test_telemetry_path_moves_the_metrics_endpoint(start_exporter):
    exporter = start_exporter("--no-collector.cuda", "--web.telemetry-path=/m")
    status, _, body = get(exporter.port, "/m")
    assert status == 200 and b"alnair_node_info" in body
    assert get(exporter.port, "/metrics")[0] == 404
    assert '<a href="/m">' in get(exporter.port, "/")[2].decode()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_basic_auth_from_web_config(start_exporter, tmp_path):
    hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=10)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  alice: '{hashed}'\n")
    exporter = start_exporter("--no-collector.cuda", f"--web.config.file={tmp_path / 'web.yml'}")
    status, headers, _ = get(exporter.port, "/metrics")
    assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="alnair"'
    assert get(exporter.port, "/metrics", basic("alice", "wrong"))[0] == 401
    assert get(exporter.port, "/healthz", basic("bob", "secret"))[0] == 401
    status, _, body = get(exporter.port, "/metrics", basic("alice", "secret"))
    assert status == 200 and b"alnair_node_info" in body


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory):
    """A CA and a server cert for 127.0.0.1 it signed, plus a web config using them."""
    d = tmp_path_factory.mktemp("tls")
    write_tls_files(d)
    (d / "web.yml").write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
    return d


def test_tls_serves_https_and_refuses_plain_http(start_exporter, tls_dir):
    exporter = start_exporter("--no-collector.cuda", f"--web.config.file={tls_dir / 'web.yml'}")
    trusting = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    status, _, body = get(exporter.port, "/metrics", context=trusting)
    assert status == 200 and b"alnair_node_info" in body
    with pytest.raises(ssl.SSLCertVerificationError):
        get(exporter.port, "/metrics", context=ssl.create_default_context())  # CA not trusted
    # Answered as Go's server answers it (node_exporter's too), so the scraper's error says what is wrong.
    status, _, body = get(exporter.port, "/metrics")
    assert (status, body) == (400, b"Client sent an HTTP request to an HTTPS server.\n")


def test_tls_client_sending_nothing_does_not_block_other_clients(start_exporter, tls_dir):
    exporter = start_exporter("--no-collector.cuda", f"--web.config.file={tls_dir / 'web.yml'}")
    trusting = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=10) as silent:
        status, _, body = get(exporter.port, "/healthz", context=trusting)
        assert (status, body) == (200, b"ok\n")
        silent.settimeout(0.2)
        with pytest.raises(TimeoutError):
            silent.recv(1)  # the silent client's connection is still open, waiting on its handshake


class HeldAssembler(ScrapeAssembler):
    """Renders only once `release` is set, announcing each held render on `entered`."""

    def __init__(self):
        super().__init__([], "node-a")
        self.entered, self.release = threading.Event(), threading.Event()
        self.renders = 0

    def render(self, compress):
        self.renders += 1
        self.entered.set()
        assert self.release.wait(10)
        return super().render(compress)


def serving(assembler, runners=(), known=(), max_requests=0):
    return serving_in_thread(
        ExporterServer(("127.0.0.1", 0), WebConfig(), assembler, list(runners), list(known), "/metrics", max_requests)
    )


def test_max_requests_rejects_concurrent_scrape_with_503_and_counts_it():
    assembler = HeldAssembler()
    with serving(assembler, max_requests=1) as port:
        held = {}
        first = threading.Thread(target=lambda: held.update(result=get(port, "/metrics")))
        first.start()
        try:
            assert assembler.entered.wait(10)
            status, _, body = get(port, "/metrics")
            assert (status, body) == (503, b"Too many concurrent scrapes\n")
            assert get(port, "/healthz")[0] == 200  # only scrapes take a slot
        finally:
            assembler.release.set()
            first.join(10)
        status, _, body = held["result"]
        assert status == 200
        assert parse_samples(body.decode())["alnair_exporter_scrapes_rejected_total"] == 1.0
        status, _, body = get(port, "/metrics")  # the slot was given back
        assert status == 200
        assert parse_samples(body.decode())["alnair_exporter_scrapes_rejected_total"] == 1.0


class Blocks:
    """Succeeds once, then blocks until options.release is set."""

    def __init__(self, options):
        self.options = options

    def collect(self):
        if self.options.samples:
            self.options.entered.set()
            self.options.release.wait(30)
        self.options.samples += 1
        return [GaugeMetricFamily("alnair_blocked_value", "Blocked collector output.", value=1)]


def test_healthz_503_names_hung_collector():
    clock = [1000.0]
    options = Namespace(samples=0, entered=threading.Event(), release=threading.Event())
    runner = CollectorRunner(CollectorSpec.of("blocked", Blocks), options, 0.01, clock=lambda: clock[0])
    runner.start()
    try:
        assert options.entered.wait(10)
        with serving(ScrapeAssembler([runner], "node-a"), [runner], ["blocked", "cuda"]) as port:
            assert get(port, "/healthz")[::2] == (200, b"ok\n")
            assert "<tr><td>blocked</td><td>ok</td>" in get(port, "/")[2].decode()
            clock[0] += runner.stale_after + 1
            assert get(port, "/healthz")[::2] == (503, b"collectors not sampling: blocked\n")
            page = get(port, "/")[2].decode()
            assert "<tr><td>blocked</td><td>hung</td>" in page
            assert "<tr><td>cuda</td><td>disabled</td>" in page
            samples = parse_samples(get(port, "/metrics")[2].decode())
            assert samples['alnair_exporter_collector_success{collector="blocked"}'] == 0.0
            assert "alnair_blocked_value" not in samples
    finally:
        options.release.set()
        runner.stop()


@pytest.mark.parametrize(
    "header, expected",
    [
        ("gzip", True),
        ("deflate, gzip;q=0.5", True),
        ("GZIP ; q=1.0", True),
        ("gzip;q=0", False),
        ("gzip;q=bad", False),
        ("identity", False),
        ("", False),
    ],
)
def test_gzip_is_used_only_when_accepted(header, expected):
    assert accepts_gzip(header) is expected


def test_the_listen_backlog_holds_a_burst_of_new_scrapers():
    with serving(ScrapeAssembler([], "node-a")) as port:
        listening = subprocess.run(
            ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
        ).stdout
        backlog = int(listening.split()[2])  # a listening socket's Send-Q is its backlog
        assert backlog == min(256, int(open("/proc/sys/net/core/somaxconn").read()))


def test_at_the_bound_the_connection_idle_longest_gives_way_and_only_busy_ones_make_a_new_one_wait():
    assembler = HeldAssembler()
    server = ExporterServer(("127.0.0.1", 0), WebConfig(), assembler, [], [], "/metrics", 0, max_connections=2)
    with serving_in_thread(server) as port:
        idle = socket.create_connection(("127.0.0.1", port), timeout=10)
        wait_until(lambda: server.open_connections == 1)
        results = []
        scrapes = [threading.Thread(target=lambda: results.append(get(port, "/metrics"))) for _ in range(2)]
        [scrape.start() for scrape in scrapes]
        try:
            wait_until(lambda: assembler.renders == 2)  # both scrapes are being answered: the idle one gave way
            assert idle.recv(100) == b""
            with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
                assert third.recv(100).startswith(b"HTTP/1.1 503 ") and third.recv(100) == b""
        finally:
            assembler.release.set()
            [scrape.join(10) for scrape in scrapes]
            idle.close()
        assert [status for status, _, _ in results] == [200, 200]
        wait_until(lambda: server.open_connections == 0)  # every place comes back


def test_a_priority_source_is_never_refused_by_max_requests():
    assembler = HeldAssembler()
    server = ExporterServer(
        ("127.0.0.1", 0),
        WebConfig(),
        assembler,
        [],
        [],
        "/metrics",
        1,
        priority_sources=[ipaddress.ip_network("127.0.0.2/32")],
    )
    with serving_in_thread(server) as port:
        results = {}
        held = [
            threading.Thread(target=lambda who=who: results.update({who: get(port, "/metrics", source=who)}))
            for who in ("127.0.0.1", "127.0.0.2")
        ]
        held[0].start()
        try:
            assert assembler.entered.wait(10)  # the one slot is taken
            held[1].start()
            wait_until(lambda: assembler.renders == 2)  # the priority scrape went in without a slot
            assert get(port, "/metrics")[0] == 503  # anyone else is refused as before
        finally:
            assembler.release.set()
            [t.join(10) for t in held]
        assert results["127.0.0.1"][0] == results["127.0.0.2"][0] == 200


def exchange(port: int, raw: bytes, timeout: float = 10) -> bytes:
    """Everything the server sends back for `raw` until it closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(raw)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
        return received


def statuses(received: bytes) -> list[int]:
    return [int(status) for status in re.findall(rb"HTTP/\d\.\d (\d{3}) ", received)]


def test_keep_alive_and_pipelined_requests_are_answered_in_order_on_one_connection():
    with serving(ScrapeAssembler([], "node-a")) as port:
        pipelined = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /nowhere HTTP/1.1\r\nHost: a\r\n\r\n"
        closing = b"HEAD /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        received = exchange(port, pipelined + closing)
        assert statuses(received) == [200, 404, 200]
        head = received[received.rindex(b"HTTP/1.1 200 ") :]
        assert b"Content-Length: 3\r\n" in head and head.endswith(b"Connection: close\r\n\r\n")  # HEAD: no body
        assert b"ok\n" in received and b"Not Found\n" in received


def test_http_1_0_closes_after_its_answer_unless_it_asks_to_keep_alive():
    with serving(ScrapeAssembler([], "node-a")) as port:
        assert statuses(exchange(port, b"GET /healthz HTTP/1.0\r\n\r\n")) == [200]
        kept = b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /healthz HTTP/1.0\r\n\r\n"
        assert statuses(exchange(port, kept)) == [200, 200]


MALFORMED = {
    "not HTTP": (b"GARBAGE\r\n\r\n", 400),
    "no colon": (b"GET /healthz HTTP/1.1\r\nHost: a\r\nno colon here\r\n\r\n", 400),
    "folded": (b"GET /healthz HTTP/1.1\r\nHost: a\r\nX: 1\r\n folded\r\n\r\n", 400),
    "long field": (b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n", 400),
    "101 fields": (
        b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n",
        400,
    ),
    "no Host": (b"GET /healthz HTTP/1.1\r\n\r\n", 400),
    "two lengths": (b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
    "TLS ClientHello": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400),  # told at once, not after a timeout
    "HTTP/2.0": (b"GET /healthz HTTP/2.0\r\nHost: a\r\n\r\n", 505),
}


@pytest.mark.parametrize("raw, status", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_gets_its_status_a_log_line_and_the_connection_closes(raw, status, caplog):
    with serving(ScrapeAssembler([], "node-a")) as port, caplog.at_level(logging.INFO, logger="alnair.exporter"):
        assert statuses(exchange(port, raw)) == [status]
    (line,) = [record for record in caplog.records if record.name.startswith("alnair.exporter")]
    assert line.levelno == logging.WARNING and line.getMessage().startswith("malformed request from 127.0.0.1: ")
    assert "\n" not in line.getMessage()


def test_a_body_is_never_read_and_one_that_never_comes_ends_the_connection_after_its_answer():
    with serving(ScrapeAssembler([], "node-a")) as port:
        chunked = (
            b"GET /healthz HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n"
        )
        assert statuses(exchange(port, chunked)) == [200]
        assert statuses(exchange(port, b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 999999\r\n\r\n")) == [200]


def test_a_small_body_is_read_past_and_other_methods_are_refused_with_405():
    with serving(ScrapeAssembler([], "node-a")) as port:
        raw = (
            b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello"
            b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        received = exchange(port, raw)
        assert statuses(received) == [200, 405] and b"Allow: GET, HEAD\r\n" in received


def test_a_client_slow_to_send_its_head_is_cut_off_without_holding_up_others(monkeypatch):
    monkeypatch.setattr(server_module, "IDLE_TIMEOUT", 0.5)
    with serving(ScrapeAssembler([], "node-a")) as port:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
            assert get(port, "/healthz")[0] == 200
            assert slow.recv(100) == b""  # closed once its deadline passed, unanswered


def test_open_connections_and_refusals_cost_no_thread():
    assembler = HeldAssembler()
    with serving(assembler, max_requests=1) as port:
        first = threading.Thread(target=lambda: get(port, "/metrics"))
        first.start()
        clients = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(50)]
        try:
            assert assembler.entered.wait(10)
            threads = threading.active_count()
            for client in clients:  # each stays open after its refusal, as a keep-alive flood's do
                client.request("GET", "/metrics")
                response = client.getresponse()
                assert (response.status, response.read()) == (503, b"Too many concurrent scrapes\n")
            assert threading.active_count() == threads
        finally:
            assembler.release.set()
            first.join(10)
            [client.close() for client in clients]
