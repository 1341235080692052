"""The admission.k8s.io/v1 AdmissionReview envelope: a request in, a response with a base64 JSONPatch out.

A body that is not an AdmissionReview of a pod (not JSON, nested too deeply or holding too many values to read
in bounded memory, another kind or version, no uid, no object, an object not shaped as a Pod) is BadReview,
answered 400: with failurePolicy Ignore the API server then admits the pod uninjected, as it does when the
webhook is down. A bad annotation, or a bad limit a
container sets in its own env, is the pod author's to fix, so it is a refusal (allowed false), which kubectl
shows."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from .patch import Mutation, NotAPod, Refused, Settings, escaped, mutate

log = logging.getLogger("alnair.injector")
API_VERSION = "admission.k8s.io/v1"  # v1beta1 left the API server in 1.22; the chart asks for v1 only
POD = {"group": "", "version": "v1", "kind": "Pod"}
# JSON values in one review at most (counted by their separators, an over-estimate): a pod's review holds a few
# thousand; parsed, each costs up to ~100 bytes, so 8 MiB of tiny values would pass the chart's 128 MiB limit.
MAX_VALUES = 500_000


class BadReview(Exception):
    """The body cannot be answered as a review; the message says why, in one line."""


def answer(body: bytes, settings: Settings) -> bytes:
    """The AdmissionReview to send back for a request body; raises BadReview."""
    request = parse(body)
    return json.dumps(
        {
            "apiVersion": API_VERSION,
            "kind": "AdmissionReview",
            "response": {"uid": request["uid"], **response(request, settings)},
        },
        separators=(",", ":"),
    ).encode()


def parse(body: bytes) -> dict[str, Any]:
    """The review's request, checked as far as answering it needs."""
    if sum(body.count(c) for c in (b",", b"[", b"{")) > MAX_VALUES:  # before parsing: bytes.count is cheap
        raise BadReview(f"the body holds more than {MAX_VALUES} JSON values")
    try:
        review = json.loads(body.decode("utf-8"))  # what the API server sends; json.loads would guess UTF-16
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadReview(f"the body is not JSON: {e}") from None
    except RecursionError:  # the decoder recurses per level; the API server's objects nest a few dozen deep
        raise BadReview("the body is nested too deeply") from None
    if not isinstance(review, dict):
        raise BadReview("the body is not a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise BadReview(
            f"want an AdmissionReview of {API_VERSION}, got kind {review.get('kind')!r} "
            f"of apiVersion {review.get('apiVersion')!r}"
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("the AdmissionReview has no request")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadReview("the request has no uid")
    return request


def response(request: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """allowed with the patch (or none), or allowed false for a bad annotation."""
    if request.get("kind") != POD or request.get("subResource") or request.get("operation") != "CREATE":
        # Containers, volumes and env of a pod are fixed once it exists: only its creation is injected.
        log.debug("not a pod's creation (%s %s): allowed unchanged", request.get("operation"), request.get("kind"))
        return {"allowed": True}
    if "object" not in request:
        raise BadReview("the request has no object")
    try:
        mutation = mutate(request["object"], settings)
    except NotAPod as e:
        raise BadReview(f"the object is not a Pod: {e}") from None
    except Refused as e:
        log.info("refused pod %s: %s", pod_name(request), e)
        return {"allowed": False, "status": {"code": 400, "message": str(e)}}
    return allowed(mutation, request)


def allowed(mutation: Mutation, request: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"allowed": True}
    if mutation.patch:
        log.info("injected pod %s (%d operations)", pod_name(request), len(mutation.patch))
        result["patchType"] = "JSONPatch"
        result["patch"] = base64.b64encode(json.dumps(mutation.patch, separators=(",", ":")).encode()).decode()
    if mutation.warnings:
        result["warnings"] = mutation.warnings  # kubectl prints these beside the created pod
    return result


def pod_name(request: dict[str, Any]) -> str:
    """namespace/name, on one line whatever they hold; a pod named by generateName has no name yet at its
    creation."""
    metadata = request["object"].get("metadata", {})
    name = request.get("name") or metadata.get("name") or f"{metadata.get('generateName', '')}*"
    return escaped(f"{request.get('namespace', '')}/{name}")
