"""Real AdmissionReview requests to the injector over HTTPS; every patch is applied to its pod, and the pod that
comes out is checked field by field and against the Kubernetes 1.29 and 1.33 schemas."""

from __future__ import annotations

import json
import socket

import pytest

from alnair.commandline import version
from injector_support import (
    LIBRARY_HOST_PATH,
    admission_review,
    applied,
    container,
    env_of,
    exchange_over_tls,
    make_pod,
    mounts_of,
)
from limit_cases import EMPTY_ITEM, FRACTIONAL, GOOD_COMPUTE, TOO_BIG, WANT_BYTES, WANT_PERCENT
from log_lines import logged

LIBRARY = "/opt/alnair/lib/libalnair.so"
PYTHON_PATH = "/opt/alnair/python"
VOLUMES = [
    {"name": "alnair-lib", "hostPath": {"path": LIBRARY_HOST_PATH, "type": "Directory"}},
    {"name": "alnair-shm", "hostPath": {"path": "/run/alnair/shm", "type": "Directory"}},
]
MOUNTS = [("alnair-lib", "/opt/alnair", True), ("alnair-shm", "/run/alnair/shm", False)]
BASE_ENV = {"LD_PRELOAD": LIBRARY, "ALNAIR_SHM_DIR": "/run/alnair/shm"}
PYTHON_ENV = {"PYTHONPATH": PYTHON_PATH, "ALNAIR_PYTHON_INTERCEPT": "1"}
MEMORY_SYNTAX = f"{WANT_BYTES} (the syntax of ALNAIR_MEMORY_LIMIT)"
COMPUTE_SYNTAX = f"{WANT_PERCENT} (the syntax of ALNAIR_COMPUTE_LIMIT)"
# The cap and the share, annotation -> variable: one grammar, so the webhook treats them alike.
COMPUTE = {"alnair.io/compute-limit": "ALNAIR_COMPUTE_LIMIT", "alnair.io/compute-share": "ALNAIR_COMPUTE_SHARE"}


def for_each_compute(case) -> list:
    """case(annotation, variable) for the cap and for the share."""
    return [case(annotation, variable) for annotation, variable in COMPUTE.items()]


def test_a_labelled_pod_gets_the_volumes_the_mounts_and_the_variables_in_every_container(injector):
    pod = make_pod("trainer", "logger", initContainers=[container("fetch-data")])
    injected = injector.inject(pod)
    assert injected["spec"]["volumes"] == VOLUMES
    for name, result in zip(("trainer", "logger"), injected["spec"]["containers"]):
        assert result["name"] == name
        assert mounts_of(result) == MOUNTS
        assert env_of(result) == BASE_ENV
    assert injected["spec"]["initContainers"] == pod["spec"]["initContainers"]  # setup steps run without it
    assert injected["metadata"]["annotations"] == {"alnair.io/injected": version()}
    assert injected["metadata"]["labels"] == pod["metadata"]["labels"]


def test_a_pod_without_the_label_is_injected_since_its_namespace_was_selected(injector):
    pod = make_pod()
    del pod["metadata"]["labels"]
    injected = injector.inject(pod)
    assert env_of(injected["spec"]["containers"][0]) == BASE_ENV


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_only_a_pods_creation_is_injected(injector, operation):
    response = injector.review(make_pod(), operation=operation)
    assert response == {"uid": response["uid"], "allowed": True}


def test_a_pod_that_opts_out_is_left_as_it_is(injector):
    response = injector.review(
        make_pod(
            labels={"alnair.io/inject": "false"},
            # not even checked
            annotations={"alnair.io/memory-limit": "lots"},
        )
    )
    assert response["allowed"] is True and "patch" not in response


@pytest.mark.parametrize(
    "kind, sub_resource",
    [
        ({"group": "apps", "version": "v1", "kind": "Deployment"}, ""),
        ({"group": "", "version": "v1", "kind": "Pod"}, "ephemeralcontainers"),
    ],
)
def test_anything_but_a_pod_itself_is_allowed_unchanged(injector, kind, sub_resource):
    response = injector.review(make_pod(), kind=kind, subResource=sub_resource)
    assert response["allowed"] is True and "patch" not in response


