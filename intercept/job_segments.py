"""The segments of one job's processes, held open from when they appear so that their final records outlive them.

A writer that exits cleanly publishes its final counters, then removes its segment unless a lingering reader
announced itself (abi.naming.READER_MARKER). Removing takes the name, not the file: a descriptor opened while the
writer lived still reads the final record. So the profile holds one descriptor per segment of the job, found as it
is renamed into the directory (inotify, abi.arrivals: a process living a few ms is caught) and by a scan at every
poll, and reads them once the job has ended. Announcing a reader instead would make every writer on the machine
leave its segment behind, with no exporter to reclaim it.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from alnair.abi import layout, naming
from alnair.abi.arrivals import ArrivalWatcher
from alnair.abi.records import PARSERS, RECORD_SIZES, MalformedRecord
from alnair.abi.segments import Unreadable, consistent_copy, lock_holder, validated_header

KINDS = (layout.KIND_CUDA, layout.KIND_PYTHON)
ANCESTRY_DEPTH = 64  # process tree levels walked up from a writer looking for the job's root
READ_ATTEMPTS = 4  # a final record torn by a publish in flight is read again
JUDGED_AT_MOST = 65536  # names judged and remembered (a busy node's other writers), then forgotten and judged again


@dataclass(frozen=True)
class FinalRecord:
    """The last record one of the job's processes published of one kind."""

    kind: int
    header: layout.ShmHeader
    record: object  # records.CudaProcess for the cuda kind, layout.PythonRecord for the python kind
    running: bool  # its writer still held the segment when read: it outlived the job's command and the grace


class JobSegments:
    """Holds the segments of `root_pid` and its descendants in `directory` (writers in this pid namespace)."""

    def __init__(self, directory: str, root_pid: int):
        self.directory, self.root_pid = directory, root_pid
        self._namespace = _pid_namespace()
        self._judged: dict[str, bool] = {}  # segment name -> its writer is one of the job's processes
        self._scanned: set[str] = set()  # the job's names the scan has opened
        self._held: dict[tuple[int, int], int] = {}  # (device, inode) -> a descriptor of it
        self._lock = threading.Lock()  # the arrivals thread holds segments too
        # Its probe opens each new name this filter wants and asks who holds the lock: we keep a duplicate then.
        # Its thread ends with this process (the watcher's), which holds the descriptors to the end too: stopping it
        # would wait out its select, up to half a second, at the end of every job.
        self._arrivals = ArrivalWatcher(directory, self._wanted, self._hold)

    def poll(self) -> None:
        """Holds the job's segments that appeared since the last poll."""
        self._arrivals.drain()  # what it found is held already
        try:
            with os.scandir(self.directory) as entries:
                names = [entry.name for entry in entries]
        except OSError:
            return  # no directory (yet): nothing published
        for name in names:
            if name not in self._scanned and self._wanted(name):
                self._scanned.add(name)
                self._open_and_hold(name)

    def final_records(self, grace_seconds: float) -> list[FinalRecord]:
        """Every held segment's last record, once its writer is gone or after grace_seconds (the job's
        command has ended; DataLoader workers and ranks may take a moment more)."""
        deadline = time.monotonic() + grace_seconds
        while True:
            self.poll()
            held = self._descriptors()
            if time.monotonic() >= deadline or all(lock_holder(fd) is None for fd in held):
                break
            time.sleep(0.02)
        return [final for fd in self._descriptors() if (final := _final_record(fd)) is not None]

    def _descriptors(self) -> list[int]:
        with self._lock:
            return list(self._held.values())

    def _wanted(self, name: str) -> bool:
        """Whether `name` is a segment of one of the job's processes: named in this pid namespace by a process that
        still runs (same pid, same start time) below the job's root."""
        judged = self._judged.get(name)
        if judged is None:
            if len(self._judged) >= JUDGED_AT_MOST:
                self._judged.clear()
            judged = self._judged[name] = self._judge(name)
        return judged

    def _judge(self, name: str) -> bool:
        if not any(naming.is_segment_name(name, kind) for kind in KINDS):
            return False
        namespace, pid, ticks = (int(part) for part in name.split(".")[2:])
        return namespace == self._namespace and start_ticks(pid) == ticks and self._below_root(pid)

    def _below_root(self, pid: int) -> bool:
        for _ in range(ANCESTRY_DEPTH):
            if pid == self.root_pid:
                return True
            if pid <= 1:
                return False
            pid = _parent(pid)
        return False

    def _open_and_hold(self, name: str) -> None:
        try:
            fd = os.open(os.path.join(self.directory, name), naming.READ_FLAGS)
        except OSError:
            return  # gone already (its arrival was held, or it lived less than a poll without inotify)
        try:
            self._hold(fd)
        except OSError:
            pass  # out of descriptors: the profile goes without this process
        finally:
            os.close(fd)

    def _hold(self, fd: int) -> int | None:
        """Keeps a duplicate of a job's segment; answers who holds its lock, as the arrival watcher asks."""
        st = os.fstat(fd)
        with self._lock:
            if (st.st_dev, st.st_ino) not in self._held:
                self._held[(st.st_dev, st.st_ino)] = os.dup(fd)
        return lock_holder(fd)


def _pid_namespace() -> int:
    """This process's pid namespace, as segment names carry it; -1 (no segment's) where /proc cannot tell."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return -1


def _proc_stat(pid: int) -> list[str]:
    """/proc/PID/stat's fields from the third (state) on; [] for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].decode().split()
    except OSError:
        return []


def _parent(pid: int) -> int:
    fields = _proc_stat(pid)
    return int(fields[1]) if fields else 0


def start_ticks(pid: int) -> int:
    """The process's start, in clock ticks after boot (field 22, as segment names and headers carry it); -1 if gone."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else -1


def _final_record(fd: int) -> FinalRecord | None:
    """The segment's record, read and checked as the exporter reads one (abi/segments.py), parsed by its kind's
    checks; None for a writer that died mid-publish or a segment no writer of ours made."""
    try:
        header = validated_header(fd, os.fstat(fd).st_size, KINDS)
        size = layout.HEADER_SIZE + min(header.record_size, RECORD_SIZES[header.record_kind])
        raw = consistent_copy(fd, size, READ_ATTEMPTS)
        return FinalRecord(
            header.record_kind,
            layout.ShmHeader.from_buffer_copy(raw),
            PARSERS[header.record_kind](raw[layout.HEADER_SIZE :]),
            lock_holder(fd) is not None,
        )
    except (Unreadable, MalformedRecord):
        return None
