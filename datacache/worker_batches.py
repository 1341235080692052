"""A DataLoader worker's batches of sample bytes handed to the loader's process through shared memory: a ring
of slots each worker maps once, so the pickle torch's queue carries says where the bytes lie instead of holding them."""

from __future__ import annotations

import logging
import mmap
import os
import struct
import sys
import threading
from multiprocessing import reduction

log = logging.getLogger(__name__)

SLOTS = 4  # a worker's batches pickled and not yet read: at most torch's prefetch_factor (default 2)
HEADER_BYTES = 4096  # the reader's "attached" flag at 0, each slot's sequence number (0: free) after it
MIN_SLOT_BYTES = 1 << 20
MAX_RING_BYTES = 256 << 20
RING_DIRECTORY = "/dev/shm"
_WORD = struct.Struct("<Q")


class WorkerBatch(list):
    """What `CachedDataset.__getitems__` returns in a DataLoader worker: the batch's samples, a list (torch's
    default_collate passes a list of bytes through as it is). Pickled for torch's queue (multiprocessing's
    ForkingPickler), a batch of bytes is copied into a free slot of this worker's ring and arrives in the loader's
    process as a list of the same bytes; anything else, or with no slot free, is pickled as a plain list."""

    __slots__ = ()


class _Ring:
    """SLOTS slots of `slot_bytes` in one shared-memory file, unlinked at once (only the worker's descriptor and
    the mappings keep it). The worker fills a free slot and stamps it with the batch's sequence number; the
    reader copies the samples out and frees the slot. The descriptor travels (DupFd) until the reader says it
    mapped the ring."""

    def __init__(self, slot_bytes: int):
        self.slot_bytes = slot_bytes
        self.size = HEADER_BYTES + SLOTS * slot_bytes
        self.name = f"alnair-batches-{os.getpid()}-{os.urandom(6).hex()}"
        path = os.path.join(RING_DIRECTORY, self.name)
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.unlink(path)
            os.posix_fallocate(self.fd, 0, self.size)  # ENOSPC now rather than SIGBUS at a write into a full tmpfs
            self.view = memoryview(mmap.mmap(self.fd, self.size))
        except BaseException:
            os.close(self.fd)
            raise
        self.pid = os.getpid()
        self.sequence = 0
        self.lock = threading.Lock()

    def put(self, samples: list[bytes]) -> tuple | None:
        """Copies `samples` into a free slot: what the reader needs to take them, or None if none is free."""
        sizes = [len(sample) for sample in samples]
        if sum(sizes) > self.slot_bytes:
            return None
        with self.lock:
            slot = next((s for s in range(SLOTS) if _WORD.unpack_from(self.view, _slot_word(s))[0] == 0), None)
            if slot is None:
                return None
            offset = HEADER_BYTES + slot * self.slot_bytes
            for sample, size in zip(samples, sizes):
                self.view[offset : offset + size] = sample
                offset += size
            self.sequence += 1
            _WORD.pack_into(self.view, _slot_word(slot), self.sequence)
            attached = _WORD.unpack_from(self.view, 0)[0] == 1
            descriptor = None if attached else reduction.DupFd(self.fd)
            return (self.name, self.pid, self.size, descriptor), slot, self.sequence, sizes


def _slot_word(slot: int) -> int:
    return _WORD.size * (1 + slot)


_ring: _Ring | None = None
_ring_failed_in: int | None = None  # the pid in which a ring could not be made: plain pickles there
_ring_lock = threading.Lock()


def _worker_ring(batch_bytes: int) -> _Ring | None:
    """This process's ring, made on its first batch with slots twice that batch's size."""
    global _ring, _ring_failed_in
    pid = os.getpid()
    if _ring is not None and _ring.pid == pid:
        return _ring
    if _ring_failed_in == pid:
        return None
    with _ring_lock:
        if _ring is None or _ring.pid != pid:
            slot_bytes = min(max(2 * batch_bytes, MIN_SLOT_BYTES), MAX_RING_BYTES // SLOTS)
            slot_bytes = -(-slot_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
            try:
                _ring = _Ring(slot_bytes)
            except OSError as e:  # no /dev/shm, or too small a one: batches are pickled as they were
                _ring_failed_in = pid
                log.info("dataset cache: DataLoader batches pickled, no shared memory for them: %s", e)
                return None
    return _ring


def _reduce(batch: WorkerBatch):
    if batch and all(type(sample) is bytes for sample in batch) and in_dataloader_worker():
        ring = _worker_ring(sum(map(len, batch)))
        taken = ring.put(batch) if ring is not None else None
        if taken is not None:
            return _received, taken
    return list, (list(batch),)


reduction.ForkingPickler.register(WorkerBatch, _reduce)


def in_dataloader_worker() -> bool:
    """Whether this process is a torch DataLoader worker (torch, if not imported, has none)."""
    torch_data = sys.modules.get("torch.utils.data")
    return torch_data is not None and torch_data.get_worker_info() is not None


_attached: dict[str, tuple[int, memoryview]] = {}  # ring name -> (worker pid, mapping), in the reading process
_attached_lock = threading.Lock()


def _received(ring: tuple, slot: int, sequence: int, sizes: list[int]) -> list[bytes]:
    """Unpickled in the loader's process: the batch's samples copied out of the worker's slot, which is then free."""
    view = _mapping(*ring)
    if _WORD.unpack_from(view, _slot_word(slot))[0] != sequence:
        raise RuntimeError("a DataLoader worker's shared batch was overwritten before it was read")
    offset, samples = HEADER_BYTES + slot * (len(view) - HEADER_BYTES) // SLOTS, []
    for size in sizes:
        samples.append(bytes(view[offset : offset + size]))
        offset += size
    _WORD.pack_into(view, _slot_word(slot), 0)
    return samples


def _mapping(name: str, pid: int, size: int, descriptor) -> memoryview:
    with _attached_lock:
        known = _attached.get(name)
        fd = descriptor.detach() if descriptor is not None else None  # also releases the worker's copy of it
        try:
            if known is not None:
                return known[1]
            if fd is None:
                raise RuntimeError(
                    f"a DataLoader worker's shared batch from ring {name} that this process never mapped"
                )
            view = memoryview(mmap.mmap(fd, size))
        finally:
            if fd is not None:
                os.close(fd)
        for other, (worker, _) in list(_attached.items()):  # rings of workers that have exited: unmapped
            if not _alive(worker):
                del _attached[other]
        _attached[name] = (pid, view)
        _WORD.pack_into(view, 0, 1)
        return view


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