def test_the_annotations_become_the_intercepts_variables(injector):
    annotations = {
        "alnair.io/memory-limit": "0=8Gi,1=4Gi",
        "alnair.io/compute-limit": "30",
        "alnair.io/compute-share": "0=20,1=70",
        "alnair.io/python-intercept": "true",
        "team": "vision",
    }
    pod = make_pod("trainer", "evaluator", annotations=annotations, initContainers=[container("fetch-data")])
    injected = injector.inject(pod)
    for result in injected["spec"]["containers"]:
        assert env_of(result) == {
            **BASE_ENV,
            **PYTHON_ENV,
            "ALNAIR_MEMORY_LIMIT": "0=8Gi,1=4Gi",
            "ALNAIR_COMPUTE_LIMIT": "30",
            "ALNAIR_COMPUTE_SHARE": "0=20,1=70",
        }
    assert injected["spec"]["initContainers"] == pod["spec"]["initContainers"]  # not injected, limits or not
    assert injected["metadata"]["annotations"] == {**annotations, "alnair.io/injected": version()}


@pytest.mark.parametrize("annotation, variable", list(COMPUTE.items()))
@pytest.mark.parametrize("value", GOOD_COMPUTE)
def test_a_compute_annotation_is_injected_as_given(injector, annotation, variable, value):
    injected = injector.inject(make_pod("trainer", annotations={annotation: value}))
    assert env_of(injected["spec"]["containers"][0]) == {**BASE_ENV, variable: value}


@pytest.mark.parametrize(
    "annotations",
    [
        {"alnair.io/python-intercept": "false"},
        {"alnair.io/memory-limit": "", "alnair.io/compute-limit": "", "alnair.io/compute-share": ""},
    ],
)
def test_false_and_empty_annotations_add_nothing(injector, annotations):
    injected = injector.inject(make_pod(annotations=annotations))
    assert env_of(injected["spec"]["containers"][0]) == BASE_ENV


def test_the_python_intercept_can_be_on_by_default_and_off_by_annotation(start_injector):
    on = start_injector("--python-intercept-default")
    assert env_of(on.inject(make_pod())["spec"]["containers"][0]) == {**BASE_ENV, **PYTHON_ENV}
    off = on.inject(make_pod(annotations={"alnair.io/python-intercept": "false"}))
    assert env_of(off["spec"]["containers"][0]) == BASE_ENV


@pytest.mark.parametrize(
    "annotations, message",
    [
        ({"alnair.io/memory-limit": "1e30"}, f'annotation alnair.io/memory-limit="1e30": {MEMORY_SYNTAX}'),
        (
            {"alnair.io/memory-limit": "0.5"},
            'annotation alnair.io/memory-limit="0.5": not a whole number of bytes (the syntax of ALNAIR_MEMORY_LIMIT)',
        ),
        (
            {"alnair.io/memory-limit": "0"},
            'annotation alnair.io/memory-limit="0": a limit of 0 bytes (leave it unset '
            "for no limit) (the syntax of ALNAIR_MEMORY_LIMIT)",
        ),
        (
            {"alnair.io/memory-limit": "2Pi"},
            'annotation alnair.io/memory-limit="2Pi": more than 1Pi (2^50 bytes) (the syntax of ALNAIR_MEMORY_LIMIT)',
        ),
        ({"alnair.io/memory-limit": "8 Gi\n"}, f'annotation alnair.io/memory-limit="8 Gi\\x0a": {MEMORY_SYNTAX}'),
        ({"alnair.io/memory-limit": "8Gé"}, f'annotation alnair.io/memory-limit="8G\\xc3\\xa9": {MEMORY_SYNTAX}'),
        (
            {"alnair.io/memory-limit": "1" * 200},
            f'annotation alnair.io/memory-limit="{"1" * 150}...": more than 1Pi '
            "(2^50 bytes) (the syntax of ALNAIR_MEMORY_LIMIT)",
        ),
        *(
            case
            for value, why in [
                ("30%", WANT_PERCENT),
                ("0=30,0=70", "a device is given twice"),
                ("64=30", "a device index is not 0-63"),
            ]
            for case in for_each_compute(
                lambda a, v, value=value, why=why: ({a: value}, f'annotation {a}="{value}": {why} (the syntax of {v})')
            )
        ),
        ({"alnair.io/python-intercept": "yes"}, 'annotation alnair.io/python-intercept="yes": want "true" or "false"'),
        (
            {"alnair.io/python-intercept": "True"},
            'annotation alnair.io/python-intercept="True": want "true" or "false"',
        ),
        (
            {"alnair.io/memory-limit": "lots", "alnair.io/compute-limit": "250"},
            f'annotation alnair.io/memory-limit="lots": {MEMORY_SYNTAX}; '
            f'annotation alnair.io/compute-limit="250": {COMPUTE_SYNTAX}',
        ),
        (
            {"alnair.io/compute-share": "0", "alnair.io/compute-limit": "101"},  # in the webhook's order, not the pod's
            f'annotation alnair.io/compute-limit="101": {COMPUTE_SYNTAX}; '
            f'annotation alnair.io/compute-share="0": {WANT_PERCENT} (the syntax of ALNAIR_COMPUTE_SHARE)',
        ),
    ],
)
def test_a_bad_annotation_refuses_the_pod_saying_which_and_why(injector, annotations, message):
    response = injector.review(make_pod(annotations=annotations))
    assert response == {"uid": response["uid"], "allowed": False, "status": {"code": 400, "message": message}}
    assert message in logged(injector.log())  # the refusal is logged too, with the pod's name


