"""A dataset's manifest held in the process: sample index -> SHA-256 and size, as stored in Redis."""
from __future__ import annotations

from . import keys


class Manifest:
    """Entries laid out exactly as the Redis string (keys.ENTRY), so loading is one copy."""

    def __init__(self, samples: int):
        self.samples = samples
        self._entries = bytearray(samples * keys.ENTRY_SIZE)

    def digest(self, index: int) -> bytes | None:
        """The SHA-256 of sample `index`, or None if not known yet."""
        start = index * keys.ENTRY_SIZE
        digest = bytes(self._entries[start:start + 32])
        return None if digest == keys.UNKNOWN_DIGEST else digest

    def learn(self, index: int, digest: bytes, size: int) -> None:
        start = index * keys.ENTRY_SIZE
        self._entries[start:start + keys.ENTRY_SIZE] = keys.ENTRY.pack(digest, size)

    def merge(self, stored: bytes) -> None:
        """Take the entries Redis knows and this process does not (entries it knows came from the origin)."""
        size = keys.ENTRY_SIZE
        stored = stored[:len(self._entries)]
        if self._entries.count(0) == len(self._entries):  # nothing known here yet: a process's first open
            self._entries[:len(stored)] = stored
            return
        if self._entries[:len(stored)] == stored:  # nothing new: a forked worker holds what its parent read
            return
        for start in range(0, len(stored) - size + 1, size):
            if stored[start:start + 32] != keys.UNKNOWN_DIGEST and self._entries[start:start + 32] == keys.UNKNOWN_DIGEST:
                self._entries[start:start + size] = stored[start:start + size]
