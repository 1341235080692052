"""The node's pods by UID, kept by one list+watch on the Kubernetes API (field selector spec.nodeName),
so naming a pod never costs a request."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 300  # the server ends each watch after this; we resume from the last resourceVersion
BACKOFF_SECONDS = (1, 2, 5, 10, 30)  # retries while the API server is away; the last one repeats
DENIED_RETRY_SECONDS = 300  # RBAC may be granted later


@dataclass(frozen=True)
class PodNames:
    name: str
    namespace: str
    containers: dict[str, str]  # bare container id (64 hex) -> container name


class Gone(Exception):
    """The watch's resourceVersion is too old (410): list again."""


class PodWatcher:
    """Keeps `pods` (UID -> PodNames) current on a daemon thread. `api` is a kubernetes CoreV1Api.

    While the API server is away the last known pods stay (their processes keep their names); a relist
    replaces them all, so pods deleted meanwhile go."""

    def __init__(self, api, node_name: str, sleep: Callable[[float], bool] | None = None):
        self.api = api
        self.field_selector = f"spec.nodeName={node_name}"
        self.pods: dict[str, PodNames] = {}
        self.synced = threading.Event()  # set after the first successful list
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._thread = threading.Thread(target=self._run, name="pod-watcher", daemon=True)
        self.lists = 0  # relists done, for tests and logs

    def start(self) -> PodWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def lookup(self, pod_uid: str) -> PodNames | None:
        return self.pods.get(pod_uid)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                version = self._list()
                if failures:
                    log.info("Kubernetes API reachable again; pod names resynced")
                failures = 0
                while not self._stop.is_set():
                    version = self._watch(version)
            except Gone:
                log.debug("pod watch expired (410 Gone); listing again")
                continue
            except Exception as e:
                pause = self._failure_pause(e, failures)
                failures += 1
                self._sleep(pause)

    def _failure_pause(self, error: Exception, failures: int) -> float:
        status = getattr(error, "status", None)
        if status in (401, 403):
            if failures == 0:
                log.warning("no permission to watch pods (%s): pods are named by cgroup-derived UID only", status)
            return DENIED_RETRY_SECONDS
        if failures == 0:
            log.warning(
                "Kubernetes API unreachable (%s): keeping the last known pod names, retrying",
                f"{type(error).__name__}: {error}"[:200],
            )
        return BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS) - 1)]

    def _list(self) -> str:
        response = self.api.list_pod_for_all_namespaces(field_selector=self.field_selector, _preload_content=False)
        body = json.loads(checked(response).data)
        self.pods = {p["metadata"]["uid"]: pod_names(p) for p in body.get("items") or []}
        self.lists += 1
        self.synced.set()
        return body["metadata"]["resourceVersion"]

    def _watch(self, version: str) -> str:
        """Applies one watch's events; returns the resourceVersion to resume from."""
        response = self.api.list_pod_for_all_namespaces(
            field_selector=self.field_selector,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_SECONDS,
            _preload_content=False,
            _request_timeout=(10, WATCH_TIMEOUT_SECONDS + 30),
        )
        try:
            for event in events(checked(response)):
                version = self._apply(event) or version
                if self._stop.is_set():
                    break
        finally:
            response.release_conn()
        return version

    def _apply(self, event: dict) -> str | None:
        kind, pod = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if pod.get("code") == 410:
                raise Gone()
            raise RuntimeError(f"watch error {pod.get('code')}: {pod.get('message')}")
        metadata = pod.get("metadata") or {}
        if kind in ("ADDED", "MODIFIED"):
            self.pods = {**self.pods, metadata["uid"]: pod_names(pod)}  # readers see whole dicts only
        elif kind == "DELETED":
            self.pods = {uid: names for uid, names in self.pods.items() if uid != metadata.get("uid")}
        return metadata.get("resourceVersion")


def checked(response):
    """The urllib3 response, or the ApiException a non-2xx status means."""
    if not 200 <= response.status < 300:
        from kubernetes.client.exceptions import ApiException

        raise ApiException(http_resp=response)
    return response


def events(response) -> Iterator[dict]:
    """Watch events, one JSON object a line; a line cut by a dropped connection ends the watch."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                yield json.loads(line)


def pod_names(pod: dict) -> PodNames:
    metadata, status = pod["metadata"], pod.get("status") or {}
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
        *(status.get("ephemeralContainerStatuses") or []),
    ]
    containers = {s["containerID"].rpartition("://")[2]: s["name"] for s in statuses if s.get("containerID")}
    return PodNames(metadata["name"], metadata.get("namespace", ""), containers)


def start_pod_watcher(node_name: str) -> PodWatcher | None:
    """A started watcher with the in-cluster (else kubeconfig) credentials; None, said once, without them."""
    try:
        from kubernetes import client, config
    except ImportError:
        log.info("the kubernetes client is not installed: pods are named by cgroup-derived UID only")
        return None
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException:
        try:
            config.load_kube_config(client_configuration=configuration)
        except Exception as e:
            log.info("no Kubernetes API configured (%s): pods are named by cgroup-derived UID only", e)
            return None
    return PodWatcher(client.CoreV1Api(client.ApiClient(configuration)), node_name).start()
