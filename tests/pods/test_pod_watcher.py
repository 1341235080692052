"""The pod watcher against a stand-in API server that answers list and watch requests the way the
Kubernetes API does (a PodList, then JSON-line watch events), including expiry and outages."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes import client

from alnair.collectors.pods.identity import PodIdentity
from alnair.collectors.pods.watcher import PodWatcher
from support import free_port, wait_until

NODE = "gpu-node-7"
CLOSE = object()  # ends the current watch response


def pod(uid: str, name: str, containers: dict[str, str], namespace: str = "training") -> dict:
    """A pod as the API serves it (trimmed of fields the watcher ignores, never of ones it reads)."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "0",
            "labels": {"app": name.rsplit("-", 1)[0]},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": c, "image": "pytorch:2.4"} for c in containers]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": c,
                    "containerID": f"containerd://{cid}" if cid else None,
                    "ready": bool(cid),
                    "restartCount": 0,
                    "image": "pytorch:2.4",
                }
                for c, cid in containers.items()
            ],
        },
    }


class FakeApiServer:
    """GET /api/v1/pods: a list (`pods`, the current resourceVersion) or, with watch=1, the events put
    on `events`. `expire_next_watch` answers the next watch with a 410 ERROR event, as an etcd compaction does."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.pods: dict[str, dict] = {}
        self.version = 100
        self.events: queue.Queue = queue.Queue()
        self.requests: list[dict] = []
        self.expire_next_watch = False
        self.forbidden = False
        self._stopping = threading.Event()
        self.server: ThreadingHTTPServer | None = None

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeApiServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # watches are chunked responses, as the API server's are

            def do_GET(self):
                fake.handle(self)

            def log_message(self, *args):
                pass

        self._stopping.clear()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        """The API server goes away: open watches are cut, new connections refused."""
        self._stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def next_version(self, p: dict) -> dict:
        self.version += 1
        p["metadata"]["resourceVersion"] = str(self.version)
        return p

    def add(self, p: dict, announce: bool = True) -> None:
        self.pods[p["metadata"]["uid"]] = self.next_version(p)
        if announce:
            self.events.put({"type": "ADDED", "object": p})

    def delete(self, uid: str, announce: bool = True) -> None:
        p = self.next_version(self.pods.pop(uid))
        if announce:
            self.events.put({"type": "DELETED", "object": p})

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        url = urlparse(request.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.requests.append({"path": url.path, **query})
        if url.path != "/api/v1/pods":
            return request.send_error(404)
        if self.forbidden:
            return self.send_json(
                request,
                403,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": "Forbidden",
                    "message": 'pods is forbidden: User "system:serviceaccount:alnair:default" cannot list resource '
                    '"pods"',
                    "code": 403,
                },
            )
        if query.get("watch") not in ("true", "1", "True"):
            return self.send_json(
                request,
                200,
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": str(self.version)},
                    "items": list(self.pods.values()),
                },
            )
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Transfer-Encoding", "chunked")
        request.end_headers()
        if self.expire_next_watch:
            self.expire_next_watch = False
            self.write_line(
                request,
                {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "message": f"too old resource version: {query.get('resourceVersion')} ({self.version})",
                        "reason": "Expired",
                        "code": 410,
                    },
                },
            )
            return self.write_chunk(request, b"")
        while not self._stopping.is_set():  # stopped: the connection is cut without the last chunk
            try:
                event = self.events.get(timeout=0.05)
            except queue.Empty:
                continue
            if event is CLOSE:
                return self.write_chunk(request, b"")
            self.write_line(request, event)
        request.close_connection = True

    @staticmethod
    def send_json(request, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)

    @classmethod
    def write_line(cls, request, event: dict) -> None:
        cls.write_chunk(request, json.dumps(event).encode() + b"\n")

    @staticmethod
    def write_chunk(request, data: bytes) -> None:
        request.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        request.wfile.flush()

    def watches(self) -> int:
        return sum(1 for r in self.requests if r.get("watch"))


@pytest.fixture
def api():
    servers = []

    def start(port: int | None = None) -> FakeApiServer:
        server = FakeApiServer(port).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        if not server._stopping.is_set():
            server.stop()


@pytest.fixture
def watch():
    watchers = []

    def start(server: FakeApiServer) -> PodWatcher:
        configuration = client.Configuration(host=server.url())
        pauses: list[float] = []  # what the watcher asked to wait, in order; each wait lasts 50 ms here

        def pause(seconds: float) -> None:
            pauses.append(seconds)
            time.sleep(0.05)

        watcher = PodWatcher(client.CoreV1Api(client.ApiClient(configuration)), NODE, sleep=pause)
        watcher.pauses = pauses
        watchers.append(watcher.start())
        return watcher

    yield start
    for watcher in watchers:
        watcher._stop.set()


def names(watcher: PodWatcher, uid: str):
    found = watcher.lookup(uid)
    return found and (found.name, found.namespace, found.containers)


def test_list_then_watch_follows_added_modified_and_deleted_pods(api, watch):
    server = api()
    server.add(pod("uid-a", "trainer-0", {"pytorch": "a" * 64}), announce=False)
    watcher = watch(server)
    wait_until(lambda: names(watcher, "uid-a") == ("trainer-0", "training", {"a" * 64: "pytorch"}))
    wait_until(lambda: server.watches() == 1)
    server.add(pod("uid-b", "eval-0", {"eval": None}))  # scheduled, its container not started yet
    wait_until(lambda: names(watcher, "uid-b") == ("eval-0", "training", {}))
    started = pod("uid-b", "eval-0", {"eval": "b" * 64})
    server.pods["uid-b"] = server.next_version(started)
    server.events.put({"type": "MODIFIED", "object": started})
    wait_until(lambda: names(watcher, "uid-b") == ("eval-0", "training", {"b" * 64: "eval"}))
    server.delete("uid-a")  # deleted mid-watch
    wait_until(lambda: watcher.lookup("uid-a") is None)
    assert names(watcher, "uid-b") is not None
    listed, watched = server.requests[0], server.requests[1]
    assert listed == {"path": "/api/v1/pods", "fieldSelector": f"spec.nodeName={NODE}"}
    assert watched["fieldSelector"] == f"spec.nodeName={NODE}" and watched["resourceVersion"] == "101"
    assert len(server.requests) == 2  # one list, one watch: lookups never ask the API


def test_a_watch_ended_by_the_server_resumes_from_the_last_resource_version(api, watch):
    server = api()
    watcher = watch(server)
    wait_until(lambda: server.watches() == 1)
    server.add(pod("uid-c", "job-0", {"main": "c" * 64}))
    wait_until(lambda: watcher.lookup("uid-c") is not None)
    server.events.put(CLOSE)  # the server's watch timeout
    wait_until(lambda: server.watches() == 2)
    assert server.requests[-1]["resourceVersion"] == "101" and watcher.lists == 1


def test_410_gone_relists_and_drops_pods_deleted_while_unwatched(api, watch):
    server = api()
    server.add(pod("uid-a", "trainer-0", {"pytorch": "a" * 64}), announce=False)
    watcher = watch(server)
    wait_until(lambda: server.watches() == 1)
    server.delete("uid-a", announce=False)  # the deletion event is compacted away
    server.add(pod("uid-d", "trainer-1", {"pytorch": "d" * 64}), announce=False)
    server.expire_next_watch = True
    server.events.put(CLOSE)
    wait_until(lambda: watcher.lists == 2)
    wait_until(lambda: watcher.lookup("uid-a") is None and watcher.lookup("uid-d") is not None)
    wait_until(lambda: server.watches() == 3)
    assert server.requests[-1]["resourceVersion"] == str(server.version)  # watching from the relist's version


def test_api_server_outage_keeps_known_pods_then_resyncs_once_back(api, watch, caplog):
    caplog.set_level(logging.INFO, logger="alnair.collectors.pods.watcher")
    server = api()
    server.add(pod("uid-a", "trainer-0", {"pytorch": "a" * 64}), announce=False)
    watcher = watch(server)
    wait_until(lambda: server.watches() == 1)
    server.stop()
    wait_until(lambda: len(watcher.pauses) >= 4)  # several retries while it is down: still one warning
    assert watcher.pauses[:4] == [1, 2, 5, 10]  # backing off
    assert names(watcher, "uid-a") == ("trainer-0", "training", {"a" * 64: "pytorch"})
    assert sum("unreachable" in r.message for r in caplog.records) == 1
    back = api(server.port)
    back.version = 500
    back.add(pod("uid-e", "trainer-2", {"pytorch": "e" * 64}), announce=False)  # uid-a was deleted during the outage
    wait_until(lambda: watcher.lookup("uid-e") is not None and watcher.lookup("uid-a") is None)
    wait_until(lambda: back.watches() == 1)
    assert any("reachable again" in r.message for r in caplog.records)


def test_no_permission_is_said_once_and_identity_stays_cgroup_derived(api, watch, caplog, tmp_path):
    caplog.set_level(logging.INFO, logger="alnair.collectors.pods.watcher")
    server = api()
    server.forbidden = True
    watcher = watch(server)
    wait_until(lambda: any("no permission" in r.message for r in caplog.records))
    assert not watcher.synced.is_set()
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "cgroup").write_text(
        f"0::/kubepods/besteffort/pod{'6d3a1b8e-4c2f-4e8a-9b1d-2f7c5a9e0b11'}/{'f' * 64}\n"
    )
    who = PodIdentity(str(tmp_path), watcher).of_pid(9)
    assert (who.pod_uid, who.container_id, who.pod) == ("6d3a1b8e-4c2f-4e8a-9b1d-2f7c5a9e0b11", "f" * 64, "<unknown>")


def test_identity_names_a_pid_through_the_watch(api, watch, tmp_path):
    uid = "6d3a1b8e-4c2f-4e8a-9b1d-2f7c5a9e0b11"
    server = api()
    server.add(pod(uid, "trainer-0", {"pytorch": "a" * 64, "sidecar": "b" * 64}, namespace="ml"), announce=False)
    watcher = watch(server)
    wait_until(watcher.synced.is_set)
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-{'a' * 64}.scope\n"
    )
    who = PodIdentity(str(tmp_path), watcher).of_pid(9)
    assert who.labels() == {
        "pod_uid": uid,
        "container_id": f"containerd://{'a' * 64}",
        "pod": "trainer-0",
        "namespace": "ml",
        "container": "pytorch",
    }