@pytest.mark.parametrize(
    "pod, message",
    [
        *for_each_compute(
            lambda a, v: (
                make_pod(container("trainer", env=[{"name": v, "value": "150"}])),
                f"container 'trainer' sets {v}=\"150\": {WANT_PERCENT}",
            )
        ),
        *for_each_compute(
            lambda a, v: (
                make_pod("trainer", container("evaluator", env=[{"name": v, "value": "abc"}])),
                f"container 'evaluator' sets {v}=\"abc\": {WANT_PERCENT}",
            )
        ),
        *for_each_compute(
            lambda a, v: (
                make_pod(initContainers=[container("fetch", env=[{"name": v, "value": "0=30,"}])]),
                f"init container 'fetch' sets {v}=\"0=30,\": {EMPTY_ITEM}",
            )
        ),
        (
            make_pod(initContainers=[container("fetch-data", env=[{"name": "ALNAIR_MEMORY_LIMIT", "value": "8 Gi"}])]),
            f"init container 'fetch-data' sets ALNAIR_MEMORY_LIMIT=\"8 Gi\": {WANT_BYTES}",
        ),
        # each entry, not the last
        (
            make_pod(
                container(
                    "trainer",
                    env=[
                        {"name": "ALNAIR_MEMORY_LIMIT", "value": "0.5"},
                        {"name": "ALNAIR_MEMORY_LIMIT", "value": "1Gi"},
                    ],
                )
            ),
            f"container 'trainer' sets ALNAIR_MEMORY_LIMIT=\"0.5\": {FRACTIONAL}",
        ),
        (
            make_pod(
                container("trainer", env=[{"name": "ALNAIR_MEMORY_LIMIT", "value": "2Pi"}]),
                annotations={"alnair.io/compute-limit": "30%"},
            ),
            f'annotation alnair.io/compute-limit="30%": {COMPUTE_SYNTAX}; '
            f"container 'trainer' sets ALNAIR_MEMORY_LIMIT=\"2Pi\": {TOO_BIG}",
        ),
    ],
)
def test_a_bad_limit_a_container_sets_itself_refuses_the_pod_as_an_annotation_does(injector, pod, message):
    """The container's own value wins over the annotation, so the library would ignore it just the same."""
    response = injector.review(pod)
    assert response == {"uid": response["uid"], "allowed": False, "status": {"code": 400, "message": message}}
    assert message in logged(injector.log())


