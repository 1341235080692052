"""The webhook under connections anyone who reaches its port can open (hardening finding 3): whatever arrives, it
holds a bounded number of them and stays well under the chart's memory limit, and the API server's reviews are
still answered; and a request it cannot parse gets 400 and a log line (finding 9)."""

from __future__ import annotations

import logging
import os
import resource
import socket

import pytest

from alnair.injector import server
from alnair.injector.patch import Settings
from alnair.injector.server import MAX_CONNECTIONS
from injector_support import LIBRARY_HOST_PATH, exchange_over_tls, make_pod
from log_lines import records
from support import serving_in_thread

IDLE = 2000  # idle connections: a thread each once took ~67 KB, and ~1,550 passed the chart's 128Mi
CHART_LIMIT_BYTES = 128 << 20  # helm/alnair/values.yaml: injector.resources.limits.memory


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


def open_sockets(pid: int) -> int:
    def is_socket(fd: str) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except FileNotFoundError:  # closed meanwhile
            return False

    return sum(map(is_socket, os.listdir(f"/proc/{pid}/fd")))


def test_idle_connections_leave_connections_and_memory_bounded_and_reviews_answered(start_injector):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * IDLE)), hard))
    injector = start_injector()
    idle = [socket.create_connection(("127.0.0.1", injector.port), timeout=10) for _ in range(IDLE)]
    try:
        # Accepted after every idle one: answered, it shows they have all been taken in (or closed).
        assert injector.review(make_pod())["allowed"] is True
        assert open_sockets(injector.proc.pid) <= MAX_CONNECTIONS + 3  # and the listener, and the loop's self-pipe
        assert rss_bytes(injector.proc.pid) < CHART_LIMIT_BYTES / 2
        assert injector.healthy()
    finally:
        for conn in idle:
            conn.close()


MALFORMED = {
    "no Host": (b"GET /healthz HTTP/1.1\r\n\r\n", "Missing 'Host' header in request."),
    "not HTTP": (b"GARBAGE\r\n\r\n", "Invalid method encountered: b'GARBAGE' ^"),
    "no colon": (
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
        "Invalid header token: b'no colon here' ^",
    ),
}


@pytest.mark.parametrize("raw, problem", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_request_it_cannot_parse_gets_400_and_a_log_line(injector, raw, problem):
    reply = exchange_over_tls(injector.port, injector.tls_dir / "ca.crt", raw)
    assert reply.startswith(b"HTTP/1.0 400 Bad Request\r\n")
    assert ("warn", f"malformed request from 127.0.0.1: {problem}") in [
        (r["level"], r["msg"]) for r in records(injector.log(), "logfmt")
    ]
    assert injector.healthy()


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_logged(tls_dir, monkeypatch, caplog):
    monkeypatch.setattr(server, "BODY_TIMEOUT", 0.5)
    tls = server.LiveTLS(str(tls_dir / "server.crt"), str(tls_dir / "server.key"))
    settings = Settings(LIBRARY_HOST_PATH, "/run/alnair/shm", False, "9.9.9")
    with (
        serving_in_thread(server.InjectorServer(("127.0.0.1", 0), tls, settings)) as port,
        caplog.at_level(logging.WARNING, logger="alnair.injector"),
    ):
        head_and_a_byte = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
        reply = exchange_over_tls(port, tls_dir / "ca.crt", head_and_a_byte)
    assert reply.startswith(b"HTTP/1.1 408 ") and reply.endswith(b"the body did not arrive in time\n")
    assert [r.getMessage() for r in caplog.records] == ["the review from 127.0.0.1 did not arrive within 0.5 s"]
