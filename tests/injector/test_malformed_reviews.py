"""Reviews no API server sends, as anything that can reach the webhook's port may: whatever a body holds, the
injector answers it (a review, or 400 saying why, in one log line) and goes on serving; an error of its own is
answered 500 with its traceback in the log, never a connection dropped unanswered."""

from __future__ import annotations

import copy
import http.client
import json
import logging
import ssl

import pytest

from alnair.injector import server
from alnair.injector.patch import Settings
from injector_support import LIBRARY_HOST_PATH, admission_review, container, make_pod
from log_lines import records
from support import serving_in_thread

# What a value of a review may be replaced by: every JSON type, empty and not, and a string that breaks a line.
WRONG = [None, 7, "line\nbreak", [], ["x"], {}, {"x": ["y"]}]
REVIEW = admission_review(
    make_pod(
        container(
            "trainer",
            env=[{"name": "LD_PRELOAD", "value": "/lib/a.so"}, {"name": "ALNAIR_MEMORY_LIMIT", "value": "8Gi"}],
            volumeMounts=[{"name": "data", "mountPath": "/data"}],
        ),
        initContainers=[
            container(
                "fetch",
                env=[{"name": "ALNAIR_COMPUTE_LIMIT", "value": "30"}, {"name": "ALNAIR_COMPUTE_SHARE", "value": "40"}],
            )
        ],
        volumes=[{"name": "data", "emptyDir": {}}],
        annotations={"alnair.io/compute-limit": "30", "alnair.io/compute-share": "40"},
    )
)


def places(node, path: tuple = ()):
    """The key path of every value in a JSON document, the document's own () first."""
    yield path
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from places(child, (*path, key))


def replaced(document, path: tuple, value) -> bytes:
    """The document with the value at path replaced, as a body."""
    if not path:
        return json.dumps(value).encode()
    changed = copy.deepcopy(document)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(changed).encode()


def statuses(injector, bodies: list[bytes]) -> list[int | None]:
    """Each body's answer status, sent down one kept-alive connection as the API server does; None where the
    connection ended unanswered (then the next goes down a new one)."""
    found, connection = [], injector.connect()
    for body in bodies:
        try:
            connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            reply.read()
            found.append(reply.status)
        except (OSError, http.client.HTTPException):
            found.append(None)
            connection.close()
            connection = injector.connect()
    connection.close()
    return found


def test_any_value_of_a_review_replaced_by_any_json_type_is_answered_in_one_log_line(injector):
    cases = [(path, wrong) for path in places(REVIEW) for wrong in WRONG]
    logged_before = injector.log().count("bad AdmissionReview")
    answered = statuses(injector, [replaced(REVIEW, path, wrong) for path, wrong in cases])
    assert [(path, wrong, status) for (path, wrong), status in zip(cases, answered) if status not in (200, 400)] == []
    assert injector.log().count("bad AdmissionReview") - logged_before == answered.count(400)
    records(injector.log(), "logfmt")  # every line parses, the review's "line\nbreak" escaped: none forged
    assert injector.healthy()


@pytest.mark.parametrize(
    "nested", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "0" + "}" * 100_000], ids=["arrays", "objects"]
)
def test_a_body_nested_too_deeply_is_answered_400(injector, nested):
    body = json.dumps({**REVIEW, "request": {**REVIEW["request"], "oldObject": "NESTED"}}).replace('"NESTED"', nested)
    assert injector.post(body.encode()) == (400, b"the body is nested too deeply\n")
    assert "bad AdmissionReview from 127.0.0.1: the body is nested too deeply" in injector.log()
    assert injector.healthy()


def test_a_body_of_too_many_tiny_values_is_refused_before_it_is_parsed(injector):
    """Parsed, 8 MiB of [] would take ~150 MiB: past the chart's 128 MiB limit for the webhook."""
    body = json.dumps({**REVIEW, "request": {**REVIEW["request"], "oldObject": "MANY"}}).replace(
        '"MANY"', "[" + "[]," * 600_000 + "[]]"
    )
    assert injector.post(body.encode()) == (400, b"the body holds more than 500000 JSON values\n")
    assert "the body holds more than 500000 JSON values" in injector.log()
    assert injector.healthy()


def test_an_error_of_the_injectors_own_is_answered_500_and_logged(tls_dir, monkeypatch, caplog):
    def failing(body: bytes, settings: Settings) -> bytes:
        raise KeyError("a bug")

    monkeypatch.setattr(server, "answer", failing)
    tls = server.LiveTLS(str(tls_dir / "server.crt"), str(tls_dir / "server.key"))
    settings = Settings(LIBRARY_HOST_PATH, "/run/alnair/shm", False, "9.9.9")
    context = ssl.create_default_context(cafile=str(tls_dir / "ca.crt"))
    with (
        serving_in_thread(server.InjectorServer(("127.0.0.1", 0), tls, settings)) as port,
        caplog.at_level(logging.ERROR, logger="alnair.injector"),
    ):
        connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        connection.request("POST", "/mutate", json.dumps(REVIEW).encode())
        reply = connection.getresponse()
        assert (reply.status, reply.read()) == (500, b"the injector failed on this review; its log says why\n")
        connection.close()
    (record,) = caplog.records
    assert record.getMessage() == "cannot answer the review from 127.0.0.1"
    assert record.exc_info[0] is KeyError
