"""`alnair profile` against a broken or hostile Prometheus (a test double on 127.0.0.1): malformed answers are one
line and exit 2, a failing server one line and exit 1, a slow drip ends at --timeout, an answer over
--max-answer-mib is refused unread, and the server's control characters are never printed raw."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from support import free_port

PROFILE = [sys.executable, "-m", "alnair.cli.main", "profile"]
RANGE = ["--start", "999999000", "--end", "1000000600"]
INFO = {"__name__": "alnair_python_process_info", "instance": "node-1:9400", "pid": "7"}
MiB = 1 << 20


class HostilePrometheusDouble:
    """A test double of Prometheus, no Prometheus: /api/v1/status/buildinfo answers as Prometheus does, and every
    query is answered by `answer(double, handler, query)`, which writes whatever bytes the test chose."""

    def __init__(self, answer):
        self.answer, self.sent, self.stop = answer, 0, threading.Event()
        double = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                double.send(self, http(json.dumps({"status": "success", "data": {"version": "2.53.0"}}).encode()))

            def do_POST(self):
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                try:
                    double.answer(double, self, form["query"][0])
                except OSError:
                    pass  # the client hung up, as it should on a hostile answer

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def send(self, handler, data: bytes) -> None:
        handler.wfile.write(data)  # unbuffered: what returns has been handed to the socket
        self.sent += len(data)

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def http(body: bytes, status: str = "200 OK") -> bytes:
    return f"HTTP/1.0 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body


def replying(body: bytes, status: str = "200 OK"):
    """An answer: the same HTTP reply to every query."""
    return lambda double, handler, query: double.send(handler, http(body, status))


def matrix(*result) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": list(result)}}).encode()


@pytest.fixture
def serve():
    doubles = []

    def start(answer) -> HostilePrometheusDouble:
        doubles.append(HostilePrometheusDouble(answer))
        return doubles[-1]

    yield start
    for double in doubles:
        double.close()


def profile(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PROFILE, "--prometheus", url, *RANGE, "-q", *args], capture_output=True, text=True, timeout=timeout
    )


def one_line(result: subprocess.CompletedProcess, status: int) -> str:
    """The error line, once the command is known to have printed only it and exited with `status`."""
    assert (result.returncode, result.stdout) == (status, ""), result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("alnair profile: error: "), line
    return line


@pytest.mark.parametrize(
    "body, message",
    [
        (b"[" * 100_000, "/api/v1/query did not answer a JSON object"),  # nested past the parser's depth
        (b'{"status": "fine", "data": {}}', "/api/v1/query answered no status success with data"),
        (b'{"status": "success"}', "/api/v1/query answered no status success with data"),
        (b'{"status": "success", "data": [1]}', "/api/v1/query answered no matrix result"),
        (matrix({"metric": INFO, "value": [1e9, "1"]}).replace(b'"matrix"', b'"vector"'), "answered no matrix result"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": {"a": 1}}}', "answered no matrix result"),
        (matrix(1), "answered result[0] that is not a series (metric and values)"),
        (matrix({"values": [[1e9, "1"]]}), "answered result[0] that is not a series (metric and values)"),
        (
            matrix({"metric": {**INFO, "pid": 7}, "values": [[1e9, "1"]]}),
            "answered result[0].metric that is not labels",
        ),
        (matrix({"metric": INFO, "values": [[1e9]]}), "answered result[0].values that are not [time, value] pairs"),
        (matrix({"metric": INFO, "values": [[1e9, "1", "2"]]}), "answered result[0].values that are not [time, value]"),
        (matrix({"metric": INFO, "values": [[1e9, "abc"]]}), "answered result[0].values that are not [time, value]"),
        (
            matrix({"metric": INFO, "values": [[1e9, "1"]]}).replace(b"1000000000.0", b"NaN"),
            "did not answer a JSON object",
        ),
        (
            matrix({"metric": INFO, "values": [[1e9, "1"]]}).replace(b"1000000000.0", b"1e999"),
            "result[0].values that are",
        ),
        (matrix({"metric": INFO, "values": [[10**400, "1"]]}), "answered result[0].values that are not [time, value]"),
        (
            matrix({"metric": INFO, "values": [["1000000000", "1"]]}),
            "answered result[0].values that are not [time, value]",
        ),
    ],
    ids=[
        "deep JSON",
        "odd status",
        "no data",
        "data not an object",
        "vector",
        "result not a list",
        "item not an object",
        "no metric",
        "label not a string",
        "pair of one",
        "pair of three",
        "value not a number",
        "time NaN",
        "time 1e999",
        "time overflows",
        "time a string",
    ],
)
def test_a_malformed_answer_is_one_line_and_exit_2(serve, body, message):
    double = serve(replying(body))
    line = one_line(profile(double.url), 2)
    assert f"{double.url} is not a Prometheus: " in line and message in line, line


def test_an_answer_that_is_not_http_is_one_line_and_exit_2(serve):
    double = serve(lambda double, handler, query: double.send(handler, b"SSH-2.0-OpenSSH_9.6\r\n"))
    line = one_line(profile(double.url), 2)
    assert f"{double.url} is not a Prometheus: /api/v1/query did not answer HTTP" in line, line


@pytest.mark.parametrize(
    "answer, message",
    [
        (replying(b"<html>bad gateway</html>", "502 Bad Gateway"), "failed: HTTP 502 for /api/v1/query"),
        (
            replying(
                b'{"status": "error", "errorType": "unavailable", "error": "shutting down"}', "503 Service Unavailable"
            ),
            "Prometheus failed the query: shutting down",
        ),
        (
            replying(
                b'{"status": "error", "errorType": "execution", "error": "too many samples"}', "422 Unprocessable"
            ),
            "Prometheus failed the query: too many samples",
        ),
        (lambda double, handler, query: None, "cannot reach Prometheus at"),  # hangs up without an answer
    ],
    ids=["HTTP 502", "status error 503", "status error 422", "hangs up"],
)
def test_a_failing_prometheus_is_one_line_and_exit_1(serve, answer, message):
    line = one_line(profile(serve(answer).url), 1)
    assert message in line, line


def test_an_unreachable_prometheus_is_one_line_and_exit_1():
    url = f"http://127.0.0.1:{free_port()}"
    assert f"cannot reach Prometheus at {url}: " in one_line(profile(url), 1)


def drip(head: bytes):
    """An answer: `head` at once, then a byte every 0.2 s (each resets a socket timeout) until the client goes."""

    def answer(double, handler, query):
        double.send(handler, head)
        while not double.stop.wait(0.2):
            double.send(handler, b" ")

    return answer


@pytest.mark.parametrize(
    "head",
    [b"HTTP/1.0 200 OK\r\nX-Slow: ", b"HTTP/1.0 200 OK\r\nContent-Length: 1000000\r\n\r\n{"],
    ids=["headers", "body"],
)
def test_a_slow_drip_ends_at_the_timeout_with_exit_1(serve, head):
    double = serve(drip(head))
    began = time.monotonic()
    line = one_line(profile(double.url, "--timeout", "1s", timeout=60), 1)
    assert f"Prometheus at {double.url} did not answer /api/v1/query within 1 s" in line, line
    assert time.monotonic() - began < 30  # 1 s and the interpreter's start; the drip alone would never end


def test_an_answer_over_the_bound_is_refused_unread(serve):
    def stream(double, handler, query):  # no Content-Length: the answer ends only when the server closes
        double.send(handler, b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + matrix()[:-3])
        for _ in range(256):
            double.send(handler, b" " * MiB)

    double = serve(stream)
    line = one_line(profile(double.url, "--max-answer-mib", "1"), 2)
    assert f"{double.url}: the answer to /api/v1/query is larger than 1 MiB" in line, line
    # 256 MiB offered: the command read one and went; what the socket buffers took before it went is all the rest
    assert double.sent < 32 * MiB, double.sent


HOSTILE_TEXT = "\x1b[2J\x1b]0;owned\x07\x9b31m\x7f\nforged line\u202e"


def test_the_servers_text_in_an_error_is_escaped_and_cut(serve):
    error = json.dumps({"status": "error", "errorType": "bad_data", "error": HOSTILE_TEXT + "x" * 100_000})
    line = one_line(profile(serve(replying(error.encode(), "400 Bad Request")).url), 2)
    assert "Prometheus refused the query: \\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\x7f\\nforged line\\u202e" in line, line
    assert len(line) < 1000


def by_family(**series):
    """An answer: each family's series (name=[(labels, value), ...]) sampled at 1e9, no series for other families."""

    def answer(double, handler, query):
        found = series.get(query.split("{")[0], [])
        double.send(handler, http(matrix(*[{"metric": labels, "values": [[1e9, value]]} for labels, value in found])))

    return answer