@pytest.mark.parametrize("annotation, variable", list(COMPUTE.items()))
def test_a_limit_from_value_from_is_admitted_with_a_warning(injector, annotation, variable):
    """Its value is read when the container starts, from an object the webhook is not sent."""
    source = {"configMapKeyRef": {"name": "limits", "key": "compute"}}
    trainer = container("trainer", env=[{"name": variable, "valueFrom": source}])
    unset = container("evaluator", env=[{"name": "ALNAIR_MEMORY_LIMIT", "value": ""}])  # empty is unset: no problem
    pod = make_pod(trainer, unset, annotations={annotation: "30"})
    response = injector.review(pod)
    assert response["warnings"] == [
        f"container 'trainer' sets {variable} from valueFrom, which the webhook "
        "cannot check: if the library refuses its value, that container runs without the "
        "limit (the library says so on its stderr)"
    ]
    first, second = applied(pod, response)["spec"]["containers"]
    assert first["env"][0] == {"name": variable, "valueFrom": source}
    assert env_of(second) == {"ALNAIR_MEMORY_LIMIT": "", **BASE_ENV, variable: "30"}


@pytest.mark.parametrize("variable", COMPUTE.values())
def test_a_containers_own_compute_limit_or_share_wins_over_the_annotation(injector, variable):
    """The annotations give the other variable as they are; the container's own value is kept, checked."""
    pod = make_pod(
        container("trainer", env=[{"name": variable, "value": "0=70"}]),
        "evaluator",
        annotations={"alnair.io/compute-limit": "30", "alnair.io/compute-share": "40"},
    )
    first, second = injector.inject(pod)["spec"]["containers"]
    annotated = {"ALNAIR_COMPUTE_LIMIT": "30", "ALNAIR_COMPUTE_SHARE": "40"}
    assert env_of(first) == {**BASE_ENV, **annotated, variable: "0=70"}
    assert env_of(second) == {**BASE_ENV, **annotated}


def test_an_injected_pod_reviewed_again_gets_no_patch(injector):
    pod = make_pod(
        "trainer",
        annotations={
            "alnair.io/python-intercept": "true",
            "alnair.io/compute-limit": "50",
            "alnair.io/compute-share": "0=30",
        },
    )
    injected = injector.inject(pod)
    again = injector.review(injected)
    assert again == {"uid": again["uid"], "allowed": True}


def test_a_container_added_after_injection_gets_what_it_lacks_and_nothing_else_changes(injector):
    """reinvocationPolicy IfNeeded: another webhook added a sidecar after this one ran."""
    injected = injector.inject(make_pod("trainer"))
    injected["spec"]["containers"].append(container("sidecar"))
    again = injector.inject(injected)
    assert [env_of(c) for c in again["spec"]["containers"]] == [BASE_ENV, BASE_ENV]
    assert [mounts_of(c) for c in again["spec"]["containers"]] == [MOUNTS, MOUNTS]
    assert again["spec"]["volumes"] == VOLUMES and again["metadata"] == injected["metadata"]


