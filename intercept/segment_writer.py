"""A writer's shared-memory segment from Python: the same protocol as intercept/shm_segment.c.

A publish writes into a shared mapping: no system call inside the seqlock window, so
the thread never lets go of the GIL there and readers never wait on the training
loop. Like the C writer, it relies on the CPU keeping stores in order (x86-64 does).
The mapping is made through libc: Python's mmap module keeps a duplicate descriptor
(before 3.13), and closing that one would drop the process's liveness lock.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import struct
import time

from alnair.abi import layout, naming

SEGMENT_MODE = 0o640  # owner read-write, group read at most
_U64 = struct.Struct("<Q")
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_UPDATE_TIME_OFFSET = layout.ShmHeader.update_time_ns.offset


def pid_namespace_inode() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def start_time_ticks() -> int:
    """Field 22 of /proc/self/stat; the comm field may hold spaces and ')'."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return 0


def _comm() -> bytes:
    try:
        with open("/proc/self/comm", "rb") as f:
            return f.read().rstrip(b"\n")
    except OSError:
        return b""


def _from_env(variable: str) -> bytes:
    return os.environ.get(variable, "").encode(errors="replace")


def _nul_terminated(value: bytes, field) -> bytes:
    return value[: field.size - 1]


def build_header(kind: int, record_size: int) -> layout.ShmHeader:
    h = layout.ShmHeader()
    h.magic = layout.SHM_MAGIC
    h.abi_version = layout.ABI_VERSION
    h.header_size = layout.HEADER_SIZE
    h.record_kind = kind
    h.record_size = record_size
    h.writer_pid = os.getpid()
    h.pid_namespace_inode = pid_namespace_inode()
    h.start_time_ticks = start_time_ticks()
    h.pod_uid = _nul_terminated(_from_env("ALNAIR_POD_UID"), layout.ShmHeader.pod_uid)
    h.container_id = _nul_terminated(_from_env("ALNAIR_CONTAINER_ID"), layout.ShmHeader.container_id)
    h.comm = _nul_terminated(_comm(), layout.ShmHeader.comm)
    h.update_time_ns = time.time_ns()
    return h


class WriterSegment:
    """One process's segment of one kind: created locked, published under the seqlock.

    Only one thread may publish. The descriptor holds the liveness lock, so this
    object never opens a second descriptor to its file (closing one would drop it).
    """

    def __init__(self, kind: int, record_size: int):
        self.directory = directory = naming.segment_directory()
        unsafe = naming.unshared_safely(directory)
        if unsafe:
            raise PermissionError(f"not publishing: {unsafe}")
        self.header = h = build_header(kind, record_size)
        name = naming.segment_name(kind, h.pid_namespace_inode, h.writer_pid, h.start_time_ticks)
        self.path = os.path.join(directory, name)
        self._seq = 0
        self.fd = self._create(os.path.join(directory, naming.temp_name(name)))

    def _create(self, temp_path: str) -> int:
        """Built under a hidden name and renamed once locked and initialised, so a
        reader never sees a half-made segment or mistakes it for a dead one."""
        fd = os.open(temp_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, SEGMENT_MODE)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fcntl(F_SETLK, F_WRLCK) on the whole file
            # Allocated now, not on first touch: a full /dev/shm fails here, not as SIGBUS in a publish.
            os.posix_fallocate(fd, 0, self.header.header_size + self.header.record_size)
            os.pwrite(fd, bytes(self.header), 0)
            self._map_shared(fd)
            os.rename(temp_path, self.path)
        except OSError:
            os.unlink(temp_path)
            os.close(fd)
            raise
        return fd

    def _map_shared(self, fd: int) -> None:
        self._size = self.header.header_size + self.header.record_size
        address = _libc.mmap(None, self._size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if address == _MAP_FAILED:
            error = ctypes.get_errno()
            raise OSError(error, f"cannot map the segment: {os.strerror(error)}")
        self._address = address
        self._view = (ctypes.c_char * self._size).from_address(address)

    def publish(self, record: bytes) -> None:
        """seq odd, the record and update time, seq even: readers retry while it is odd."""
        view = self._view
        self._seq += 1
        _U64.pack_into(view, layout.SEQ_OFFSET, self._seq)
        ctypes.memmove(self._address + self.header.header_size, record, len(record))
        _U64.pack_into(view, _UPDATE_TIME_OFFSET, time.time_ns())
        self._seq += 1
        _U64.pack_into(view, layout.SEQ_OFFSET, self._seq)

    def forget(self) -> None:
        """For a fork child: the lock is the parent's, so closing here cannot drop it."""
        if self.fd >= 0:
            self._view = None
            _libc.munmap(self._address, self._size)
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """A clean exit, after the last publish: release the lock, leaving the file for a reader that serves
        exited writers' records (abi/naming.py), else removing it first."""
        if self.fd >= 0:
            if not naming.reader_lingers(self.directory):
                try:
                    os.unlink(self.path)
                except OSError:
                    pass  # already reclaimed or removed by hand
            self.forget()
