"""Reading the segment directory, the readers' half of the protocol: consistent reads, skip accounting,
reclaiming dead writers.

Segments are read with pread, never mmap: a file truncated under a mapping would
kill the exporter with SIGBUS, while pread just returns short.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import struct
import time
from collections import Counter
from dataclasses import dataclass
from typing import Generic, TypeVar

from . import layout, naming
from .arrivals import ArrivalWatcher
from .records import MAX_RECORD_SIZE, PARSERS, RECORD_SIZES, MalformedRecord, text

log = logging.getLogger(__name__)

SKIP_REASONS = ("truncated", "bad_magic", "abi_version", "malformed", "oversized", "torn", "unreadable", "over_limit",
                "duplicate")
DEFAULT_MAX_SEGMENTS = 4096  # per kind and sample: a node's GPU processes, many times over
FILES_PER_SEGMENT = 16  # files examined per sample at most, per record kept: planted junk bounds the work too
STATE_MAX_BYTES = 1 << 20  # a reader's list of writers seen alive: names of ~100 bytes, thousands of them
TORN_RETRIES_PER_PASS = 16  # segments retried (with sleeps) per pass when torn; more get one try
TEMP_FILE_GRACE_SECONDS = 60.0  # a writer renames its temp file within microseconds

_FLOCK = struct.Struct("hh4xqqi4x")  # struct flock on Linux (x86-64 and arm64)
_SEQ = struct.Struct("<Q")
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

T = TypeVar("T")


@dataclass(frozen=True)
class Segment:
    """One consistent copy of a live writer's segment."""

    name: str
    header: layout.ShmHeader
    record: bytes
    holder_pid: int  # the writer's pid as this process sees it (as last seen alive, once it exited); 0 if not visible
    exited: bool = False  # the writer is gone: this is its last record, served while it lingers

    @property
    def ended_unix(self) -> float:
        """When an exited writer published last (its final counters, after a clean exit)."""
        return self.header.update_time_ns / 1e9

    @property
    def pod_uid(self) -> str:
        return text(self.header.pod_uid)

    @property
    def container_id(self) -> str:
        return text(self.header.container_id)

    @property
    def comm(self) -> str:
        return text(self.header.comm)

    @property
    def pid_label(self) -> str:
        """The pid as this reader (hostPID in Kubernetes) sees it; a writer in a pid
        namespace we cannot see keeps its own pid, qualified so it cannot collide."""
        if self.holder_pid > 0:
            return str(self.holder_pid)
        return f"{self.header.writer_pid}@{self.header.pid_namespace_inode}"


@dataclass(frozen=True)
class ParsedSegment(Generic[T]):
    segment: Segment
    record: T


class _Skip(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def load_holders(path: str | None) -> dict[str, int]:
    """The writers a reader saw alive, as it saved them: only from a regular file of this user's, bounded."""
    if not path:
        return {}
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > STATE_MAX_BYTES:
            log.warning("ignoring %r: not a file this reader wrote", path)
            return {}
        holders = {}
        for line in os.pread(fd, STATE_MAX_BYTES, 0).decode(errors="replace").splitlines():
            name, _, pid = line.rpartition(" ")
            if name and pid.isdigit():
                holders[name] = int(pid)
        return holders
    finally:
        os.close(fd)


def save_holders(path: str, holders: dict[str, int]) -> str:
    """Returns "" or why it could not."""
    # Written whole under a temporary name, then renamed: a reader restarting never finds half of it.
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, "".join(f"{name} {pid}\n" for name, pid in holders.items()).encode())
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return e.strerror or str(e)
    return ""


def _one_per_pid(parsed: list[ParsedSegment]) -> list[ParsedSegment]:
    """One record per pid label, as each series may appear once in a scrape: a live writer's before a
    lingering one's (its pid was reused), the first found otherwise (a process holding several segments of a
    kind is not an Alnair writer)."""
    kept: dict[str, ParsedSegment] = {}
    for p in sorted(parsed, key=lambda p: p.segment.exited):
        kept.setdefault(p.segment.pid_label, p)
    return list(kept.values())


def lock_holder(fd: int) -> int | None:
    """The pid holding the writer's lock (0 if in an invisible pid namespace), or None if no one holds it."""
    request = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    l_type, _, _, _, l_pid = _FLOCK.unpack(fcntl.fcntl(fd, fcntl.F_GETLK, request))
    return None if l_type == fcntl.F_UNLCK else l_pid


class SegmentDirectory:
    """Reads every segment of one record kind in a directory.

    `read()` returns the parsed records of live writers; the segments it had
    to skip in that pass are in `skipped` (reason -> count), and `reclaimed`
    counts dead writers' segments it removed since start.

    Whatever the directory holds, a pass keeps at most `max_segments` records, each copied only as far
    as this reader's layout of the kind goes: memory is bounded by live writers x the largest record.

    A dead writer's last record is served (`exited`) for `linger_seconds` from when this reader first
    found it unlocked, so a Prometheus scraping every 15-60 s still gets a short job's final counters;
    then it is reclaimed. Only a writer this reader saw alive lingers (a file planted unlocked is anyone's
    invention); `state_path` keeps that list, and each one's pid, across a restart of the reader, which
    then serves the lingering records for another linger.
    """

    def __init__(self, path: str, kind: int, *, retries: int = 4, reclaim: bool = True,
                 max_segments: int = DEFAULT_MAX_SEGMENTS, linger_seconds: float = 0.0,
                 clock=time.monotonic, state_path: str | None = None, watch_arrivals: bool = False):
        self.path = path
        self.kind = kind
        self.retries = retries
        self.reclaim = reclaim
        self.max_segments = max_segments
        self.linger_seconds = linger_seconds
        self.clock = clock
        self._dead_since: dict[str, float] = {}  # name -> when first found unlocked
        self.state_path = state_path
        self._holders: dict[str, int] = load_holders(state_path)  # name -> its writer's pid as last seen alive
        self._saved_holders = dict(self._holders)
        self._state_failed = False
        self._unremovable: set[str] = set()  # reclaims that failed, each logged once
        self._seen: set[str] = set()  # names met in the pass under way: what the pass after may remember
        self._torn_retries = TORN_RETRIES_PER_PASS
        self.prefix = naming.kind_prefix(kind)
        # A writer that starts and exits between two passes is still seen alive (abi/arrivals.py).
        self._arrivals = ArrivalWatcher(path, self.prefix, lock_holder) if watch_arrivals else None
        self.skipped: Counter[str] = Counter()
        self.reclaimed = 0

    def close(self) -> None:
        if self._arrivals is not None:
            self._arrivals.stop()

    def read(self) -> list[ParsedSegment]:
        parse = PARSERS[self.kind]
        for name, holder in self._arrivals.drain() if self._arrivals is not None else ():
            self._holders.setdefault(name, holder)
        skipped: Counter[str] = Counter()
        out: list[ParsedSegment] = []
        self._seen = set()
        self._torn_retries, examined = TORN_RETRIES_PER_PASS, 0
        newcomers: list[str] = []  # at most the examined budget, however many names the directory holds
        with os.scandir(self.path) as entries:  # streamed: a million planted names are never held at once
            for entry in entries:
                name = entry.name
                if name.startswith(self.prefix):
                    examined += 1
                if name.startswith(self.prefix) and examined > FILES_PER_SEGMENT * self.max_segments:
                    skipped["over_limit"] += 1
                elif name.startswith(self.prefix) and name not in self._holders:
                    newcomers.append(name)
                elif name.startswith(self.prefix):
                    self._read_within_cap(name, parse, out, skipped)
                elif naming.is_temp_of_kind(name, self.kind):
                    self._reclaim_abandoned_temp(name)
        # Writers seen alive before are read first, so files planted since can take only the slots left.
        for name in newcomers:
            self._read_within_cap(name, parse, out, skipped)
        self._say_if_capped(skipped["over_limit"])
        kept = _one_per_pid(out)
        if len(kept) < len(out):
            skipped["duplicate"] += len(out) - len(kept)
        self.skipped = skipped
        self._forget_unseen()
        return kept

    def _forget_unseen(self) -> None:
        """Segments removed by someone else: nothing more to remember of them."""
        self._dead_since = {n: t for n, t in self._dead_since.items() if n in self._seen}
        self._holders = {n: pid for n, pid in self._holders.items() if n in self._seen}
        self._unremovable = {f for f in self._unremovable if os.path.basename(f) in self._seen}
        if self.state_path and self._holders != self._saved_holders:
            self._saved_holders = dict(self._holders)
            failure = save_holders(self.state_path, self._holders)
            if failure and not self._state_failed:  # said once: exited writers then linger only until a restart
                log.warning("cannot save the writers seen alive to %r: %s", self.state_path, failure)
            self._state_failed = bool(failure)

    def _read_within_cap(self, name: str, parse, out: list[ParsedSegment], skipped: Counter[str]) -> None:
        if len(out) >= self.max_segments:
            skipped["over_limit"] += 1
        else:
            self._read_into(name, parse, out, skipped)

    def _say_if_capped(self, over_limit: int) -> None:
        """One warning when the cap starts hiding segments, one line when it no longer does."""
        if over_limit and not self.skipped["over_limit"]:
            log.warning("%s: %d segments not read this pass, past --shm.max-segments %d (writers seen alive are "
                        "read first; see alnair_*_segments_skipped{reason=\"over_limit\"})", self.path, over_limit, self.max_segments)
        elif self.skipped["over_limit"] and not over_limit:
            log.info("%s: every segment read again, within --shm.max-segments", self.path)

    def _read_into(self, name: str, parse, out: list[ParsedSegment], skipped: Counter[str]) -> None:
        try:
            segment = self._read_one(name)
            if segment is not None:
                out.append(ParsedSegment(segment, parse(segment.record)))
        except _Skip as skip:
            skipped[skip.reason] += 1
        except MalformedRecord:
            skipped["malformed"] += 1

    def _read_one(self, name: str) -> Segment | None:
        self._seen.add(name)
        full = os.path.join(self.path, name)
        try:
            fd = os.open(full, _OPEN_FLAGS)
        except FileNotFoundError:
            return None  # reclaimed or removed since the scan
        except OSError as e:
            raise _Skip("unreadable") from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise _Skip("malformed")
            header = self._validated_header(fd, st.st_size)
            holder = lock_holder(fd)
            if holder is None:
                return self._lingering(name, fd, header)
            self._holders[name] = holder
            return self._copy(name, fd, header, holder, self.retries if self._torn_retries > 0 else 1)
        finally:
            os.close(fd)

    def _copy(self, name: str, fd: int, header: layout.ShmHeader, holder: int, retries: int, exited: bool = False) -> Segment:
        # A newer writer may append fields this reader does not know: they are not copied.
        raw = self._consistent_copy(fd, header.header_size + min(header.record_size, RECORD_SIZES[self.kind]), retries)
        copy = layout.ShmHeader.from_buffer_copy(raw)
        return Segment(name, copy, raw[copy.header_size :], holder, exited)

    def _lingering(self, name: str, fd: int, header: layout.ShmHeader) -> Segment | None:
        """A dead writer's segment: its last record while it lingers, else reclaimed. One that died
        mid-publish (seq odd) can never be read whole and is reclaimed at once."""
        full = os.path.join(self.path, name)
        if not self.reclaim:
            return None  # a bystander (alnair top) shows the living only
        dead_since = self._dead_since.setdefault(name, self.clock())
        if name in self._holders and self.clock() - dead_since < self.linger_seconds:
            try:
                return self._copy(name, fd, header, self._holders[name], 1, exited=True)
            except _Skip:
                pass
        self._reclaim(full)
        return None

    def _validated_header(self, fd: int, size: int) -> layout.ShmHeader:
        raw = os.pread(fd, layout.HEADER_SIZE, 0)
        if len(raw) < layout.HEADER_SIZE:
            raise _Skip("truncated")
        header = layout.ShmHeader.from_buffer_copy(raw)
        if header.magic != layout.SHM_MAGIC:
            raise _Skip("bad_magic")
        if header.abi_version != layout.ABI_VERSION:
            raise _Skip("abi_version")
        if header.header_size != layout.HEADER_SIZE or header.record_kind != self.kind:
            raise _Skip("malformed")
        if header.record_size > MAX_RECORD_SIZE:
            raise _Skip("oversized")
        if size < header.header_size + header.record_size:
            raise _Skip("truncated")
        return header

    def _consistent_copy(self, fd: int, size: int, retries: int) -> bytes:
        """The seqlock read: a copy taken while seq stayed even and unchanged. Retries sleep, so they are
        rationed per pass: a writer holding its seq odd for good costs the others one try, not four."""
        for attempt in range(retries):
            if attempt == 1:
                self._torn_retries -= 1
            before = _SEQ.unpack(os.pread(fd, 8, layout.SEQ_OFFSET))[0]
            if not before & 1:
                raw = os.pread(fd, size, 0)
                after = _SEQ.unpack(os.pread(fd, 8, layout.SEQ_OFFSET))[0]
                if before == after and len(raw) == size:
                    return raw
            time.sleep(0.0001 * attempt)  # a publish takes microseconds
        raise _Skip("torn")

    def _reclaim(self, full: str) -> None:
        """Removes a segment whose writer is gone: nobody holds its lock any more.

        Names carry pid, pid namespace and start time, so a live writer never
        reuses a dead one's name and the unlink cannot hit a live segment."""
        if not self.reclaim:
            return
        try:
            os.unlink(full)
        except OSError as e:
            if e.errno != errno.ENOENT and full not in self._unremovable:
                self._unremovable.add(full)  # said once: a name is a writer's, logged as repr, never raw
                log.warning("cannot reclaim dead writer's segment %r: %s", full, e.strerror)
            return
        self.reclaimed += 1

    def _reclaim_abandoned_temp(self, name: str) -> None:
        self._seen.add(name)
        full = os.path.join(self.path, name)
        try:
            fd = os.open(full, _OPEN_FLAGS)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            old = time.time() - st.st_mtime > TEMP_FILE_GRACE_SECONDS
            if stat.S_ISREG(st.st_mode) and old and lock_holder(fd) is None:  # a directory is not a writer's
                self._reclaim(full)
        finally:
            os.close(fd)
