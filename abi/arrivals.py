"""Writers seen alive the moment their segment is published, between two passes of the reader.

A job that lives less than one sample interval would otherwise never be seen alive, and a file the reader
never saw locked is served by nobody (anyone could plant it unlocked). Linux's inotify says when a name is
renamed into the directory (how writers publish a segment: files merely created raise no event); the watcher
thread then asks the kernel who holds the file's lock, as the reader does, and hands (name, pid) to the next
pass. Bounded: only names a writer could have are probed, at most PROBES_PER_SECOND files are opened a second,
whatever a flood of names in the directory, and events past the kernel's queue are simply left to the sweep.
"""

from __future__ import annotations

import collections
import ctypes
import errno
import logging
import os
import select
import stat
import struct
import threading
import time

from . import naming

log = logging.getLogger(__name__)

IN_MOVED_TO = 0x00000080
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len, then the name
PROBES_PER_SECOND = 4096
WAIT_SECONDS = 0.5  # how long stop() may wait for the thread


class ArrivalWatcher:
    """Watches `path` for names `wanted` accepts; `drain()` returns the (name, holder pid) seen since."""

    def __init__(self, path: str, wanted, lock_holder):
        self.path, self._wanted, self._lock_holder = path, wanted, lock_holder
        self._arrivals: collections.deque[tuple[str, int]] = collections.deque(maxlen=PROBES_PER_SECOND)
        self._stop = threading.Event()
        self._fd = _inotify(path)
        self._thread = None
        if self._fd is not None:
            self._thread = threading.Thread(target=self._watch, args=(self._fd,), name=f"arrivals {path}", daemon=True)
            self._thread.start()

    def drain(self) -> list[tuple[str, int]]:
        out = []
        while self._arrivals:
            out.append(self._arrivals.popleft())
        return out

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._fd is not None:  # a thread only where the descriptor opened
            self._thread.join(WAIT_SECONDS * 4)
            os.close(self._fd)
            self._thread = None

    def _watch(self, fd: int) -> None:
        budget, second = PROBES_PER_SECOND, int(time.monotonic())
        while not self._stop.is_set():
            if not select.select([fd], [], [], WAIT_SECONDS)[0]:
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            for name in _names(data):
                if int(time.monotonic()) != second:
                    budget, second = PROBES_PER_SECOND, int(time.monotonic())
                if budget > 0 and self._wanted(name):
                    budget -= 1
                    self._probe(name)

    def _probe(self, name: str) -> None:
        try:
            fd = os.open(os.path.join(self.path, name), naming.READ_FLAGS)
        except OSError:
            return  # gone already, or not ours to open: the pass will say why
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                holder = self._lock_holder(fd)
                if holder is not None:
                    self._arrivals.append((name, holder))
        except OSError:
            pass
        finally:
            os.close(fd)


def _names(data: bytes) -> list[str]:
    names, offset = [], 0
    while offset + _EVENT.size <= len(data):
        _, _, _, length = _EVENT.unpack_from(data, offset)
        raw = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
        offset += _EVENT.size + length
        if raw:
            names.append(os.fsdecode(raw))
    return names


def _inotify(path: str) -> int | None:
    """An inotify descriptor watching `path` for names moved into it; None where there is no inotify
    (then only the passes see writers, as before)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
        if libc.inotify_add_watch(fd, os.fsencode(path), IN_MOVED_TO) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, os.strerror(err))
        return fd
    except (OSError, AttributeError) as e:
        if getattr(e, "errno", None) != errno.ENOENT:
            log.info("not watching %s for new writers (%s): a job shorter than a sample is not seen alive", path, e)
        return None
