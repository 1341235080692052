"""Helpers the tests share: writer and exporter processes, exposition parsing, polling."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import queue
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from redis.backoff import NoBackoff
from redis.retry import Retry

from alnair.datacache import CachedDataset, CacheLoader, DirectoryOrigin

ROOT = Path(__file__).resolve().parents[1]


class LineReader:
    """Lines from a child's pipe through a thread: select() cannot see lines that
    Python has already buffered, so a reader that selects may wait forever."""

    def __init__(self, stream):
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.lines.put(line)
        self.lines.put("")  # end of stream

    def read_line(self, timeout: float) -> str:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("child printed nothing") from None


def read_line(stream, timeout: float) -> str:
    """One line from a child's pipe, or fail after timeout (no fixed sleeps)."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise TimeoutError("child printed nothing")
    return stream.readline()


class Writer:
    """A running alnair-shm-test-writer; stdin held open keeps it alive."""

    def __init__(self, binary: Path, shm_dir: Path, args: list[str], env: dict[str, str] | None = None):
        self.proc = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "ALNAIR_SHM_DIR": str(shm_dir), **(env or {})},
        )
        line = read_line(self.proc.stdout, 10)
        assert line.startswith("ready "), line
        self.path = Path(line.split(" ", 1)[1].strip())
        self.pid = self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def end_all(procs) -> None:
    """Kills the child processes a test left running, and reaps them all."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@contextlib.contextmanager
def serving_in_thread(server):
    """Runs a socketserver-style server on a thread for the block; yields its port."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Exporter:
    """`python -m alnair.exporter` (or a `script` that runs it) on a free loopback port; its log goes to a file."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        python: str = sys.executable,
        script: str | None = None,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                [
                    python,
                    *([script] if script else ["-m", "alnair.exporter"]),
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    *args,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, **(env or {})},
            )
        try:
            wait_until(lambda: "listening on" in self.log() or self.proc.poll() is not None, timeout=20)
        except AssertionError:
            pass
        if self.proc.poll() is not None or "listening on" not in self.log():
            raise RuntimeError(f"exporter did not start: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def install_distribution(root: Path, name: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
    """A distribution as pip would leave it: modules plus NAME-0.1.dist-info with alnair.collectors entry points."""
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    lines = "".join(f"{entry} = {target}\n" for entry, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[alnair.collectors]\n{lines}")


def env_with_path(root: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}


def scrape_text(url: str) -> str:
    """GET /metrics without any proxy the environment names."""
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url + "/metrics", timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def parse_samples(text: str) -> dict[str, float]:
    """`name{labels}` -> value for every sample line of an exposition, labels sorted by name."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            name, brace, labels = key.partition("{")
            if brace:
                pairs = sorted(LABEL.findall(labels))
                key = name + "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"
            samples[key] = float(value)
    return samples


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(interval)


class Locker:
    """A separate process that takes a writer's POSIX lock on files we name: the reader
    ignores locks its own process holds, so a live writer must be another process."""

    SCRIPT = (
        "import fcntl, os, sys\n"
        "fds = []\n"
        "for line in sys.stdin:\n"
        "    fd = os.open(line.strip(), os.O_RDWR)\n"
        "    fcntl.lockf(fd, fcntl.LOCK_EX)\n"
        "    fds.append(fd)\n"
        "    print('locked', flush=True)\n"
    )

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def lock(self, path: Path) -> None:
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        assert read_line(self.proc.stdout, 10).strip() == "locked"

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


class PythonProgram:
    """A Python child running `code` with ALNAIR_SHM_DIR set, as a training program would.
    `code` prints "ready" when the test may look, then waits for stdin to close."""

    def __init__(self, code: str, shm_dir: Path, env: dict[str, str] | None = None, timeout: float = 60):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "ALNAIR_SHM_DIR": str(shm_dir), **(env or {})},
        )
        self.pid = self.proc.pid
        line = read_line(self.proc.stdout, timeout)
        if not line.startswith("ready"):
            self.proc.kill()
            raise AssertionError(f"program did not get ready: {line!r} {self.proc.stderr.read()}")
        self.ready_line = line.split()[1:]

    def finish(self) -> str:
        """Close stdin and wait for a clean exit; returns what it wrote on stderr."""
        self.proc.stdin.close()
        self.proc.wait(30)
        return self.proc.stderr.read()


