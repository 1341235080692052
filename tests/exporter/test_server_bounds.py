"""The real exporter under connections anyone can open: idle ones never keep a priority source out (hardening
finding 2), and SIGTERM ends it within a bound while clients keep scraping (finding 5)."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import threading

from alnair.exporter.server import MAX_CONNECTIONS
from support import wait_until

IDLE = 300  # more than MAX_CONNECTIONS, from an address that is not a priority source
PRIORITY_SOURCE = "127.0.0.2"


def get(port: int, path: str, source: str = "127.0.0.1") -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def closed(conn: socket.socket) -> bool:
    """Whether the server closed the connection (conn is non-blocking)."""
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionError:
        return True


def test_idle_connections_from_anyone_never_keep_a_priority_source_out(start_exporter):
    exporter = start_exporter("--no-collector.cuda", "--no-collector.nvml", f"--web.priority-sources={PRIORITY_SOURCE}")
    idle = [socket.create_connection(("127.0.0.1", exporter.port), timeout=10) for _ in range(IDLE)]
    [conn.setblocking(False) for conn in idle]
    try:
        assert get(exporter.port, "/metrics", PRIORITY_SOURCE) == 200  # accepted after them all, to a place of its own
        # Accepted in order: at the bound, each new one took the place of the one idle the longest.
        wait_until(lambda: sum(map(closed, idle)) == IDLE - MAX_CONNECTIONS)
        assert all(map(closed, idle[: IDLE - MAX_CONNECTIONS]))
        assert get(exporter.port, "/metrics") == 200  # anyone else: the oldest idle connection gives way
        wait_until(lambda: sum(map(closed, idle)) == IDLE - MAX_CONNECTIONS + 1)
    finally:
        for conn in idle:
            conn.close()


def scrape_until(port: int, stop: threading.Event, answered: list[int]) -> None:
    """GET /metrics back to back on a keep-alive connection, a new one whenever it ends, until stop."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            response.read()
            answered.append(response.status)
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            stop.wait(0.01)  # refused once the exporter stopped listening: no busy loop
    conn.close()


def test_sigterm_ends_the_exporter_within_5_s_while_clients_keep_scraping(start_exporter):
    exporter = start_exporter("--no-collector.cuda", "--no-collector.nvml")
    stop, answered = threading.Event(), []
    scrapers = [threading.Thread(target=scrape_until, args=(exporter.port, stop, answered)) for _ in range(16)]
    [scraper.start() for scraper in scrapers]
    try:
        wait_until(lambda: len(answered) >= 200)  # the scrapers are going
        exporter.proc.send_signal(signal.SIGTERM)
        try:
            returncode = exporter.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            returncode = None
        assert returncode == 0, exporter.log_path.read_text()[-2000:]
    finally:
        stop.set()
        [scraper.join(20) for scraper in scrapers]
    assert "shutting down" in exporter.log_path.read_text()