def test_existing_preload_python_path_volumes_mounts_and_variables_are_kept(injector):
    trainer = container(
        "trainer",
        env=[
            {"name": "LD_PRELOAD", "value": "/usr/lib/libjemalloc.so"},
            {"name": "PYTHONPATH", "value": "/app::/lib"},
            {"name": "ALNAIR_SHM_DIR", "value": "/custom/shm"},
            {"name": "ALNAIR_MEMORY_LIMIT", "value": "1Gi"},
        ],
        volumeMounts=[
            {"name": "alnair-shm", "mountPath": "/custom/shm"},
            {"name": "tools", "mountPath": "/opt/alnair/"},
        ],
    )
    bare = container("bare", env=[], volumeMounts=[])
    user_volumes = [{"name": "alnair-shm", "emptyDir": {}}, {"name": "tools", "emptyDir": {}}]
    pod = make_pod(
        trainer,
        bare,
        volumes=user_volumes,
        annotations={"alnair.io/memory-limit": "8Gi", "alnair.io/python-intercept": "true"},
    )
    injected = injector.inject(pod)
    assert injected["spec"]["volumes"] == user_volumes + VOLUMES[:1]  # the pod's own alnair-shm is the one used
    first, second = injected["spec"]["containers"]
    # /opt/alnair/ is taken: not mounted
    assert mounts_of(first) == [
        ("alnair-shm", "/custom/shm", False),
        ("tools", "/opt/alnair/", False),
        ("alnair-shm", "/run/alnair/shm", False),
    ]
    assert env_of(first) == {
        "LD_PRELOAD": f"/usr/lib/libjemalloc.so:{LIBRARY}",
        "PYTHONPATH": f"{PYTHON_PATH}:/app::/lib",
        "ALNAIR_SHM_DIR": "/custom/shm",
        "ALNAIR_MEMORY_LIMIT": "1Gi",
        "ALNAIR_PYTHON_INTERCEPT": "1",
    }
    assert [e["name"] for e in first["env"]][:4] == [
        "LD_PRELOAD",
        "PYTHONPATH",
        "ALNAIR_SHM_DIR",
        "ALNAIR_MEMORY_LIMIT",
    ]
    assert mounts_of(second) == MOUNTS
    assert env_of(second) == {**BASE_ENV, **PYTHON_ENV, "ALNAIR_MEMORY_LIMIT": "8Gi"}


@pytest.mark.parametrize("preload", [LIBRARY, f"/lib/a.so {LIBRARY}", f"{LIBRARY}:/lib/b.so"])
def test_a_preload_that_already_holds_the_library_is_not_extended(injector, preload):
    injected = injector.inject(make_pod(container("trainer", env=[{"name": "LD_PRELOAD", "value": preload}])))
    assert env_of(injected["spec"]["containers"][0])["LD_PRELOAD"] == preload


def test_a_preload_from_value_from_is_left_alone_with_a_warning(injector):
    source = {"configMapKeyRef": {"name": "preload", "key": "LD_PRELOAD"}}
    pod = make_pod(container("trainer", env=[{"name": "LD_PRELOAD", "valueFrom": source}]))
    response = injector.review(pod)
    assert response["warnings"] == [
        "container 'trainer' sets LD_PRELOAD from valueFrom, which the webhook cannot "
        "extend: it is left as it is, without Alnair's entry"
    ]
    injected = applied(pod, response)
    assert injected["spec"]["containers"][0]["env"] == [
        {"name": "LD_PRELOAD", "valueFrom": source},
        {"name": "ALNAIR_SHM_DIR", "value": "/run/alnair/shm"},
    ]


def test_a_pod_named_by_generate_name_is_injected_and_logged_by_it(injector):
    pod = make_pod()
    pod["metadata"] = {"generateName": "train-", "namespace": "team-a"}
    assert env_of(injector.inject(pod)["spec"]["containers"][0]) == BASE_ENV
    assert "injected pod team-a/train-*" in injector.log()


def test_one_connection_serves_review_after_review(injector):
    """The API server keeps its connection to a webhook open."""
    connection = injector.connect()
    try:
        for memory in ("1Gi", "2Gi", "3Gi"):
            body = json.dumps(admission_review(make_pod(annotations={"alnair.io/memory-limit": memory}))).encode()
            connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            assert reply.status == 200 and json.loads(reply.read())["response"]["allowed"] is True
    finally:
        connection.close()


def test_a_review_of_several_mib_is_answered(injector):
    """As large as the API server sends them (an object of up to 3 MiB): read whole, not cut at aiohttp's 1 MiB."""
    pod = make_pod(annotations={"notes.example/blob": "x" * (3 << 20)})
    assert injector.inject(pod)["metadata"]["annotations"]["alnair.io/injected"] == version()


def review_with(**changes) -> bytes:
    review = admission_review(make_pod())
    for path, value in changes.items():
        *parents, last = path.split("__")
        target = review
        for key in parents:
            target = target[key]
        if value is None:
            del target[last]
        else:
            target[last] = value
    return json.dumps(review).encode()


