"""Keeps glibc's malloc from handing the memory of freed samples back to the kernel between batches.

A batch of 100 KB samples is allocated from a malloc arena and freed when the consumer drops it; with
glibc's defaults (trim above 128 KiB of free memory at the top of a heap) every batch is returned to
the kernel and faulted back in by the next one: about 25 page faults and 50 µs of CPU per 100 KB
sample on the development VM (bench/cache_loader.py), more than verifying it. glibc raises these
thresholds by itself only for allocations above 128 KiB, so samples below that never benefit.
"""

from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
KEEP_BYTES = 32 << 20  # free memory a heap keeps, and allocations below this come from heaps: glibc's own maximum
MALLOC_ENVIRONMENT = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_")

_tuned = False


def keep_freed_memory() -> bool:
    """Raise glibc's trim and mmap thresholds to KEEP_BYTES, once per process (a forked child inherits
    them), unless the program set malloc options of its own in the environment or its C library is not
    glibc. Returns whether they are raised."""
    global _tuned
    if not _tuned and not user_configured() and (mallopt := glibc_mallopt()) is not None:
        _tuned = bool(mallopt(M_TRIM_THRESHOLD, KEEP_BYTES) and mallopt(M_MMAP_THRESHOLD, KEEP_BYTES))
    return _tuned


def user_configured() -> bool:
    return any(name in os.environ for name in MALLOC_ENVIRONMENT) or "glibc.malloc." in os.environ.get(
        "GLIBC_TUNABLES", ""
    )


def glibc_mallopt():
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt
