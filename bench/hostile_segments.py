"""Three attacks on the exporter's segment reader, rerunnable on every change: a fuzzed directory, SIGKILLed
writers and a flood of junk names.

    make -C intercept && python bench/hostile_segments.py    # [--attack fuzz|sigkill|junk|both|all]
                                                             # [--files 10000] [--writers 1000]

The attacks run the real exporter (`python -m alnair.exporter --shm.dir DIR --no-collector.host
--no-collector.nvml --collector.cuda.interval ...`) on a fresh directory under /dev/shm, scrape it all along,
print a table of checks and exit non-zero if any fails. "finding:" lines are what the exporter does that it
arguably should not (docs/benchmarks.md): printed with their figures, not failed.

1. fuzz: --files malformed files of every kind (truncated, bad magic, wrong ABI version, wrong kind or header
   size, impossible device counts, record_size 0xFFFFFFFF in 4 GiB sparse files, random bytes, symlinks to
   /etc/shadow, FIFOs, sockets, directories, control characters in comm and in names, permanently odd seq,
   dead writers, old temp files) beside --live real C writers with known values. Files the reader can parse
   the header of are reclaimed unless a live process holds their lock, so one helper process holds locks on
   the kinds that must be parsed (torn, bad device counts, control characters, ...), and the rest are
   planted unlocked. Checked: skipped{reason} exact every sample, reclaimed exact, live values exact in every
   sample, nothing else deleted, symlink targets untouched, RSS, bytes read per sample; then a second
   exporter with --shm.max-segments half the parseable records, for over_limit; then an exporter started with
   a FIFO as its reader marker, and the sample cost per entry of two kinds alone in a directory.
2. sigkill: --writers C writers in --churn mode (every counter equal to a running count, so a torn read shows
   as unequal counters), at most --alive at once, SIGKILLed --wave at a time while the exporter samples every
   --interval. Checked: no served sample ever has unequal counters within a pid, every writer was served
   while churning, reclaimed reaches --writers and the directory ends empty, RSS.

3. junk: --live writers, then --junk (100,000) empty files named as writers name segments and --temps (250,000)
   temp names an hour old, then one more writer (the attack that hid every job: names were once counted in
   directory order against a budget). Checked: the writers seen alive served with exact values in every sample,
   the late writer served, every sample under 100 ms of the exporter's CPU (all threads, between two samples,
   scrapes included), a whole sweep coming to know every junk name, nothing deleted, RSS. With
   --baseline-python (an interpreter whose alnair is another tree: `git worktree add /tmp/base <commit>`, a venv
   with --system-site-packages, `pip install --no-deps /tmp/base`) the same attack runs against that exporter
   and its figures are printed beside (not checked).

Churning writers spin a CPU each; on 2 cores 1000 of them would starve the exporter, so they run at nice 19
and at most --alive (200) at once: every one of the 1000 churns (so every served record can be checked
for tears), and the exporter keeps the CPU share it has against busy but ordinary workloads.

An exporter with --shm.linger serves a dead writer's last record that long before reclaiming it; the bench
passes --linger (2 s, against the exporter's 120 s) so a run waits it out in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import os
import random
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scrape_latency import (
    SAMPLE_DURATION,
    SAMPLE_FINISHED,
    SEGMENTS,
    WRITER,
    ScrapeClient,
    free_port,  # noqa: E402
    machine,
    raise_fd_limit,
)

from alnair.abi import layout, naming  # noqa: E402
from alnair.abi.segments import SKIP_REASONS  # noqa: E402

RSS_LIMIT_KIB = 150 * 1024
STARTUP_TIMEOUT = 60.0
SKIPPED = re.compile(rb'^alnair_cuda_segments_skipped\{reason="(\w+)"\} (\S+)$', re.M)
RECLAIMED = re.compile(rb"^alnair_cuda_segments_reclaimed_total (\S+)$", re.M)
SUCCESS = re.compile(rb'^alnair_exporter_collector_success\{collector="cuda"\} (\S+)$', re.M)
# The families of the device counters --churn sets to one running count (not the later record fields it leaves 0).
CHURNED = (
    b"kernel_launches_total|graph_launches_total|memory_used_bytes|memory_peak_bytes|allocations_total|"
    b"allocation_failures_total|allocations_denied_total|memory_limit_bytes|throttled_seconds_total|"
    b"compute_quota_ratio"
)
DEVICE = re.compile(rb"^(alnair_cuda_(?:" + CHURNED + rb'))\{pid="([^"]*)",gpu="(\d+)",uuid="[^"]*"\} (\S+)$', re.M)
INFO = re.compile(rb'^alnair_cuda_process_info\{pid="(\d+)",comm="((?:[^"\\]|\\.)*)"', re.M)
# The text format's grammar, strictly: a planted string that escaped its label would break a line.
LINE = re.compile(
    rb'(# (HELP|TYPE) \S+ .*|[a-zA-Z_:][\w:]*(\{\w+="(?:[^"\\\n]|\\.)*"(,\w+="(?:[^"\\\n]|\\.)*")*\})? \S+)'
)
RAW_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")  # C0 except \n, DEL, C1 in UTF-8

# Exported device families and the writer's field behind each (exporter/collectors/cuda.py).
FIELDS = {
    b"alnair_cuda_kernel_launches_total": "kernel_launches",
    b"alnair_cuda_graph_launches_total": "graph_launches",
    b"alnair_cuda_memory_used_bytes": "bytes_in_use",
    b"alnair_cuda_memory_peak_bytes": "peak_bytes",
    b"alnair_cuda_allocations_total": "allocations",
    b"alnair_cuda_allocation_failures_total": "failed_allocations",
    b"alnair_cuda_allocations_denied_total": "limit_denied_allocations",
    b"alnair_cuda_memory_limit_bytes": "memory_limit_bytes",
    b"alnair_cuda_throttled_seconds_total": "throttled_ns",
}
UNIT = {b"alnair_cuda_throttled_seconds_total": 1e9}  # divided by, as abi/fields.py serves nanoseconds

CHILDREN: list[subprocess.Popen] = []  # everything started, ended in main's finally (also on Ctrl-C)
FORGED_POD = b"11111111-2222-4333-8444-555555555555"  # the pod a planted dead writer's header claims to be
# Files the exporter itself keeps in the directory (where this version has them): not a writer's leftovers.
READER_MARKER = getattr(naming, "READER_MARKER", None)
STATE_NAME = f".{READER_MARKER}.cuda"  # the writers the exporter saw alive (abi/naming.py reader_state_name)
LINGERING = re.compile(rb"^alnair_cuda_segments_lingering (\S+)$", re.M)
SWEEP_PASSES = re.compile(rb"^alnair_cuda_segments_sweep_passes (\S+)$", re.M)


# ---------------------------------------------------------------- processes


def spawn(command: list[str], **kwargs) -> subprocess.Popen:
    process = subprocess.Popen(command, **kwargs)
    CHILDREN.append(process)
    return process


def end_children() -> None:
    for process in CHILDREN:  # all signalled first, so they exit in parallel
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.kill()
    for process in CHILDREN:
        with contextlib.suppress(Exception):
            process.wait(10)
    CHILDREN.clear()


def ready_path(process: subprocess.Popen) -> str:
    """The segment path of a writer's 'ready PATH' line (poll, not select: past 1024 fds)."""
    poller = select.poll()
    poller.register(process.stdout, select.POLLIN)
    line = process.stdout.readline() if poller.poll(STARTUP_TIMEOUT * 1000) else ""
    process.stdout.close()  # one fd per writer otherwise
    if not line.startswith("ready "):
        raise RuntimeError(f"writer did not start: {line!r}")
    return line.split(" ", 1)[1].strip()


def start_writer(shm_dir: Path, args: list[str], hold: bool) -> tuple[subprocess.Popen, str]:
    """A C writer; with `hold` its stdin stays open (closing it ends the writer), else /dev/null (churn ignores it)."""
    process = spawn(
        [str(WRITER), *args],
        stdin=subprocess.PIPE if hold else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "ALNAIR_SHM_DIR": str(shm_dir)},
    )
    return process, ready_path(process)


def as_duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"  # the flags take 500ms or 2s, not 0.5s


def linger_flags(seconds: float) -> tuple[list[str], float]:
    """--shm.linger where this exporter has it (a dead writer's last record served that long, then reclaimed);
    returns the flags and the linger in effect (0 without the flag: reclaimed at once)."""
    help_text = subprocess.run(
        [sys.executable, "-m", "alnair.exporter", "--help"], capture_output=True, text=True
    ).stdout
    return (["--shm.linger", as_duration(seconds)], seconds) if "--shm.linger" in help_text else ([], 0.0)


def proc_value(pid: int, file: str, key: str) -> int:
    with open(f"/proc/{pid}/{file}") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/{file}")


class Exporter:
    """The real exporter on a free loopback port, its stderr in a log file."""

    def __init__(
        self,
        shm_dir: Path,
        log_path: Path,
        interval: str,
        *extra: str,
        startup_timeout: float = STARTUP_TIMEOUT,
        python: str = sys.executable,
    ):
        self.port = free_port()
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = spawn(
                [
                    python,
                    "-m",
                    "alnair.exporter",
                    "--shm.dir",
                    str(shm_dir),
                    "--no-collector.host",
                    "--no-collector.nvml",
                    "--collector.cuda.interval",
                    interval,
                    "--web.listen-address",
                    f"127.0.0.1:{self.port}",
                    *extra,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        self.client = ScrapeClient(self.port)
        self.wait_serving(startup_timeout)

    def wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"exporter exited: {self.log_path.read_text(errors='replace')}")
            with contextlib.suppress(OSError, http.client.HTTPException, RuntimeError):
                if SAMPLE_FINISHED.search(self.client.get()[1]):
                    return
            self.client.close()
            time.sleep(0.1)
        raise TimeoutError("the exporter never served a cuda sample")

    def rss_kib(self) -> int:
        return proc_value(self.process.pid, "status", "VmRSS:")

    def rchar(self) -> int:
        """Bytes its read syscalls returned so far: a 4 GiB pread would show here."""
        return proc_value(self.process.pid, "io", "rchar:")

    def log(self) -> bytes:
        return self.log_path.read_bytes()

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@dataclass
class Sample:
    """One background sample of the cuda collector, as a served body reports it."""

    finished: float
    duration: float
    skipped: dict[str, int]
    reclaimed: int
    segments: int
    success: bool
    body: bytes
    lingering: int = 0

    @property
    def started(self) -> float:
        return self.finished - self.duration


def parse_sample(body: bytes) -> Sample | None:
    finished, duration = SAMPLE_FINISHED.search(body), SAMPLE_DURATION.search(body)
    segments, reclaimed, success = SEGMENTS.search(body), RECLAIMED.search(body), SUCCESS.search(body)
    if not (finished and duration and segments and reclaimed and success):
        return None
    skipped = {m[1].decode(): int(float(m[2])) for m in SKIPPED.finditer(body)}
    lingering = LINGERING.search(body)
    return Sample(
        float(finished[1]),
        float(duration[1]),
        skipped,
        int(float(reclaimed[1])),
        int(float(segments[1])),
        float(success[1]) == 1.0,
        body,
        int(float(lingering[1])) if lingering else 0,
    )


class Prober:
    """Scrapes the exporter all along on a thread: every status, whether it is alive, each distinct sample."""

    def __init__(self, exporter: Exporter, period: float, on_body=None, keep_bodies: bool = True):
        self.exporter, self.period, self.on_body, self.keep_bodies = exporter, period, on_body, keep_bodies
        self.client = ScrapeClient(exporter.port)  # its own connection: the main thread scrapes too
        self.scrapes = 0
        self.failures: list[str] = []
        self.exited: int | None = None
        self.samples: dict[float, Sample] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.scrape_once()
            except Exception as e:  # a checker's bug must not silently end the probing
                self.failures.append(f"prober: {e!r}")
            self._stop.wait(self.period)

    def scrape_once(self) -> None:
        if self.exporter.process.poll() is not None:
            self.exited = self.exporter.process.returncode
            return
        try:
            body = self.client.get()[1]
        except (OSError, http.client.HTTPException, RuntimeError) as e:  # RuntimeError: a status other than 200
            self.failures.append(repr(e))
            self.client.close()
            return
        self.scrapes += 1
        sample = parse_sample(body)
        if sample and sample.finished not in self.samples:
            self.samples[sample.finished] = sample
            if self.on_body:
                self.on_body(sample)
            if not self.keep_bodies:
                sample.body = b""  # 200 churning writers' bodies are ~1 MB each

    def samples_since(self, wall: float) -> list[Sample]:
        """Samples that began after `wall` (time.time()): they saw the directory as it was then."""
        return sorted((s for s in list(self.samples.values()) if s.started > wall), key=lambda s: s.finished)

    def wait_samples(self, wall: float, count: int, timeout: float = 120.0) -> list[Sample]:
        deadline = time.monotonic() + timeout + max(0.0, wall - time.time())  # `wall` may be a linger ahead
        while len(found := self.samples_since(wall)) < count:
            if time.monotonic() > deadline or self.exited is not None:
                raise TimeoutError(f"{len(found)} of {count} samples after {wall} (exporter exit: {self.exited})")
            time.sleep(0.05)
        return found

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


@dataclass
class Check:
    name: str
    ok: bool
    figure: str


def print_checks(title: str, checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    print(f"\n{title}")
    for c in checks:
        print(f"  {'ok  ' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.figure}")


def med_max(values: list[float], scale: float = 1000) -> str:
    return f"median {statistics.median(values) * scale:.1f} ms, max {max(values) * scale:.1f} ms over {len(values)}"


# ---------------------------------------------------------------- fuzz: what is planted


def header(**fields) -> layout.ShmHeader:
    """A header that validates, with `fields` overridden."""
    values = dict(
        magic=layout.SHM_MAGIC,
        abi_version=layout.ABI_VERSION,
        header_size=layout.HEADER_SIZE,
        record_kind=layout.KIND_CUDA,
        record_size=layout.CUDA_RECORD_SIZE,
        writer_pid=4242,
        seq=2,
        update_time_ns=time.time_ns(),
        comm=b"planted",
    )
    values.update(fields)
    return layout.ShmHeader(**values)


def record(device_count: int = 1, max_devices: int = layout.CUDA_MAX_DEVICES) -> bytes:
    r = layout.CudaRecord(device_count=device_count, max_devices=max_devices)
    for d in range(layout.CUDA_MAX_DEVICES):
        r.devices[d].device_index = d
        r.devices[d].kernel_launches = 7
    return bytes(r)


def valid(**fields) -> bytes:
    return bytes(header(**fields)) + record()


def write(path: bytes, data: bytes, sparse_size: int | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640)
    try:
        os.write(fd, data)
        if sparse_size is not None:
            os.ftruncate(fd, sparse_size)  # sparse: 4 GiB apparent size costs the planter one page
    finally:
        os.close(fd)


def set_old(path: bytes) -> None:
    """Past TEMP_FILE_GRACE_SECONDS: an abandoned temp file."""
    old = time.time() - 3600
    os.utime(path, (old, old), follow_symlinks=False)


# Each maker plants one file at `path` and returns its expected outcome when that depends on the bytes.
def plant_empty(path, rng):
    write(path, b"")


def plant_short_header(path, rng):
    write(path, valid()[: rng.randrange(1, layout.HEADER_SIZE)])


def plant_short_record(path, rng):
    write(path, valid()[: rng.randrange(layout.HEADER_SIZE, len(valid()))])


def plant_bad_magic(path, rng):
    write(path, valid(magic=rng.choice([0, 0x4C41 << 48, layout.SHM_MAGIC ^ 1, rng.getrandbits(64)])))


def plant_abi_version(path, rng):
    write(path, valid(abi_version=rng.choice([0, 1, layout.ABI_VERSION + 1, 0xFFFFFFFF])))


def plant_wrong_kind(path, rng):
    write(path, valid(record_kind=rng.choice([0, layout.KIND_PYTHON, 3, 0xFFFFFFFF])))


def plant_wrong_header_size(path, rng):
    write(path, valid(header_size=rng.choice([0, 128, 255, 257, 4096, 0xFFFFFFFF])))


def plant_small_record(path, rng):
    write(path, valid(record_size=rng.choice([0, 8, layout.CUDA_DEVICES_OFFSET - 1])))


def plant_torn(path, rng):
    write(path, valid(seq=rng.randrange(1, 1 << 40) | 1))  # a publish that never ends


def plant_dead_writer(path, rng):
    write(path, valid(writer_pid=rng.randrange(2, 1 << 22), pod_uid=FORGED_POD))


def plant_fifo(path, rng):
    os.mkfifo(path)


def plant_directory(path, rng):
    os.mkdir(path)


def plant_bad_devices(path, rng):
    count, max_devices, size = rng.choice([(65, 64, None), (0xFFFFFFFF, 64, None), (3, 2, None), (64, 64, 1)])
    # (64, 64, 1): a legal count in a record_size that holds one device
    record_size = layout.CUDA_RECORD_SIZE if size is None else layout.CUDA_DEVICES_OFFSET + layout.CUDA_DEVICE_SIZE
    data = bytes(header(record_size=record_size)) + record(count, max_devices)
    write(path, data[: layout.HEADER_SIZE + record_size])


def plant_oversized_sparse(path, rng):
    write(path, bytes(header(record_size=0xFFFFFFFF)) + record(), sparse_size=layout.HEADER_SIZE + 0xFFFFFFFF)


def plant_oversized_small(path, rng):
    write(path, bytes(header(record_size=rng.randrange(layout.MAX_RECORD_SIZE + 1, 1 << 32))))


def plant_random(path, rng):
    data = rng.randbytes(rng.randrange(0, 9000))
    write(path, data)
    return "truncated" if len(data) < layout.HEADER_SIZE else "bad_magic"  # a random magic matches 1 in 2**64


def plant_symlink(path, rng):
    os.symlink(rng.choice(SYMLINK_TARGETS), path)


def plant_socket(path, rng):
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(path)  # the file stays after close; open() on it fails with ENXIO


CONTROL_COMMS = [b"\x1b[2J\x1b[Hpwn", b'a"}\nfake 1', b"\x07\x08\x7f\xc2\x9b31m", b'\xff\xfe\\"x', b"\t\r\n\x00"]


def plant_comm(path, rng):
    write(path, valid(comm=rng.choice(CONTROL_COMMS), pod_uid=b'\x1b]0;title\x07"}', container_id=b"\n\r\x1b[31m"))


def plant_old_temp(path, rng):
    write(path, valid())
    set_old(path)


def plant_future_temp(path, rng):
    write(path, valid())
    future = time.time() + 365 * 86400  # never "older than the grace period": kept, whatever the run's length
    os.utime(path, (future, future))


def plant_old_temp_dir(path, rng):
    os.mkdir(path)
    set_old(path)


def plant_old_temp_symlink(path, rng):
    os.symlink(b"/etc/shadow", path)
    set_old(path)


def plant_unrelated(path, rng):
    write(path, valid())  # a valid, unlocked segment under a name not of the kind: never reclaimed


SYMLINK_TARGETS: list[bytes] = []  # filled in by the fuzz: /etc/shadow, a victim file, a live segment, ...


@dataclass(frozen=True)
class Kind:
    name: str
    weight: int  # files per 10,000
    plant: object
    outcome: str  # a skip reason, served, reclaimed or kept (not the cuda kind's: neither read nor counted)
    locked: bool  # held by a live process: decides whether a parseable header is parsed or reclaimed
    names: str = "segment"  # segment, odd (control characters, invalid UTF-8), temp, unrelated


# Locked where the header validates (else the reader reclaims the file as a dead writer's) and the point is
# what it does with the record; also the oversized sparse files, to show that a held one is refused unread.
KINDS = [
    Kind("empty file", 300, plant_empty, "truncated", False),
    Kind("shorter than the header", 500, plant_short_header, "truncated", False),
    Kind("header, record cut short", 500, plant_short_record, "truncated", False),
    Kind("bad magic", 500, plant_bad_magic, "bad_magic", False),
    Kind("valid, held, name no writer makes (controls, not UTF-8)", 300, plant_comm, "bad_name", True, "odd"),
    Kind("wrong ABI version", 700, plant_abi_version, "abi_version", False),
    Kind("wrong record kind", 400, plant_wrong_kind, "malformed", False),
    Kind("wrong header size", 400, plant_wrong_header_size, "malformed", False),
    Kind("impossible device count, held", 600, plant_bad_devices, "malformed", True),
    Kind("impossible device count, unheld", 300, plant_bad_devices, "reclaimed", False),
    Kind("record_size under the fixed part, held", 200, plant_small_record, "malformed", True),
    Kind("record_size 0xFFFFFFFF sparse 4 GiB, held", 300, plant_oversized_sparse, "oversized", True),
    Kind("record_size 0xFFFFFFFF sparse 4 GiB, unheld", 300, plant_oversized_sparse, "oversized", False),
    Kind("record_size > 64 KiB, header only", 200, plant_oversized_small, "oversized", False),
    Kind("random bytes (0-9000)", 1400, plant_random, "random", False),
    Kind("symlink (/etc/shadow, live segment, ...)", 500, plant_symlink, "unreadable", False),
    Kind("unix socket", 100, plant_socket, "unreadable", False),
    Kind("FIFO", 400, plant_fifo, "malformed", False),
    Kind("directory", 300, plant_directory, "malformed", False),
    Kind("control characters in comm/pod/container, held", 500, plant_comm, "served", True),
    Kind("odd seq forever, held", 300, plant_torn, "torn", True),
    Kind("dead writer's valid segment", 500, plant_dead_writer, "reclaimed", False),
    Kind("temp file, 1 h old", 200, plant_old_temp, "reclaimed", False, "temp"),
    Kind("temp file, mtime in a year", 100, plant_future_temp, "kept", False, "temp"),
    Kind("temp-named directory, 1 h old", 20, plant_old_temp_dir, "kept", False, "odd-temp"),
    Kind("temp-named symlink to /etc/shadow, 1 h old", 30, plant_old_temp_symlink, "kept", False, "temp"),
    Kind("valid segment, name not of the kind", 350, plant_unrelated, "kept", False, "unrelated"),
]


def kind_counts(files: int) -> list[int]:
    """Each kind's share of `files`, at least one each; rounding goes to random bytes."""
    total = sum(k.weight for k in KINDS)
    counts = [max(1, k.weight * files // total) for k in KINDS]
    counts[[k.name for k in KINDS].index("random bytes (0-9000)")] += max(0, files - sum(counts))
    return counts


ODD_BYTES = b"\x1b\n\r\t\x7f\xff\xfe\xc2\x9b[]\"'\\ %$;|&<>"


def file_name(kind: Kind, i: int, rng: random.Random) -> bytes:
    ns, pid, ticks = rng.randrange(1 << 32), rng.randrange(1 << 22), rng.randrange(1 << 40)
    if kind.names == "odd":  # a name a terminal or a log would obey: control characters, invalid UTF-8
        return b"alnair.cuda." + bytes(rng.choice(ODD_BYTES) for _ in range(rng.randrange(1, 40))) + b".%d" % i
    if kind.names == "temp":
        return b".alnair.cuda.%d.%d.%d.tmp" % (ns, pid, ticks)
    if kind.names == "odd-temp":  # a forged log line, if the name reaches a log unescaped
        return b".alnair.cuda.\x1b[31m\n2026-01-01 00:00:00,000 ERROR forged by a planted name %d.tmp" % i
    if kind.names == "unrelated":
        return rng.choice([b"unrelated.%d", b"alnair.cudax.%d", b"alnair.python-cuda.%d"]) % i
    return b"alnair.cuda.%d.%d.%d" % (ns, pid, ticks * 1_000_000 + i)  # the writers' form: readers open no other


@dataclass
class Planted:
    name: bytes
    kind: Kind
    outcome: str
    identity: tuple = ()  # (inode, size, mtime) once planted


class Locker:
    """One process holding POSIX write locks (F_SETLK, the writers' liveness signal) on many files; the reader
    ignores locks its own process holds, so the holder must be another process (tests/support.py)."""

    SCRIPT = (
        "import fcntl, os, sys\nfds = []\nfor line in sys.stdin:\n"
        "    if line == 'sync\\n':\n        print('locked', len(fds), flush=True)\n        continue\n"
        "    fd = os.open(line.rstrip('\\n'), os.O_RDWR)\n    fcntl.lockf(fd, fcntl.LOCK_EX)\n    fds.append(fd)\n"
    )

    def __init__(self):
        self.process = spawn(
            [sys.executable, "-c", self.SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def lock_all(self, paths: list[str]) -> None:
        self.process.stdin.write("".join(f"{p}\n" for p in paths) + "sync\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().split()
        if answer != ["locked", str(len(paths))]:
            raise RuntimeError(f"locker answered {answer}")

    @property
    def pid(self) -> int:
        return self.process.pid


def plant(shm_dir: Path, stage: Path, files: int, rng: random.Random, locker: Locker) -> list[Planted]:
    """Plants every kind. Held files are built and locked under a staging name, then renamed in (the writers'
    own protocol): the exporter never sees them unlocked, so it never reclaims one."""
    planted, held = [], []
    for kind, count in zip(KINDS, kind_counts(files)):
        for _ in range(count):
            name = file_name(kind, len(planted), rng)
            where = (
                os.path.join(bytes(stage), b"%d" % len(planted)) if kind.locked else os.path.join(bytes(shm_dir), name)
            )
            outcome = kind.plant(where, rng) or kind.outcome
            planted.append(Planted(name, kind, outcome))
            if kind.locked:
                held.append((where, name))
    lock_and_move(shm_dir, held, locker)
    for p in planted:
        with contextlib.suppress(FileNotFoundError):  # the exporter may have reclaimed it already
            p.identity = identity(os.path.join(bytes(shm_dir), p.name))
    return planted


def lock_and_move(shm_dir: Path, held: list[tuple[bytes, bytes]], locker: Locker) -> None:
    locker.lock_all([os.fsdecode(where) for where, _ in held])
    for where, name in held:
        os.rename(where, os.path.join(bytes(shm_dir), name))


def plant_kind(shm_dir: Path, stage: Path, kind: Kind, count: int, rng: random.Random, locker: Locker) -> None:
    """`count` files of one kind, for a directory of nothing else."""
    held = []
    for i in range(count):
        name = file_name(kind, i, rng)
        where = os.path.join(bytes(stage if kind.locked else shm_dir), name)
        kind.plant(where, rng)
        held += [(where, name)] if kind.locked else []
    lock_and_move(shm_dir, held, locker)


def identity(path: bytes) -> tuple:
    st = os.lstat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode


# ---------------------------------------------------------------- fuzz: what is checked

LIVE_FIELDS = [
    "kernel_launches",
    "graph_launches",
    "bytes_in_use",
    "peak_bytes",
    "allocations",
    "failed_allocations",
    "limit_denied_allocations",
    "memory_limit_bytes",
    "throttled_ns",
]


def live_args(i: int) -> tuple[list[str], int, dict[str, int]]:
    """Writer i's command line, device count and base values (device d gets base + d)."""
    devices = 1 + i % 4
    base = {f: (i + 1) * 1_000_000 + 1000 * n + 7 for n, f in enumerate(LIVE_FIELDS)}
    args = ["--devices", str(devices)] + [a for f, v in base.items() for a in ("--set", f"{f}={v}")]
    return args, devices, base


def expected_series(pid: int, devices: int, base: dict[str, int]) -> dict[tuple, float]:
    out = {}
    for metric, f in FIELDS.items():
        for d in range(devices):
            out[(metric, str(pid).encode(), str(d).encode())] = (base[f] + d) / UNIT.get(metric, 1)
    return out


def served_series(body: bytes) -> dict[tuple, float]:
    return {(m[1], m[2], m[3]): float(m[4]) for m in DEVICE.finditer(body)}


def exposition_problems(body: bytes) -> list[str]:
    """Lines that break the text format, and raw control characters anywhere in the body."""
    bad = [line[:80] for line in body.split(b"\n") if line and not LINE.fullmatch(line)]
    raw = RAW_CONTROL.findall(body)
    return [f"line {b!r}" for b in bad[:3]] + ([f"{len(raw)} raw control characters"] if raw else [])


def duplicate_series(body: bytes) -> int:
    keys = Counter(line.rsplit(b" ", 1)[0] for line in body.split(b"\n") if line and not line.startswith(b"#"))
    return sum(n - 1 for n in keys.values() if n > 1)


@dataclass
class LiveCheck:
    """Every served sample: the live writers' series exact, the exposition well formed."""

    writers: list[tuple[float, dict[tuple, float]]] = field(default_factory=list)  # (published since, series)
    samples: int = 0
    series: int = 0
    mismatches: list[str] = field(default_factory=list)
    format_problems: list[str] = field(default_factory=list)

    def __call__(self, sample: Sample) -> None:
        self.samples += 1
        served = served_series(sample.body)
        for since, expected in list(self.writers):
            if since >= sample.started:
                continue  # a writer that started after this sample began
            self.series += len(expected)
            for key, value in expected.items():
                if served.get(key) != value:
                    self.mismatches.append(f"{key}: served {served.get(key)}, published {value}")
        self.format_problems += exposition_problems(sample.body)


def expected_skips(planted: list[Planted]) -> Counter:
    return Counter(p.outcome for p in planted if p.outcome in SKIP_REASONS)


def symlink_targets(fuzz_root: Path, live_path: str) -> list[bytes]:
    victim = fuzz_root / "victim-secret"
    victim.write_bytes(b"root:$6$not-for-the-exporter\n")
    return [
        b"/etc/shadow",
        b"/etc/passwd",
        bytes(victim),
        live_path.encode(),
        b"/etc",
        b"/dev/zero",
        b"/nonexistent/dangling",
        b"../victim-secret",
    ]


def target_state(targets: list[bytes]) -> dict[bytes, tuple]:
    """What a followed symlink could change: metadata and, for regular files, the bytes."""
    state = {}
    for t in targets:
        try:
            st = os.stat(t)
        except OSError:
            state[t] = ("absent",)
            continue
        digest = hashlib.sha256(open(t, "rb").read()).hexdigest() if os.path.isfile(t) else ""
        state[t] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, digest)
    return state


def files_left(shm_dir: Path, planted: list[Planted]) -> dict[str, tuple[int, int]]:
    """Per kind: (planted, still there unchanged)."""
    left: dict[str, list[int]] = {}
    for p in planted:
        row = left.setdefault(p.kind.name, [0, 0])
        row[0] += 1
        try:
            row[1] += bool(p.identity) and identity(os.path.join(bytes(shm_dir), p.name)) == p.identity
        except FileNotFoundError:
            pass
    return {k: (a, b) for k, (a, b) in left.items()}


def print_kind_table(planted: list[Planted], left: dict[str, tuple[int, int]]) -> list[Check]:
    """What the exporter did with each kind; a kind fails if the wrong files are gone or left."""
    print(f"\n  {'kind':<50}{'planted':>8}  {'lock':<5}{'expected':<28}{'left':>6}  what the exporter did")
    checks = []
    for kind in KINDS:
        n, kept = left.get(kind.name, (0, 0))
        outcomes = Counter(p.outcome for p in planted if p.kind is kind)
        outcome = "/".join(f"{o} {c}" if len(outcomes) > 1 else o for o, c in sorted(outcomes.items()))
        want = 0 if kind.outcome == "reclaimed" else n
        did = {"reclaimed": "unlinked it", "served": "served it, sanitised", "kept": "left it alone, uncounted"}.get(
            kind.outcome, "skipped and counted it, left the file"
        )
        print(f"  {kind.name:<50}{n:>8}  {'yes' if kind.locked else 'no':<5}{outcome:<28}{kept:>6}  {did}")
        checks.append(Check(f"files left: {kind.name}", kept == want, f"{kept} of {n}, expected {want}"))
    return [c for c in checks if not c.ok] or [
        Check(
            "every planted file left or reclaimed as its kind says", True, f"{len(planted)} files, {len(KINDS)} kinds"
        )
    ]


def over_limit_expectation(shm_dir: Path, outcome_of: dict[bytes, str], cap: int) -> tuple[Counter, int, set[bytes]]:
    """What a reader with `cap` sees: first the writers the running exporter saved as seen alive (read by name),
    then the rest in the order its scandir will walk them: skip counts, records served, and the names served;
    past the cap every name of the writers' form not seen alive is over_limit."""
    skips, served = Counter(), set()
    holders = [line.rpartition(b" ")[0] for line in (shm_dir / STATE_NAME).read_bytes().splitlines()]
    for name in holders:
        note_outcome("over_limit" if len(served) >= cap else outcome_of.get(name, "unknown"), name, skips, served)
    with os.scandir(bytes(shm_dir)) as entries:
        for entry in entries:
            if not entry.name.startswith(b"alnair.cuda.") or entry.name in holders:
                continue
            outcome = outcome_of.get(entry.name, "unknown")  # not planted, or should be gone: fails the check
            note_outcome(
                "over_limit" if len(served) >= cap and outcome != "bad_name" else outcome, entry.name, skips, served
            )
    return skips, len(served), served


def wait_whole_sweep(prober: Prober, timeout: float = 120.0) -> float:
    """When the first sample that followed a whole sweep of the directory ended (exporters without sweeps: now)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for sample in prober.samples_since(0):
            passes = SWEEP_PASSES.search(sample.body)
            if not passes or float(passes[1]) > 0:
                return sample.finished
        time.sleep(0.1)
    raise TimeoutError("no whole sweep of the directory")


def note_outcome(outcome: str, name: bytes, skips: Counter, served: set[bytes]) -> None:
    if outcome == "served":
        served.add(name)
    else:
        skips[outcome] += 1


def skip_dict(counter: Counter) -> dict[str, int]:
    return {r: counter.get(r, 0) for r in SKIP_REASONS}


# ---------------------------------------------------------------- fuzz: the run


def start_live_writers(shm_dir: Path, count: int, offset: int, check: LiveCheck) -> list[tuple[subprocess.Popen, str]]:
    writers = []
    for i in range(offset, offset + count):
        args, devices, base = live_args(i)
        process, path = start_writer(shm_dir, args, hold=True)
        check.writers.append((time.time(), expected_series(process.pid, devices, base)))
        writers.append((process, path))
    return writers


def fuzz(args: argparse.Namespace, root: Path) -> bool:
    shm_dir, stage = root / "fuzz", root / "stage"
    shm_dir.mkdir(mode=0o700)
    stage.mkdir()
    rng = random.Random(args.seed)
    check = LiveCheck()
    live = start_live_writers(shm_dir, args.live, 0, check)
    SYMLINK_TARGETS[:] = symlink_targets(root, live[0][1])
    targets_before = target_state([t for t in SYMLINK_TARGETS if t.startswith(b"/")])
    exporter = Exporter(shm_dir, root / "fuzz-exporter.log", "1s", *args.linger_flags)
    prober = Prober(exporter, 0.2, check)
    locker = Locker()
    try:
        prober.wait_samples(time.time(), 2)
        rss_before = exporter.rss_kib()
        started = time.monotonic()
        planted = plant(shm_dir, stage, args.files, rng, locker)
        live += start_live_writers(shm_dir, 1, args.live, check)  # a writer that starts after the attack
        plant_seconds, plant_end = time.monotonic() - started, time.time()
        print(
            f"  planted {len(planted)} files in {plant_seconds:.1f} s ({sum(p.kind.locked for p in planted)} "
            f"held by locker pid {locker.pid}); {len(live)} live writers; linger {args.linger_in_effect:g} s"
        )
        # Dead writers' files are served while they linger, then reclaimed: a sample that began a linger
        # and a sample period (plus its own length) after planting sees the directory as it stays.
        settled = plant_end + (args.linger_in_effect + 2.0 if args.linger_in_effect else 0.0)
        prober.wait_samples(settled, 1)
        rchar_before, window_start = exporter.rchar(), time.time()
        steady = prober.wait_samples(settled, args.samples)
        rchar_per_sample = (exporter.rchar() - rchar_before) / max(1, sum(window_start < s.finished for s in steady))
        lingering = [s for s in prober.samples_since(plant_end) if s.finished < settled]
        checks = fuzz_checks(
            exporter, prober, check, planted, steady, live, locker, rss_before, rchar_per_sample, targets_before
        )
        checks += linger_checks(lingering)
        checks += over_limit_phase(shm_dir, root, planted, live, args)
        left = files_left(shm_dir, planted)
    finally:
        prober.close()
        exporter.stop()
    print_marker_finding(root, args)
    cost_phase(root, args)  # alone on the machine: no other exporter sampling meanwhile
    checks += print_kind_table(planted, left)
    checks.append(
        Check("exporter exit status on SIGTERM", exporter.process.returncode == 0, str(exporter.process.returncode))
    )
    print_checks("fuzz: checks", checks)
    return all(c.ok for c in checks)


def fuzz_checks(
    exporter, prober, check, planted, steady, live, locker, rss_before, rchar_per_sample, targets_before
) -> list[Check]:
    # Every held planted file is locked by the one locker process, and a pid is served once: one of them is
    # served, the others are skipped as duplicates.
    held_served = sum(p.outcome == "served" for p in planted)
    want = skip_dict(expected_skips(planted) + Counter(duplicate=max(0, held_served - 1)))
    want_served = min(1, held_served) + len(live)
    want_reclaimed = sum(p.outcome == "reclaimed" for p in planted)
    durations = [s.duration for s in steady]
    rss_after = exporter.rss_kib()
    last = steady[-1].body
    infos = [m for m in INFO.finditer(last) if int(m[1]) == locker.pid]
    log = exporter.log()
    # At most a header per entry, and per held segment 4 seqlock tries of header + known record + 2 seq reads;
    # 1 MiB for the scrapes' requests and /proc. One 4 GiB pread would be 500 times over.
    held = sum(p.kind.locked for p in planted) + len(live)
    read_bound = (
        len(planted) * layout.HEADER_SIZE + held * 4 * (layout.HEADER_SIZE + layout.CUDA_RECORD_SIZE + 16) + (1 << 20)
    )
    checks = [
        Check(
            f"skipped{{reason={r}}} every sample",
            all(s.skipped.get(r) == n for s in steady),
            f"expected {n}, served {sorted({s.skipped.get(r) for s in steady})}",
        )
        for r, n in want.items()
    ]
    checks += [
        Check(
            "segments served every sample",
            all(s.segments == want_served and not s.lingering for s in steady),
            f"expected {want_served}, served {sorted({s.segments for s in steady})}, "
            f"lingering {sorted({s.lingering for s in steady})}",
        ),
        Check(
            "reclaimed_total",
            all(s.reclaimed == want_reclaimed for s in steady),
            f"expected {want_reclaimed}, served {sorted({s.reclaimed for s in steady})}",
        ),
        Check(
            "cuda collector succeeded every sample",
            all(s.success for s in prober.samples.values()),
            f"{len(prober.samples)} samples",
        ),
        Check(
            "exporter alive, /metrics 200 throughout",
            prober.exited is None and not prober.failures and exporter.process.poll() is None,
            f"{prober.scrapes} scrapes, {len(prober.failures)} failed {prober.failures[:2]}, exit {prober.exited}",
        ),
        Check(
            "live writers' values exact in every sample",
            not check.mismatches and check.samples > 0,
            f"{check.series} series checked in {check.samples} samples, {len(check.mismatches)} wrong "
            f"{check.mismatches[:2]}",
        ),
        Check(
            "exposition well formed, no raw control characters",
            not check.format_problems,
            str(check.format_problems[:3]),
        ),
        Check(
            "the locker's held files served once, sanitised",
            len(infos) == min(1, held_served) and not any(re.search(rb"[\x00-\x1f\x7f]", m[2]) for m in infos),
            f"{len(infos)} process_info of the locker's pid",
        ),
        Check("RSS under 150 MiB", rss_after < RSS_LIMIT_KIB, f"{rss_before} KiB before, {rss_after} KiB after"),
        Check("cuda sample duration", True, med_max(durations)),
        Check(
            "bytes read per sample (no 4 GiB record read)",
            rchar_per_sample < read_bound,
            f"{rchar_per_sample / 1024:.0f} KiB, bound {read_bound / 1024:.0f} KiB",
        ),
        Check(
            "symlink targets untouched",
            target_state(list(targets_before)) == targets_before,
            f"{len(targets_before)} targets",
        ),
    ]
    print_findings(last, log, planted)
    return checks


def print_findings(body: bytes, log: bytes, planted: list[Planted]) -> None:
    """What the exporter did that it arguably should not: printed, not failed, so the bench gates regressions
    of what is enforced today (docs/benchmarks.md lists them)."""
    dirs = sum(p.kind.name.startswith("temp-named directory") for p in planted)
    warnings = log.count(b"cannot reclaim dead writer's segment")
    forged = len(re.findall(rb"^2026-01-01 00:00:00,000 ERROR forged", log, re.M))
    escapes = log.count(b"\x1b")
    print(f"  finding: {duplicate_series(body)} duplicate series in one body (one process holds many segments)")
    print(
        f"  finding: {warnings} 'cannot reclaim' warnings logged ({dirs} temp-named directories, every sample); "
        f"{forged} forged log lines and {escapes} raw ESC bytes in the log; log {len(log)} bytes"
    )


def linger_checks(lingering: list[Sample]) -> list[Check]:
    """While they linger, planted unlocked files are served as exited writers: never under the pod their header
    claims (the reader believes a claim only of a live process it cannot see)."""
    if not lingering:
        return []
    forged = max(
        len(re.findall(rb'^alnair_cuda_process_info\{[^}]*pod_uid="' + FORGED_POD + rb'"', s.body, re.M))
        for s in lingering
    )
    print(
        f"  finding: while they lingered ({len(lingering)} samples), up to {max(s.lingering for s in lingering)} "
        "planted unlocked files never seen alive were served as exited writers (pid label writer_pid@ns, their "
        "counters)"
    )
    return [
        Check(
            "lingering planted files never under the pod they claim",
            forged == 0,
            f"{forged} process_info with the claimed pod_uid in {len(lingering)} samples",
        )
    ]


def cost_phase(root: Path, args: argparse.Namespace) -> None:
    """What one directory entry costs a sample, by kind: the cap bounds records served, not entries read."""
    count = max(100, args.files // 10)
    costs = {}
    for label, maker, locked in (("bad magic", plant_bad_magic, False), ("held, odd seq", plant_torn, True)):
        shm_dir, stage = root / f"cost-{locked}", root / f"cost-stage-{locked}"
        shm_dir.mkdir(mode=0o700)
        stage.mkdir()
        kind = Kind(label, 0, maker, "", locked)
        locker = Locker()
        plant_kind(shm_dir, stage, kind, count, random.Random(args.seed), locker)
        exporter = Exporter(shm_dir, root / f"cost-{locked}.log", "1s", *args.linger_flags)
        prober = Prober(exporter, 0.2, keep_bodies=False)
        try:
            costs[label] = statistics.median(s.duration for s in prober.wait_samples(time.time(), 3)) / count
        finally:
            prober.close()
            exporter.stop()
    print(
        "  finding: sample cost per entry: "
        + ", ".join(f"{k} {v * 1e6:.0f} us" for k, v in costs.items())
        + f" ({count} of each, alone in a directory); skipped entries do not count against --shm.max-segments"
    )


def print_marker_finding(root: Path, args: argparse.Namespace, timeout: float = 10.0) -> None:
    """An exporter that announces itself with a marker file opens it for writing at start: a FIFO planted
    under that name, before it starts, must not keep it from serving."""
    if READER_MARKER is None:
        return
    directory = root / "marker-fifo"
    directory.mkdir(mode=0o700)
    os.mkfifo(directory / READER_MARKER)
    try:
        Exporter(directory, root / "marker-exporter.log", "1s", *args.linger_flags, startup_timeout=timeout)
        verdict = "served normally"
    except TimeoutError:
        verdict = f"NOT serving after {timeout:g} s (blocked opening the FIFO for writing; killed)"
    except RuntimeError as e:
        verdict = f"exited: {str(e)[-120:]!r}"
    print(f"  finding: exporter started with a FIFO named {READER_MARKER} in --shm.dir: {verdict}")


def over_limit_phase(shm_dir: Path, root: Path, planted: list[Planted], live, args) -> list[Check]:
    """A second exporter on the same directory with --shm.max-segments half the parseable records."""
    outcome_of = {p.name: p.outcome for p in planted if p.outcome != "reclaimed"}
    outcome_of.update({os.path.basename(path).encode(): "served" for _, path in live})
    cap = max(1, sum(o == "served" for o in outcome_of.values()) // 2)
    skips, served, names = over_limit_expectation(shm_dir, outcome_of, cap)
    live_names = {os.path.basename(path).encode() for _, path in live}
    planted_in = sum(n not in live_names for n in names)  # under the cap, all the locker's: served once
    served, skips["duplicate"] = served - max(0, planted_in - 1), max(0, planted_in - 1)
    capped = Exporter(shm_dir, root / "capped-exporter.log", "1s", "--shm.max-segments", str(cap), *args.linger_flags)
    prober = Prober(capped, 0.2)
    try:
        swept = wait_whole_sweep(prober)  # the skip counts stand for a whole sweep of the directory from then on
        samples = prober.wait_samples(swept, 3)
    finally:
        prober.close()
        capped.stop()
    want = skip_dict(skips)
    hidden = [path for _, path in live if os.path.basename(path).encode() not in names]
    late = "served" if live[-1][1] not in hidden else "hidden"
    print(
        f"  over_limit: --shm.max-segments {cap}: expected over_limit {want['over_limit']}, served "
        f"{sorted({s.skipped['over_limit'] for s in samples})}; live writers hidden by the cap: {len(hidden)} of "
        f"{len(live)} (the one started after the planting: {late}; writers seen alive first, then readdir order)"
    )
    exact = all(s.skipped == want and s.segments == served and s.reclaimed == 0 for s in samples)
    return [
        Check(
            f"cap {cap}: skipped{{reason}} and served exact",
            exact and not skips["unknown"],
            f"over_limit expected {want['over_limit']}, served {served} of {cap}, {len(samples)} samples, "
            f"{skips['unknown']} unexpected names",
        )
    ]


# ---------------------------------------------------------------- junk: a flood of names that once hid every job


def plant_names(shm_dir: Path, count: int, form: bytes, rng: random.Random, mtime: float | None = None) -> list[bytes]:
    """`count` empty files under names of the writers' form (or their temp form), made as fast as one process can."""
    names = []
    for i in range(count):
        name = form % (rng.randrange(1 << 32), rng.randrange(1 << 22), i)
        path = os.path.join(bytes(shm_dir), name)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        names.append(name)
    return names


class CpuPerSample:
    """The exporter's CPU time (all threads, ns resolution from schedstat) spent between two samples it served."""

    def __init__(self, pid: int):
        self.pid, self.per_sample = pid, []
        self.last = self.now()

    def now(self) -> float:
        tasks = f"/proc/{self.pid}/task"
        total = 0
        for tid in os.listdir(tasks):
            with contextlib.suppress(OSError), open(f"{tasks}/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9

    def __call__(self, sample: Sample) -> None:
        now = self.now()
        self.per_sample.append((sample.finished, now - self.last))
        self.last = now


@dataclass
class JunkRun:
    """What one exporter did under the junk attack."""

    plant_seconds: float = 0.0
    late_served_after: float | None = None  # seconds from the late writer's start to its first served sample
    cpu: list[tuple[float, float]] = field(default_factory=list)  # (sample finished, CPU seconds) after planting
    steady_from: float | None = None  # when a sample first counted every junk name (a whole sweep knew them all)
    sweep_passes: int | None = None
    rss_kib: int = 0
    left: int = 0
    success: bool = True
    wrong: int = 0  # series of the writers seen alive missing or wrong, over all samples after planting


def junk_run(args: argparse.Namespace, root: Path, label: str, python: str) -> JunkRun:
    """args.live writers, then args.junk empty files of the writers' form and args.temps temp names an hour old,
    then one more writer; the exporter (cuda only, 500 ms) is scraped all along."""
    shm_dir = root / f"junk-{label}"
    shm_dir.mkdir(mode=0o700)
    check, run = LiveCheck(), JunkRun()
    _held = start_live_writers(shm_dir, args.live, 0, check)  # alive while their stdin is open: to the end
    exporter = Exporter(
        shm_dir, root / f"junk-{label}.log", "500ms", "--no-collector.python", *args.linger_flags, python=python
    )
    cpu = CpuPerSample(exporter.process.pid)
    prober = Prober(exporter, 0.1, lambda sample: (check(sample), cpu(sample)))
    try:
        prober.wait_samples(time.time(), 2)
        rng, started = random.Random(args.seed), time.monotonic()
        names = plant_names(shm_dir, args.junk, b"alnair.cuda.%d.%d.%d", rng)
        names += plant_names(shm_dir, args.temps, b".alnair.cuda.%d.%d.%d.tmp", rng, time.time() - 3600)
        run.plant_seconds, planted = time.monotonic() - started, time.time()
        late, _ = start_writer(shm_dir, live_args(args.live)[0], hold=True)
        late_started = time.time()
        run.late_served_after = wait_late_writer(prober, late.pid, late_started, args.junk_seconds)
        samples = wait_junk_window(prober, planted, args)
        run.cpu = [(t, c) for t, c in cpu.per_sample if t > planted]
        steady = [s for s in samples if s.skipped.get("truncated") == args.junk]
        run.steady_from = steady[0].finished if steady else None
        passes = SWEEP_PASSES.search(samples[-1].body)
        run.sweep_passes = int(float(passes[1])) if passes else None
        run.rss_kib = exporter.rss_kib()
        run.success = all(s.success for s in samples) and prober.exited is None and not prober.failures
        run.wrong = len(check.mismatches)
    finally:
        prober.close()
        exporter.stop()
    run.left = sum(os.path.lexists(os.path.join(bytes(shm_dir), n)) for n in names)
    return run


def wait_late_writer(prober: Prober, pid: int, since: float, timeout: float) -> float | None:
    """Seconds until a sample served the writer started at `since` (None: not within `timeout`)."""
    series = f'alnair_cuda_kernel_launches_total{{pid="{pid}",'.encode()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and prober.exited is None:
        found = [s for s in prober.samples_since(since) if series in s.body]
        if found:
            return found[0].finished - since
        time.sleep(0.05)
    return None


def wait_junk_window(prober: Prober, planted: float, args: argparse.Namespace) -> list[Sample]:
    """The samples after planting, until two whole sweeps have passed since one first knew every junk name, or
    args.junk_seconds (an exporter that never gets there)."""
    deadline = time.monotonic() + args.junk_seconds
    while time.monotonic() < deadline and prober.exited is None:
        samples = prober.samples_since(planted)
        known = [i for i, s in enumerate(samples) if s.skipped.get("truncated") == args.junk]
        passes = SWEEP_PASSES.search(samples[-1].body) if samples else None
        if known and passes and len(samples) - known[0] > 2 * int(float(passes[1])) + 2:
            return samples
        time.sleep(0.1)
    return prober.samples_since(planted)


def cpu_figures(run: JunkRun) -> tuple[str, str]:
    """Per-sample CPU before and after the first sample that knew every junk name."""
    cut = run.steady_from or float("inf")
    phases = [[c for t, c in run.cpu if t < cut], [c for t, c in run.cpu if t >= cut]]
    return tuple(med_max(p) if p else "none" for p in phases)


def junk(args: argparse.Namespace, root: Path) -> bool:
    runs = {"this tree": junk_run(args, root, "this", sys.executable)}
    if args.baseline_python:
        runs["baseline"] = junk_run(args, root, "baseline", args.baseline_python)
    names = args.junk + args.temps
    print(
        f"\n  {'':<11}{'plant s':>8}  {'late writer served':<20}{'CPU per sample, learning':<40}"
        f"{'CPU per sample, steady':<40}{'sweep':>6}{'RSS KiB':>9}{'left':>9}{'wrong series':>14}"
    )
    for label, run in runs.items():
        learning, steady = cpu_figures(run)
        late = f"after {run.late_served_after:.2f} s" if run.late_served_after is not None else "never"
        print(
            f"  {label:<11}{run.plant_seconds:>8.1f}  {late:<20}{learning:<40}{steady:<40}"
            f"{run.sweep_passes if run.sweep_passes is not None else '-':>6}"
            f"{run.rss_kib:>9}{run.left:>9}{run.wrong:>14}"
        )
    run = runs["this tree"]
    worst = max((c for _, c in run.cpu), default=float("inf"))
    checks = [
        Check(
            "writers seen alive served, values exact, every sample",
            run.wrong == 0,
            f"{args.live} writers, {run.wrong} series missing or wrong",
        ),
        Check(
            "the writer started after the flood served",
            run.late_served_after is not None,
            f"after {run.late_served_after} s",
        ),
        Check(
            "every sample under 100 ms of CPU", worst < 0.1, f"max {worst * 1000:.1f} ms over {len(run.cpu)} samples"
        ),
        Check(
            "a whole sweep came to know every junk name",
            run.steady_from is not None,
            f"{run.sweep_passes} samples a sweep",
        ),
        Check("nothing foreign deleted", run.left == names, f"{run.left} of {names} names left"),
        Check("exporter alive, cuda collector succeeded throughout", run.success, ""),
        Check("RSS under 150 MiB", run.rss_kib < RSS_LIMIT_KIB, f"{run.rss_kib} KiB"),
    ]
    print_checks(f"junk: {args.junk} empty files of the writers' form, {args.temps} temp names, checks", checks)
    return all(c.ok for c in checks)


# ---------------------------------------------------------------- sigkill


@dataclass
class TearCheck:
    """Every served sample: within a churning writer, every counter of every device must be one value."""

    samples: int = 0
    records: int = 0
    torn: list[str] = field(default_factory=list)
    pids_seen: set[bytes] = field(default_factory=set)
    torn_skips: int = 0

    def __call__(self, sample: Sample) -> None:
        values: dict[bytes, set[float]] = {}
        for m in DEVICE.finditer(sample.body):
            value = float(m[4])
            if m[1] == b"alnair_cuda_throttled_seconds_total":
                value = round(value * 1e9)
            elif m[1] == b"alnair_cuda_compute_quota_ratio":
                value = -1.0 if value != 1.0 else None  # quota/period of one publish is exactly 1
            if value is not None:
                values.setdefault(m[2], set()).add(value)
        self.samples += 1
        self.records += len(values)
        self.pids_seen.update(values)
        self.torn_skips += sample.skipped.get("torn", 0)
        self.torn += [f"pid {pid.decode()}: {sorted(v)[:4]}" for pid, v in values.items() if len(v) > 1]


def spawn_churners(shm_dir: Path, count: int, devices: int) -> list[tuple[subprocess.Popen, str]]:
    """Churning writers at nice 19, so they spin on what the exporter and this script leave."""
    wave = []
    for _ in range(count):
        process = spawn(
            [str(WRITER), "--devices", str(devices), "--churn"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "ALNAIR_SHM_DIR": str(shm_dir)},
        )
        os.setpriority(os.PRIO_PROCESS, process.pid, 19)
        wave.append(process)
    return [(p, ready_path(p)) for p in wave]


def kill_wave(wave: list[tuple[subprocess.Popen, str]]) -> tuple[int, int]:
    """SIGKILLs a wave at once; returns (segments still there, of those with an odd seq: died mid-publish)."""
    for process, _ in wave:
        os.kill(process.pid, signal.SIGKILL)
    for process, _ in wave:
        process.wait(10)
    present = odd = 0
    for _, path in wave:
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(path, os.O_RDONLY)
            try:
                present += 1
                odd += int.from_bytes(os.pread(fd, 8, layout.SEQ_OFFSET), "little") & 1
            finally:
                os.close(fd)
    return present, odd


def wait_sampled(prober: Prober, since: float, interval: float, rng: random.Random) -> None:
    """Two samples that began after `since` (so the wave was read alive), then a random part of a sample
    period, so the kills fall anywhere in the exporter's cycle."""
    prober.wait_samples(since, 2)
    time.sleep(rng.uniform(0, interval))


def sigkill(args: argparse.Namespace, root: Path) -> bool:
    shm_dir = root / "sigkill"
    shm_dir.mkdir(mode=0o700)
    rng = random.Random(args.seed)
    tears = TearCheck()
    exporter = Exporter(shm_dir, root / "sigkill-exporter.log", as_duration(args.interval), *args.linger_flags)
    prober = Prober(exporter, 0.05, tears, keep_bodies=False)
    started = time.monotonic()
    try:
        prober.wait_samples(time.time(), 1)
        rss_before, alive, spawned, killed, present, odd, peak = exporter.rss_kib(), [], 0, 0, 0, 0, 0
        while killed < args.writers:
            while spawned < args.writers and sum(len(w) for w in alive) + args.wave <= args.alive:
                alive.append(spawn_churners(shm_dir, min(args.wave, args.writers - spawned), args.devices))
                spawned += len(alive[-1])
            peak = max(peak, sum(len(w) for w in alive))
            wait_sampled(prober, time.time(), args.interval, rng)
            wave = alive.pop(0)
            p, o = kill_wave(wave)
            killed, present, odd = killed + len(wave), present + p, odd + o
        done = wait_reclaimed(prober, shm_dir, args.writers, 60 + args.linger_in_effect)
        rss_after, elapsed = exporter.rss_kib(), time.monotonic() - started
    finally:
        prober.close()
        exporter.stop()
    samples = list(prober.samples.values())
    checks = [
        Check(
            "no torn record served",
            not tears.torn,
            f"{tears.records} records in {tears.samples} samples checked, {len(tears.torn)} torn {tears.torn[:2]}",
        ),
        Check(
            "every writer served while churning",
            len(tears.pids_seen) >= args.writers,
            f"{len(tears.pids_seen)} of {args.writers} pids",
        ),
        Check("reader refused torn copies (skipped torn)", True, f"{tears.torn_skips} over all samples"),
        Check(
            "exporter alive, /metrics 200 throughout",
            prober.exited is None and not prober.failures,
            f"{prober.scrapes} scrapes, {len(prober.failures)} failed {prober.failures[:2]}, exit {prober.exited}",
        ),
        Check("cuda collector succeeded every sample", all(s.success for s in samples), f"{len(samples)} samples"),
        Check(
            "reclaimed_total reaches writers, directory empty",
            done[0] == args.writers and not done[1],
            f"reclaimed {done[0]} of {args.writers}, {len(done[1])} files left {done[1][:3]}",
        ),
        Check(
            "segments looked at right after each kill",
            True,
            f"{present} of {killed} still there, {odd} of them "
            f"with an odd seq (died mid-publish; the reader reclaims those at once)",
        ),
        Check("RSS under 150 MiB", rss_after < RSS_LIMIT_KIB, f"{rss_before} KiB before, {rss_after} KiB after"),
        Check("cuda sample duration", True, med_max([s.duration for s in samples])),
        Check("waves", True, f"{killed} killed, {args.wave} per wave, at most {peak} alive, {elapsed:.0f} s"),
        Check("exporter exit status on SIGTERM", exporter.process.returncode == 0, str(exporter.process.returncode)),
    ]
    print_checks("sigkill: checks", checks)
    return all(c.ok for c in checks)


def wait_reclaimed(prober: Prober, shm_dir: Path, writers: int, timeout: float) -> tuple[int, list[str]]:
    deadline = time.monotonic() + timeout
    while True:
        latest = max(prober.samples.values(), key=lambda s: s.finished)
        # the reader's own
        left = [n for n in os.listdir(shm_dir) if not n.startswith((READER_MARKER, "." + READER_MARKER))]
        if (latest.reclaimed >= writers and not left) or time.monotonic() > deadline:
            return latest.reclaimed, left
        time.sleep(0.1)


# ---------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--attack",
        choices=["fuzz", "sigkill", "junk", "both", "all"],
        default="both",
        help="both: fuzz and sigkill; all: the three",
    )
    parser.add_argument("--files", type=int, default=10_000, help="malformed files planted (fuzz)")
    parser.add_argument("--live", type=int, default=8, help="live C writers beside them (fuzz; one more starts after)")
    parser.add_argument("--samples", type=int, default=10, help="exporter samples measured after planting (fuzz)")
    parser.add_argument("--writers", type=int, default=1000, help="churning writers SIGKILLed in all (sigkill)")
    parser.add_argument("--alive", type=int, default=200, help="churning writers alive at most at once (sigkill)")
    parser.add_argument("--wave", type=int, default=100, help="writers SIGKILLed at once (sigkill)")
    parser.add_argument("--devices", type=int, default=4, help="devices per churning writer (sigkill)")
    parser.add_argument("--interval", type=float, default=0.25, help="cuda sample interval, seconds (sigkill)")
    parser.add_argument(
        "--linger",
        type=float,
        default=2.0,
        help="--shm.linger for the exporters, where they have it (theirs is 120 s: a run would wait it out)",
    )
    parser.add_argument("--junk", type=int, default=100_000, help="empty files of the writers' form planted (junk)")
    parser.add_argument("--temps", type=int, default=250_000, help="temp names planted beside them (junk)")
    parser.add_argument("--junk-seconds", type=float, default=180.0, help="how long the junk attack waits at most")
    parser.add_argument(
        "--baseline-python",
        help="an interpreter whose alnair is the baseline: the junk attack runs "
        "against its exporter too, figures side by side (not checked)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.wave > args.alive:
        parser.error("--wave must not exceed --alive")
    if args.linger <= 0:
        parser.error("--linger must be positive (the exporter's --shm.linger is)")
    return args


def main() -> None:
    args = parse_args()
    if not WRITER.exists():
        sys.exit(f"{WRITER} is missing: run `make -C intercept` first")
    raise_fd_limit()  # the locker inherits it: it holds an fd per held file
    args.linger_flags, args.linger_in_effect = linger_flags(args.linger)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so every cleanup runs
    print(
        f"machine: {machine()}; seed {args.seed}; exporter linger: "
        f"{f'--shm.linger {args.linger:g}s' if args.linger_flags else 'none (no --shm.linger flag)'}"
    )
    ok, started = True, time.monotonic()
    tmp_root = "/dev/shm" if os.path.isdir("/dev/shm") else None  # tmpfs, as the writers' default directory
    with tempfile.TemporaryDirectory(prefix="alnair-hostile-", dir=tmp_root, ignore_cleanup_errors=True) as tmp:
        try:
            if args.attack in ("junk", "all"):
                print(
                    f"\njunk: {args.junk} + {args.temps} names beside {args.live} live writers, cuda sampled every 500 "
                    "ms"
                )
                ok &= junk(args, Path(tmp))
                end_children()
            if args.attack in ("fuzz", "both", "all"):
                print(f"\nfuzz: {args.files} planted files, {args.live} live writers, exporter sampling every 1 s")
                ok &= fuzz(args, Path(tmp))
                end_children()
            if args.attack in ("sigkill", "both", "all"):
                print(
                    f"\nsigkill: {args.writers} churning writers, {args.wave} per wave, at most {args.alive} alive, "
                    f"nice 19, {args.devices} devices each, exporter sampling every {args.interval} s"
                )
                ok &= sigkill(args, Path(tmp))
        finally:
            end_children()
    print(f"\n{'all expectations met' if ok else 'SOME EXPECTATIONS FAILED'} in {time.monotonic() - started:.0f} s")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: every child and the directory are gone by now (main's finally)
        sys.exit(130)