def test_label_values_are_escaped_in_the_rows(serve):
    labels = {**INFO, "pod": HOSTILE_TEXT, "namespace": "team\x1b[31m", "comm": "py\rthon"}
    result = profile(serve(by_family(alnair_python_process_info=[(labels, "1")])).url)
    assert (result.returncode, result.stderr) == (0, "")
    # text=True reads a raw \r as \n: two lines (header and row) say there was none
    assert not any(c in result.stdout for c in "\x1b\x07\x9b\x7f\u202e") and result.stdout.count("\n") == 2
    [row] = list(csv.DictReader(io.StringIO(result.stdout)))
    assert (row["pod"], row["namespace"], row["comm"]) == (
        "\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\x7f\\nforged line\\u202e",
        "team\\x1b[31m",
        "py\\rthon",
    )


def test_nan_and_infinite_values_are_gaps_not_errors(serve):
    """Prometheus stores NaN and infinities an exporter exposes, and answers them as such: samples left out."""
    steps = [(INFO, "NaN"), ({**INFO, "pid": "8"}, "+Inf")]
    info = [(INFO, "1"), ({**INFO, "pid": "8"}, "1")]
    result = profile(serve(by_family(alnair_python_process_info=info, alnair_python_steps_total=steps)).url)
    assert (result.returncode, result.stderr) == (0, "")
    assert [r["pid"] for r in csv.DictReader(io.StringIO(result.stdout))] == ["7", "8"]


def test_a_job_without_samples_in_the_range_is_the_last_row(serve):
    # only its info series names job 8: without a sample of any other family it has no start, and goes last
    info = [(INFO, "1"), ({**INFO, "pid": "8"}, "1")]
    result = profile(serve(by_family(alnair_python_process_info=info, alnair_python_steps_total=[(INFO, "5")])).url)
    assert (result.returncode, result.stderr) == (0, "")
    assert [(r["pid"], r["start_time"]) for r in csv.DictReader(io.StringIO(result.stdout))] == [
        ("7", "1000000000.0"),
        ("8", ""),
    ]


def test_a_value_too_large_for_its_parquet_column_is_one_line_and_exit_2(serve, tmp_path):
    node = {"instance": INFO["instance"]}
    double = serve(by_family(alnair_python_process_info=[(INFO, "1")], alnair_host_cpus=[(node, "1e300")]))
    line = one_line(profile(double.url, "-o", str(tmp_path / "jobs.parquet")), 2)
    assert "a value does not fit its Parquet column: " in line, line
