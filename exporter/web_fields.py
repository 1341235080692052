"""The web config file's values as its parser reads them: the one-line problem a bad value raises, typed optional
fields, and files read whole with the stamps that tell later whether they changed."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from typing import NamedTuple


class Invalid(Exception):
    """A problem found while parsing; load_web_config adds the file name."""


class FileRead(NamedTuple):
    path: str
    # Taken before the read, so a write after it shows at the next check. None while the file is less than a
    # second old: a second write in the same clock tick could keep mtime and size, so such a file is looked at
    # again until it is older (as git treats a racily clean file).
    stamp: tuple[int, ...] | None
    digest: bytes  # sha256 of the content: a new stamp over the same bytes keeps the config as it is


def read_regular(path: str, reads: list[FileRead]) -> bytes:
    """The file's bytes, also noted in `reads`; anything but a regular file is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens at once, to be refused, not waited on
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OSError("not a regular file")
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(fd)
    fresh = abs(time.time_ns() - status.st_mtime_ns) < 1_000_000_000  # abs: a future mtime is no reason to read on
    reads.append(FileRead(path, None if fresh else _stamp(status), hashlib.sha256(data).digest()))
    return data


def _stamp(status: os.stat_result) -> tuple[int, ...]:
    # Inode and device too: a Kubernetes secret volume swaps a symlink, and a copy may keep size and mtime.
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


def stamps(paths) -> tuple[tuple[int, ...] | None, ...]:
    def stamp(path: str) -> tuple[int, ...] | None:
        try:
            return _stamp(os.stat(path))
        except OSError:  # gone: the next read tells why
            return None

    return tuple(stamp(path) for path in paths)


def optional_string(section: dict, name: str, key: str) -> str | None:
    value = section.get(key)
    if value is not None and not isinstance(value, str):
        raise Invalid(f"{name}.{key} must be a string, got {type(value).__name__}")
    return value or None


def check_boolean(section: dict, name: str, key: str) -> None:
    if section.get(key) is not None and not isinstance(section[key], bool):
        raise Invalid(f"{name}.{key} must be true or false")
