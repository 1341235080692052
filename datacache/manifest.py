"""A dataset's manifest held in the process: sample index -> SHA-256, size and check digest, as stored in Redis."""

from __future__ import annotations

from alnair.abi import cache_keys as keys


class Manifest:
    """Entries laid out exactly as the Redis strings (keys.ENTRY, keys.CHECK_SIZE), so loading is one copy each."""

    def __init__(self, samples: int):
        self.samples = samples
        self._entries = bytearray(samples * keys.ENTRY_SIZE)
        self._checks = bytearray(samples * keys.CHECK_SIZE)

    def digest(self, index: int) -> bytes | None:
        """The SHA-256 of sample `index`, or None if not known yet."""
        start = index * keys.ENTRY_SIZE
        return self._known(self._entries[start : start + 32], keys.UNKNOWN_DIGEST)

    def check(self, index: int) -> bytes | None:
        """The check digest of sample `index`, or None if not known (yet)."""
        start = index * keys.CHECK_SIZE
        return self._known(self._checks[start : start + keys.CHECK_SIZE], keys.UNKNOWN_CHECK)

    @staticmethod
    def _known(digest: bytearray, unknown: bytes) -> bytes | None:
        return None if digest == unknown else bytes(digest)

    def learn(self, index: int, digest: bytes, size: int, check: bytes) -> None:
        start = index * keys.ENTRY_SIZE
        self._entries[start : start + keys.ENTRY_SIZE] = keys.ENTRY.pack(digest, size)
        self.learn_check(index, check)

    def learn_check(self, index: int, check: bytes) -> None:
        start = index * keys.CHECK_SIZE
        self._checks[start : start + keys.CHECK_SIZE] = check

    def merge(self, stored_entries: bytes, stored_checks: bytes) -> None:
        """Take the entries Redis knows and this process does not (entries it knows came from the origin),
        and Redis's check digests of the entries this process then holds as Redis does."""
        stored_entries, stored_checks = stored_entries[: len(self._entries)], stored_checks[: len(self._checks)]
        if self._entries.count(0) == len(self._entries):  # nothing known here yet: a process's first open
            self._entries[: len(stored_entries)] = stored_entries
            self._checks[: len(stored_checks)] = stored_checks
            return
        if self._entries.startswith(stored_entries) and self._checks.startswith(stored_checks):
            return  # nothing new: a forked worker holds what its parent read
        for index in range(len(stored_entries) // keys.ENTRY_SIZE):
            entry = slice(index * keys.ENTRY_SIZE, (index + 1) * keys.ENTRY_SIZE)
            if stored_entries[entry.start : entry.start + 32] == keys.UNKNOWN_DIGEST:
                continue
            if self.digest(index) is None:
                self._entries[entry] = stored_entries[entry]
            check = stored_checks[index * keys.CHECK_SIZE : (index + 1) * keys.CHECK_SIZE]
            if (
                self._entries[entry] == stored_entries[entry]
                and self.check(index) is None
                and len(check) == keys.CHECK_SIZE
            ):
                self.learn_check(index, check)
