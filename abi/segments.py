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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from . import layout, naming
from .arrivals import ArrivalWatcher
from .records import MAX_RECORD_SIZE, PARSERS, RECORD_SIZES, MalformedRecord, text

log = logging.getLogger(__name__)

SKIP_REASONS = (
    "truncated",
    "bad_magic",
    "abi_version",
    "malformed",
    "oversized",
    "torn",
    "unreadable",
    "over_limit",
    "duplicate",
    "bad_name",
    "unreclaimable",
)
# What a file stays until it is replaced (a new inode): remembered, so junk is opened once, not every pass.
_LASTING_REASONS = frozenset(
    ("truncated", "bad_magic", "abi_version", "malformed", "oversized", "unreclaimable", "bad_name")
)
_LASTING_ERRNOS = frozenset((errno.ELOOP, errno.ENXIO, errno.EACCES, errno.EPERM))  # symlinks, sockets, modes
SCAN_BOUNDS = ("names", "opens", "remembered", "temps")
DEFAULT_MAX_SEGMENTS = 4096  # per kind and sample: a node's GPU processes, many times over
NAMES_PER_SEGMENT = 8  # directory entries listed per pass, per record kept: any name counts, temp or foreign
REMEMBERED_PER_SEGMENT = 32  # junk verdicts kept at most, per record kept (~75 bytes each: ~10 MB at the default)
TEMP_CHECKS_PER_SWEEP = 1024  # temp files opened per sweep to find abandoned ones; more are checked in turn
TEMP_CHECKS_PER_OPEN = 8  # and per pass one per 8 opens allowed: temp names never take the opens new writers need
STATE_MAX_BYTES = 1 << 20  # a reader's list of writers seen alive: names of ~50 bytes, thousands of them
TORN_RETRIES_PER_PASS = 16  # segments retried (with sleeps) per pass when torn; more get one try
TEMP_FILE_GRACE_SECONDS = 60.0  # a writer renames its temp file within microseconds

_FLOCK = struct.Struct("hh4xqqi4x")  # struct flock on Linux (x86-64 and arm64)
_SEQ = struct.Struct("<Q")

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


class Unreadable(Exception):
    """A segment not read, and why (its reason is a skip counter's label)."""

    def __init__(self, reason: str, lasting: bool | None = None):
        self.reason = reason
        self.lasting = reason in _LASTING_REASONS if lasting is None else lasting


def load_holders(path: str | None, kind: int) -> dict[str, int]:
    """The writers a reader saw alive, as it saved them: only from a regular file of this user's, bounded, and only
    names a writer could have (a planted line names nothing the reader would open)."""
    if not path:
        return {}
    try:
        fd = os.open(path, naming.READ_FLAGS)
    except OSError:
        return {}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > STATE_MAX_BYTES:
            log.warning("ignoring %r: not a file this reader wrote", path)
            return {}
        holders = {}
        for line in os.pread(fd, STATE_MAX_BYTES, 0).decode("ascii", errors="replace").splitlines():
            name, _, pid = line.rpartition(" ")
            if naming.is_segment_name(name, kind) and pid.isdigit() and pid.isascii():
                holders[name] = int(pid)
        return holders
    finally:
        os.close(fd)


def save_holders(path: str, holders: dict[str, int]) -> str:
    """Returns "" or why it could not. Every name is a writer's (naming.is_segment_name): ASCII, no spaces or
    newlines."""
    # Written whole under a temporary name, then renamed: a reader restarting never finds half of it.
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, "".join(f"{name} {pid}\n" for name, pid in holders.items()).encode("ascii"))
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