def cuda_record_program(setup: str) -> str:
    """The code of a PythonProgram that publishes one cuda record, laid out as the intercept lays it, and keeps it
    until stdin closes: for fields the C test writer cannot set (device flags, GPU time, the compute share).
    `setup` fills `record`, a layout.CudaRecord with no devices yet, `layout` imported."""
    return "\n".join(
        textwrap.dedent(part)
        for part in (
            """
        import ctypes, sys
        from alnair.abi import layout
        from alnair.intercept.segment_writer import WriterSegment

        record = layout.CudaRecord(max_devices=layout.CUDA_MAX_DEVICES)
        """,
            setup,
            """
        segment = WriterSegment(layout.KIND_CUDA, ctypes.sizeof(layout.CudaRecord))
        segment.publish(bytes(record))
        print("ready", flush=True)
        sys.stdin.read()
        segment.close()
        """,
        )
    )


def python_records(shm_dir: Path) -> dict[int, object]:
    """The python records in shm_dir by writer pid, read as the exporter does (without reclaiming)."""
    from alnair.abi import layout

    return records(shm_dir, layout.KIND_PYTHON)


def records(shm_dir: Path, kind: int) -> dict[int, object]:
    """The records of a kind (alnair.abi.layout.KIND_*) in shm_dir by writer pid, without reclaiming."""
    from alnair.abi.segments import SegmentDirectory

    directory = SegmentDirectory(str(shm_dir), kind, reclaim=False)
    return {p.segment.header.writer_pid: p.record for p in directory.read()}


class RedisServer:
    """A real redis-server on a free loopback port, without persistence; `args` add settings
    (`--maxmemory 2mb`...). It can be killed, restarted on the same port, paused and resumed."""

    def __init__(self, directory: Path, *args: str, port: int | None = None):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.fail("redis-server is not installed: .ci/run installs it (apt-get install redis-server)")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.command = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            *args,
        ]
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = self.client()
        try:
            wait_until(lambda: self.proc.poll() is not None or self._answers(client), timeout=10)
        except AssertionError:  # never leave behind a server the fixture does not know of
            self.kill()
            raise
        if self.proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {self.proc.returncode}: {self.command}")

    @staticmethod
    def _answers(client) -> bool:
        try:
            return client.ping()
        except redis.AuthenticationError:  # --requirepass: it answers, refusing
            return True
        except redis.ConnectionError:
            return False

    def client(self) -> redis.Redis:
        """A client that reports failures at once (redis-py retries with backoff by default)."""
        return redis.Redis(port=self.port, socket_timeout=10, retry=Retry(NoBackoff(), 0))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture
def start_redis(tmp_path):
    """Starts RedisServers (import this fixture where needed); all are killed at teardown."""
    servers: list[RedisServer] = []

    def start(*args: str) -> RedisServer:
        directory = tmp_path / f"redis-{len(servers)}"
        directory.mkdir()
        servers.append(RedisServer(directory, *args))
        return servers[-1]

    yield start
    for server in servers:
        if server.proc.poll() is None:
            server.kill()


def fill_cache(url: str, root: Path, datasets: list[tuple[str, str, range]], size: int) -> None:
    """One epoch of each (dataset, job, sample numbers) through the dataset cache; sample n is
    `size` bytes of n, so numbers shared between datasets are shared content."""
    for dataset, job, numbers in datasets:
        directory = root / dataset
        directory.mkdir()
        for position, number in enumerate(numbers):
            (directory / f"{position:05d}").write_bytes(bytes([number]) * size)
        list(CacheLoader(CachedDataset(url, dataset, DirectoryOrigin(directory), job=job), 4))


def tracked_tree(tmp_path_factory) -> Path:
    """The checkout's tracked files alone, as CI's clone has them: a build/ left in the working tree
    by an earlier install must not supply files the package no longer ships."""
    tree = tmp_path_factory.mktemp("src")
    names = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    )
    for name in filter(None, names):
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, tree / name)
    return tree


def installed_layout(target: Path) -> Path:
    """The `alnair` namespace laid out as pip installs it (pyproject's package-dir), from the source folders: the
    import linter and mypy walk one directory per package, which the top-level folders are not (and the editable
    install's import hook hides the package from mypy)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for package, folder in sorted(config.items(), key=lambda item: item[0].count(".")):
        destination = target.joinpath(*package.split("."))
        destination.mkdir(parents=True, exist_ok=True)
        for source in (ROOT / folder).glob("*.py"):
            shutil.copy2(source, destination / source.name)
    return target


def require_binary(name: str) -> str:
    """The path of an installed program the test needs; a clear failure (never a skip) without it."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: .ci/run installs it")
    return path