@pytest.mark.parametrize(
    "body, message",
    [
        (
            b"{not json",
            "the body is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (b"\xff{}", "the body is not JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        (b"[]", "the body is not a JSON object"),
        (
            review_with(apiVersion="admission.k8s.io/v1beta1"),
            "want an AdmissionReview of admission.k8s.io/v1, got kind 'AdmissionReview' of apiVersion "
            "'admission.k8s.io/v1beta1'",
        ),
        (
            review_with(kind="Pod"),
            "want an AdmissionReview of admission.k8s.io/v1, got kind 'Pod' of apiVersion 'admission.k8s.io/v1'",
        ),
        (review_with(request=None), "the AdmissionReview has no request"),
        (review_with(request__uid=None), "the request has no uid"),
        (review_with(request__uid=""), "the request has no uid"),
        (review_with(request__object=None), "the request has no object"),
        (review_with(request__object=[]), "the object is not a Pod: it is not an object"),
        (review_with(request__object__spec=None), "the object is not a Pod: /spec is not an object"),
        (
            review_with(request__object__spec__containers={"name": "x"}),
            "the object is not a Pod: /spec/containers is not a list",
        ),
        (
            review_with(request__object__metadata__labels={"a": 1}),
            "the object is not a Pod: /metadata/labels is not a map of strings",
        ),
        (
            review_with(request__object__spec__containers=[{"name": "x", "env": {}}]),
            "the object is not a Pod: /spec/containers/0/env is not a list",
        ),
        (
            review_with(request__object__spec__volumes=["data"]),
            "the object is not a Pod: /spec/volumes/0 is not an object",
        ),
        (
            review_with(request__object__spec__volumes=[{"name": ["data"]}]),
            "the object is not a Pod: /spec/volumes/0/name is not a string",
        ),
        (
            review_with(request__object__spec__containers=[{"name": "x", "env": [{"name": ["LD_PRELOAD"]}]}]),
            "the object is not a Pod: /spec/containers/0/env/0/name is not a string",
        ),
        (
            review_with(
                request__object__spec__containers=[{"name": "x", "env": [{"name": "LD_PRELOAD", "value": ["a.so"]}]}]
            ),
            "the object is not a Pod: /spec/containers/0/env/0/value is not a string",
        ),
        (
            review_with(
                request__object__spec__containers=[{"name": "x", "volumeMounts": [{"name": "d", "mountPath": {}}]}]
            ),
            "the object is not a Pod: /spec/containers/0/volumeMounts/0/mountPath is not a string",
        ),
        (
            review_with(request__object__spec__containers=[{"name": {"first": "x"}}]),
            "the object is not a Pod: /spec/containers/0/name is not a string",
        ),
        (
            review_with(request__object__spec__initContainers={"name": "x"}),
            "the object is not a Pod: /spec/initContainers is not a list",
        ),
        (
            review_with(request__object__metadata__name=["train-0"]),
            "the object is not a Pod: /metadata/name is not a string",
        ),
    ],
)
def test_a_malformed_review_is_answered_400_saying_why_and_the_injector_goes_on(injector, body, message):
    assert injector.post(body) == (400, f"{message}\n".encode())
    assert injector.healthy()


def test_http_errors_for_the_wrong_method_path_or_length(injector):
    assert injector.get("/mutate")[0] == 405
    assert injector.get("/metrics")[0] == 404
    assert injector.post(review_with(), path="/other")[0] == 404
    assert injector.post(b"{}", {"Content-Length": str(9 << 20)}) == (413, f"at most {8 << 20} bytes\n".encode())
    assert f"review request from 127.0.0.1 refused: at most {8 << 20} bytes" in injector.log()


def test_a_body_without_a_length_is_refused(injector):
    chunked = b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"
    reply = exchange_over_tls(injector.port, injector.tls_dir / "ca.crt", chunked)
    assert reply.startswith(b"HTTP/1.1 411 ") and reply.endswith(b"a Content-Length is required\n")
    assert "review request from 127.0.0.1 refused: a Content-Length is required" in injector.log()


def test_plain_http_gets_gos_400_and_the_injector_goes_on(injector):
    with socket.create_connection(("127.0.0.1", injector.port), timeout=10) as raw:
        raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert raw.recv(65536) == b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    assert injector.healthy()