class _Verdicts(dict):
    """Why each junk file was skipped, keyed by hash of (name, inode): a file the reader refused stays refused until
    it is replaced, so it is opened once, not every pass. At most `limit` (`full` says when more were met); once
    a sweep met (`found`) fewer than half of them, the rest being gone, they are forgotten and learnt again."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.full, self.found = limit, False, 0

    def keep(self, key: int, reason: str) -> None:
        if len(self) < self.limit:
            self[key] = reason
            self.found += 1
        else:
            self.full = True

    def next_sweep(self) -> None:
        if self.found < len(self) // 2:
            self.clear()
        self.full, self.found = False, 0


@dataclass
class _Sweep:
    """One walk through the directory, which may take several passes when it holds more than a pass may list."""

    index: int
    entries: Iterator[os.DirEntry]
    temp_period: int  # each temp name is opened once every temp_period sweeps (a flood of them costs in turn)
    skipped: Counter[str] = field(default_factory=Counter)
    temps: int = 0
    passes: int = 0


class SegmentDirectory:
    """Reads every segment of one record kind in a directory.

    `read()` returns the parsed records of live writers; `skipped` counts, by reason, what this pass skipped
    among writers it knows and what the last whole sweep of the directory skipped (see below); `reclaimed`
    counts dead writers' segments it removed since start.

    Whatever the directory holds, a pass does bounded work and keeps at most `max_segments` records, each
    copied only as far as this reader's layout of the kind goes: memory is bounded by live writers x the
    largest record. Writers this reader saw alive (in a pass, through the arrival watcher, or in its saved
    state) are read first, by name, without listing the directory: junk of any count cannot push them out.
    New writers are found by a sweep of the directory that lists at most NAMES_PER_SEGMENT x max_segments names
    a pass and opens at most max_segments / 2 files of names not known yet, going on where it stopped at the
    next pass; a file refused for a lasting reason is remembered by name and inode and not opened again.
    Names no writer makes (naming.is_segment_name) are refused unopened. A bound being hit is one warning and
    `scan_bounded[bound]`.

    A dead writer's last record is served (`exited`) for `linger_seconds` from when this reader first
    found it unlocked, so a Prometheus scraping every 15-60 s still gets a short job's final counters;
    then it is reclaimed. Only a writer this reader saw alive lingers (a file planted unlocked is anyone's
    invention); `state_path` keeps that list, and each one's pid, across a restart of the reader, which
    then serves the lingering records for another linger.
    """

    def __init__(
        self,
        path: str,
        kind: int,
        *,
        retries: int = 4,
        reclaim: bool = True,
        max_segments: int = DEFAULT_MAX_SEGMENTS,
        linger_seconds: float = 0.0,
        clock=time.monotonic,
        state_path: str | None = None,
        watch_arrivals: bool = False,
    ):
        self.path = path
        self.kind = kind
        self.retries = retries
        self.reclaim = reclaim
        self.max_segments = max_segments
        self.linger_seconds = linger_seconds
        self.clock = clock
        self._dead_since: dict[str, float] = {}  # holder name -> when first found unlocked
        self.state_path = state_path
        self._holders: dict[str, int] = load_holders(state_path, kind)  # name -> its writer's pid as last seen alive
        self._saved_holders = dict(self._holders)
        self._state_failed = False
        self._said_unremovable = False
        self._torn_retries = TORN_RETRIES_PER_PASS
        self._temp_checks_left = 0  # temp files this pass may still open
        self.prefix = naming.kind_prefix(kind)
        self._verdicts = _Verdicts(REMEMBERED_PER_SEGMENT * max_segments)
        self._sweep: _Sweep | None = None
        self._last_sweep = _Sweep(0, iter(()), 1)
        self._read_by_name: set[str] = set()  # the holders this pass read first
        self._pass_bounds: set[str] = set()  # the bounds this pass stopped at
        self._sweep_bounds: set[str] = set()  # those the sweep under way met
        self._active_bounds: set[str] = set()  # warned of, and met again since a sweep ended clear of them
        # A writer that starts and exits between two passes is still seen alive (abi/arrivals.py).
        self._arrivals = (
            ArrivalWatcher(path, lambda name: naming.is_segment_name(name, kind), lock_holder)
            if watch_arrivals
            else None
        )
        self.skipped: Counter[str] = Counter()
        self.scan_bounded: Counter[str] = Counter()  # passes that stopped at each bound, since start
        self.reclaimed = 0

    @property
    def sweep_passes(self) -> int:
        """How many passes the last whole sweep of the directory took: 1 unless it holds more than a pass lists."""
        return self._last_sweep.passes

    def close(self) -> None:
        if self._arrivals is not None:
            self._arrivals.stop()
        if self._sweep is not None:
            self._close_entries(self._sweep)
            self._sweep = None

    def read(self) -> list[ParsedSegment]:
        parse = PARSERS[self.kind]
        self._take_arrivals()
        skipped: Counter[str] = Counter()
        out: list[ParsedSegment] = []
        self._torn_retries, self._pass_bounds = TORN_RETRIES_PER_PASS, set()
        self._temp_checks_left = max(1, self._opens_per_pass() // TEMP_CHECKS_PER_OPEN)
        self._read_by_name = set(self._holders)  # the sweep passes these by, whatever this pass makes of them
        for name in list(self._holders):  # seen alive, longest known first: files planted since get the slots left
            self._read_within_cap(name, parse, out, skipped)
        sweep = self._sweep_on(parse, out)
        self._say_if_capped(skipped["over_limit"] + sweep.skipped["over_limit"])
        kept = _one_per_pid(out)
        skipped["duplicate"] += len(out) - len(kept)
        self.skipped = +(skipped + sweep.skipped)
        self._say_bounds(ended=self._sweep is None)
        self._save_state()
        return kept

    def _take_arrivals(self) -> None:
        """Writers the watcher saw alive, as far as the holders' bound goes (a flood of locked files stops there)."""
        for name, holder in self._arrivals.drain() if self._arrivals is not None else ():
            if len(self._holders) < 2 * self.max_segments:
                self._holders.setdefault(name, holder)
            else:
                self._pass_bounds.add("remembered")

    def _sweep_on(self, parse, out: list[ParsedSegment]) -> _Sweep:
        """Lists the directory on from where the last pass stopped, within this pass's budgets; returns the last
        whole sweep (this one, if it ended now), whose skip counts stand until the next one ends."""
        sweep = self._sweep or self._start_sweep()
        sweep.passes += 1
        names_left, opens_left = NAMES_PER_SEGMENT * self.max_segments, self._opens_per_pass()
        prefix, temp_prefix = self.prefix, "." + self.prefix
        period, phase = sweep.temp_period, sweep.index % sweep.temp_period
        for entry in sweep.entries:  # the hot loop: a flood of names costs a few hundred ns each
            names_left -= 1
            name = entry.name
            if name.startswith(prefix):
                opens_left -= self._examine_segment(entry, sweep, parse, out)
            elif name.startswith(temp_prefix):
                sweep.temps += 1
                if hash(name) % period == phase:  # each temp name in turn, one sweep in `period`
                    opens_left -= self._examine_temp(name)
            if names_left <= 0 or opens_left <= 0:
                self._pass_bounds.add("names" if names_left <= 0 else "opens")
                return self._last_sweep
        self._end_sweep(sweep)
        return sweep

    def _opens_per_pass(self) -> int:
        return max(16, self.max_segments // 2)

    def _start_sweep(self) -> _Sweep:
        last = self._last_sweep
        period = max(1, -(-last.temps // TEMP_CHECKS_PER_SWEEP))
        self._sweep = _Sweep(last.index + 1, os.scandir(self.path), period)
        return self._sweep

    def _end_sweep(self, sweep: _Sweep) -> None:
        self._close_entries(sweep)
        self._sweep, self._last_sweep = None, sweep
        if self._verdicts.full:
            self._pass_bounds.add("remembered")
        if sweep.temp_period > 1:
            self._pass_bounds.add("temps")
        self._verdicts.next_sweep()

    @staticmethod
    def _close_entries(sweep: _Sweep) -> None:
        close = getattr(sweep.entries, "close", None)
        if close is not None:
            close()

    def _examine_segment(self, entry: os.DirEntry, sweep: _Sweep, parse, out: list[ParsedSegment]) -> int:
        """A name with the kind's prefix; returns the files opened for it (0 or 1)."""
        name = entry.name
        if name in self._read_by_name or name in self._holders:
            return 0  # read already this pass
        key = hash((name, entry.inode()))
        reason = self._verdicts.get(key)
        if reason is not None:
            self._verdicts.found += 1
        elif not naming.is_segment_name(name, self.kind):
            reason = "bad_name"
            self._verdicts.keep(key, reason)
        if reason is not None:
            sweep.skipped[reason] += 1
            return 0
        return self._read_newcomer(name, key, parse, out, sweep.skipped)

    def _examine_temp(self, name: str) -> int:
        """A temp name whose turn it is; returns the files opened for it (0 or 1)."""
        if self._temp_checks_left <= 0:  # before the name's check: a flood of temp names past the budget costs little
            self._pass_bounds.add("temps")
            return 0
        if not naming.is_temp_name(name, self.kind):
            return 0  # not a writer's: never touched
        self._temp_checks_left -= 1
        self._reclaim_abandoned_temp(name)
        return 1

    def _read_newcomer(self, name: str, key: int, parse, out: list[ParsedSegment], skipped: Counter[str]) -> int:
        if len(out) >= self.max_segments:
            skipped["over_limit"] += 1
            return 0
        try:
            self._read_into(name, parse, out)
        except Unreadable as skip:
            skipped[skip.reason] += 1
            if skip.lasting:
                self._verdicts.keep(key, skip.reason)
                self._forget(name)  # locked but not a writer's record: judged by its verdict from now on
        return 1

    def _read_within_cap(self, name: str, parse, out: list[ParsedSegment], skipped: Counter[str]) -> None:
        if len(out) >= self.max_segments:
            skipped["over_limit"] += 1
            return
        try:
            self._read_into(name, parse, out)
        except Unreadable as skip:
            skipped[skip.reason] += 1
            if skip.lasting:  # no longer a writer's segment: the sweep judges it from now on
                self._forget(name)

    def _read_into(self, name: str, parse, out: list[ParsedSegment]) -> None:
        segment = self._read_one(name)
        if segment is not None:
            try:
                out.append(ParsedSegment(segment, parse(segment.record)))
            except MalformedRecord:
                raise Unreadable("malformed") from None

    def _forget(self, name: str) -> None:
        self._holders.pop(name, None)
        self._dead_since.pop(name, None)

    def _save_state(self) -> None:
        if self.state_path and self._holders != self._saved_holders:
            self._saved_holders = dict(self._holders)
            failure = save_holders(self.state_path, self._holders)
            if failure and not self._state_failed:  # said once: exited writers then linger only until a restart
                log.warning("cannot save the writers seen alive to %r: %s", self.state_path, failure)
            self._state_failed = bool(failure)

    def _say_if_capped(self, over_limit: int) -> None:
        """One warning when the cap starts hiding segments, one line when it no longer does."""
        if over_limit and not self.skipped["over_limit"]:
            log.warning(
                "%s: %d segments not read this pass, past --shm.max-segments %d (writers seen alive are "
                'read first; see alnair_*_segments_skipped{reason="over_limit"})',
                self.path,
                over_limit,
                self.max_segments,
            )
        elif self.skipped["over_limit"] and not over_limit:
            log.info("%s: every segment read again, within --shm.max-segments", self.path)

    def _say_bounds(self, ended: bool) -> None:
        """One warning when a bound starts being met (counted every pass it is), one line once a whole sweep
        met none."""
        newly = [b for b in SCAN_BOUNDS if b in self._pass_bounds and b not in self._active_bounds]
        if newly:
            log.warning(
                "%s: the scan met its bound on %s; writers seen alive are still read every pass, new ones "
                "within alnair_*_segments_sweep_passes passes (docs/security.md)",
                self.path,
                "; ".join(f"{b} ({_BOUND_MEANINGS[b]})" for b in newly),
            )
        self._active_bounds |= self._pass_bounds
        self._sweep_bounds |= self._pass_bounds
        self.scan_bounded.update(self._pass_bounds)
        if ended:
            if self._active_bounds and not self._sweep_bounds:
                log.info("%s: the directory is swept within every bound again", self.path)
            self._active_bounds, self._sweep_bounds = self._sweep_bounds, set()

    def _read_one(self, name: str) -> Segment | None:
        full = os.path.join(self.path, name)
        try:
            fd = os.open(full, naming.READ_FLAGS)
        except FileNotFoundError:
            self._forget(name)
            return None  # reclaimed or removed since the scan
        except OSError as e:
            raise Unreadable("unreadable", lasting=e.errno in _LASTING_ERRNOS) from e
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Unreadable("malformed")
            header = validated_header(fd, st.st_size, (self.kind,))
            holder = lock_holder(fd)
            if holder is None:
                return self._lingering(name, fd, header)
            self._holders[name] = holder
            self._dead_since.pop(name, None)
            return self._copy(name, fd, header, holder, self.retries if self._torn_retries > 0 else 1)
        finally:
            os.close(fd)

    def _copy(
        self, name: str, fd: int, header: layout.ShmHeader, holder: int, retries: int, exited: bool = False
    ) -> Segment:
        # A newer writer may append fields this reader does not know: they are not copied.
        size = header.header_size + min(header.record_size, RECORD_SIZES[self.kind])
        raw = consistent_copy(fd, size, retries, on_retry=self._count_torn_retry)
        copy = layout.ShmHeader.from_buffer_copy(raw)
        return Segment(name, copy, raw[copy.header_size :], holder, exited)

    def _count_torn_retry(self) -> None:
        """Retries sleep, so they are rationed per pass: a writer holding its seq odd for good costs the others one
        try, not four."""
        self._torn_retries -= 1

    def _lingering(self, name: str, fd: int, header: layout.ShmHeader) -> Segment | None:
        """A dead writer's segment: its last record while it lingers, else reclaimed. One that died
        mid-publish (seq odd) can never be read whole and is reclaimed at once."""
        if not self.reclaim:
            return None  # a bystander (alnair top) shows the living only
        if name in self._holders:
            dead_since = self._dead_since.setdefault(name, self.clock())
            if self.clock() - dead_since < self.linger_seconds:
                try:
                    return self._copy(name, fd, header, self._holders[name], 1, exited=True)
                except Unreadable:
                    pass
        self._forget(name)
        if not self._reclaim(os.path.join(self.path, name)):
            raise Unreadable("unreclaimable")
        return None

    def _reclaim(self, full: str) -> bool:
        """Removes a segment whose writer is gone: nobody holds its lock any more. False if it could not.

        Names carry pid, pid namespace and start time, so a live writer never
        reuses a dead one's name and the unlink cannot hit a live segment."""
        try:
            os.unlink(full)
        except FileNotFoundError:
            return True
        except OSError as e:
            if not self._said_unremovable:  # said once; each is counted (skipped unreclaimable) every sweep
                self._said_unremovable = True
                log.warning(
                    "cannot reclaim dead writer's segment %r: %s (such segments are counted in "
                    'alnair_*_segments_skipped{reason="unreclaimable"})',
                    full,
                    e.strerror,
                )
            return False
        self.reclaimed += 1
        return True

    def _reclaim_abandoned_temp(self, name: str) -> None:
        """A writer's temp file left by a writer that died before publishing it: old, unlocked and begun with the
        ABI's header. Anything else under such a name is not a writer's and is left alone."""
        full = os.path.join(self.path, name)
        try:
            fd = os.open(full, naming.READ_FLAGS)
        except OSError:
            return
        try:
            st = os.fstat(fd)
            old = time.time() - st.st_mtime > TEMP_FILE_GRACE_SECONDS
            if stat.S_ISREG(st.st_mode) and old and _begins_with_header(fd, self.kind) and lock_holder(fd) is None:
                self._reclaim(full)
        finally:
            os.close(fd)


_BOUND_MEANINGS = {
    "names": "more entries than a pass lists: a sweep takes several passes",
    "opens": "more names not known yet than a pass opens: a sweep takes several passes",
    "remembered": "more junk than the reader remembers: the rest is opened again every sweep",
    "temps": "more temp names than a sweep checks: each is checked in turn",
}


def validated_header(fd: int, size: int, kinds: tuple[int, ...]) -> layout.ShmHeader:
    """The header of a segment `size` bytes long, checked before anything trusts it; Unreadable if it is not ours,
    of another kind or ABI, or shorter than it says."""
    raw = os.pread(fd, layout.HEADER_SIZE, 0)
    if len(raw) < layout.HEADER_SIZE:
        raise Unreadable("truncated")
    header = layout.ShmHeader.from_buffer_copy(raw)
    if header.magic != layout.SHM_MAGIC:
        raise Unreadable("bad_magic")
    if header.abi_version != layout.ABI_VERSION:
        raise Unreadable("abi_version")
    if header.header_size != layout.HEADER_SIZE or header.record_kind not in kinds:
        raise Unreadable("malformed")
    if header.record_size > MAX_RECORD_SIZE:
        raise Unreadable("oversized")
    if size < header.header_size + header.record_size:
        raise Unreadable("truncated")
    return header


def consistent_copy(fd: int, size: int, attempts: int, on_retry: Callable[[], None] | None = None) -> bytes:
    """The seqlock read: the segment's first `size` bytes, copied while seq stayed even and unchanged; Unreadable
    ("torn") after `attempts`. Each retry sleeps a little longer (a publish takes microseconds) and calls on_retry
    first, if given."""
    for attempt in range(attempts):
        if attempt == 1 and on_retry:
            on_retry()
        before = _SEQ.unpack(os.pread(fd, 8, layout.SEQ_OFFSET))[0]
        if not before & 1:
            raw = os.pread(fd, size, 0)
            after = _SEQ.unpack(os.pread(fd, 8, layout.SEQ_OFFSET))[0]
            if before == after and len(raw) == size:
                return raw
        time.sleep(0.0001 * attempt)
    raise Unreadable("torn")


def _begins_with_header(fd: int, kind: int) -> bool:
    raw = os.pread(fd, layout.HEADER_SIZE, 0)
    if len(raw) < layout.HEADER_SIZE:
        return False
    header = layout.ShmHeader.from_buffer_copy(raw)
    return header.magic == layout.SHM_MAGIC and header.record_kind == kind