def write_tls_files(directory: Path) -> None:
    """ca.crt, and server.crt / server.key for 127.0.0.1 signed by it, valid for a day."""
    now = datetime.datetime.now(datetime.timezone.utc)

    def issue(subject, key, issuer, issuer_key, ca, san=None):
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if san:
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = issue(ca_name, ca_key, ca_name, ca_key, True)
    server = issue(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "server")]),
        key,
        ca_name,
        ca_key,
        False,
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "server.crt").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (directory / "server.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def cluster_port() -> int:
    """A free port P whose cluster bus port, P + 10000, is free too (and a port at all)."""
    while True:
        port = free_port()
        if port + 10000 <= 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


class RedisCluster:
    """A real Redis Cluster on loopback: `primaries` primaries with a replica each (redis-server
    --cluster-enabled, joined by redis-cli --cluster create), without persistence. The URL is the
    cache's: redis+cluster://127.0.0.1:P,... A killed node restarts on its port and config file."""

    def __init__(self, directory: Path, primaries: int = 3):
        require_binary("redis-cli")
        self.servers = []
        for n in range(2 * primaries):
            node_dir = directory / f"node-{n}"
            node_dir.mkdir()
            # A node that loses sight of a primary for 1 s fails over to its replica; the others keep
            # serving their slots meanwhile (full coverage not required), as the cache wants.
            self.servers.append(
                RedisServer(
                    node_dir,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(node_dir / "nodes.conf"),
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-require-full-coverage",
                    "no",
                    port=cluster_port(),
                )
            )
        addresses = [f"127.0.0.1:{s.port}" for s in self.servers]
        subprocess.run(
            [
                require_binary("redis-cli"),
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.url = "redis+cluster://" + ",".join(addresses)
        self.wait_healthy()

    def by_port(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def live(self) -> list[RedisServer]:
        return [s for s in self.servers if s.proc.poll() is None]

    def nodes(self) -> list[dict]:
        """CLUSTER NODES as a live node sees it: id, port, role flags, primary's id, slot ranges."""
        text = self.live()[0].client().execute_command("CLUSTER", "NODES").decode()
        nodes = []
        for line in text.strip().splitlines():
            fields = line.split()
            nodes.append(
                {
                    "id": fields[0],
                    "port": int(fields[1].split("@")[0].rsplit(":", 1)[1]),
                    "flags": fields[2].split(","),
                    "primary": fields[3],
                    "slots": fields[8:],
                }
            )
        return nodes

    def primaries(self) -> list[RedisServer]:
        return [self.by_port(n["port"]) for n in self.nodes() if "master" in n["flags"] and n["slots"]]

    def owner(self, slot: int) -> RedisServer:
        """The primary that serves `slot` (per CLUSTER SLOTS of a live node)."""
        for start, end, primary, *_ in self.live()[0].client().execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                return self.by_port(int(primary[1]))
        raise AssertionError(f"no node serves slot {slot}")

    def _healthy(self) -> bool:
        try:
            for server in self.servers:
                client = server.client()
                info = client.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info or "cluster_known_nodes:6" not in info:
                    return False
                if (
                    client.info("replication")["role"] == "slave"
                    and client.info("replication")["master_link_status"] != "up"
                ):
                    return False
            return len(self.primaries()) == len(self.servers) // 2
        except redis.RedisError:
            return False

    def wait_healthy(self, timeout: float = 60) -> None:
        """Every node up, cluster_state:ok everywhere, every replica in sync with its primary."""
        for server in self.servers:
            if server.proc.poll() is not None:
                server.start()
        wait_until(self._healthy, timeout=timeout, interval=0.1)

    def flush(self) -> None:
        for server in self.primaries():
            server.client().flushall()
            server.client().config_set("maxmemory", 0)

    def stop(self) -> None:
        for server in self.servers:
            if server.proc.poll() is None:
                server.kill()


_session_cluster: list[RedisCluster] = []


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory):
    """One Redis Cluster (3 primaries, 3 replicas) for the whole session, however many test modules import
    this fixture (each import is a fixture of its own; they share the one cluster): starting one takes
    seconds. Each test that uses it through `cluster` starts on an empty, healthy cluster."""
    if not _session_cluster:
        _session_cluster.append(RedisCluster(tmp_path_factory.mktemp("redis-cluster")))
    yield _session_cluster[0]
    _session_cluster[0].stop()  # at the session's end: every import's teardown comes then


@pytest.fixture
def cluster(redis_cluster):
    redis_cluster.wait_healthy()
    redis_cluster.flush()
    yield redis_cluster


def newest_glibc_needed(library: Path) -> str | None:
    """The newest GLIBC_x.y symbol version an ELF file requires, from its version-needs section (binutils' readelf)."""
    dump = subprocess.run(
        ["readelf", "--version-info", "--wide", str(library)], capture_output=True, text=True, check=True
    ).stdout
    needed = set(re.findall(r"Name: (GLIBC_[0-9.]+)", dump))
    return max(needed, key=lambda name: tuple(int(n) for n in name.removeprefix("GLIBC_").split(".")), default=None)
