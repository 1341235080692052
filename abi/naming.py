"""Where segments live and what they are called: one name per writer process and record kind."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from functools import cache

from . import layout

DIR_VARIABLE = "ALNAIR_SHM_DIR"  # writers and readers meet in this directory
DEFAULT_DIR = layout.SHM_DEFAULT_DIR  # the POSIX shared-memory namespace
NAME_PREFIX = layout.SHM_NAME_PREFIX
TEMP_SUFFIX = ".tmp"
# Left in the directory by a reader that serves exited writers' last records (the exporter's --shm.linger):
# where it exists, a writer that exits cleanly leaves its segment, final counters published, for the reader
# to serve and then reclaim; where it does not (no exporter on this machine), the writer removes it.
READER_MARKER = layout.READER_MARKER
# How a reader opens a name in the shared directory, whose every file may be hostile: a planted link is not followed
# and a FIFO does not block the open.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def segment_directory(environ: Mapping[str, str] = os.environ) -> str:
    """ALNAIR_SHM_DIR, or the default when it is unset or empty."""
    return environ.get(DIR_VARIABLE) or DEFAULT_DIR


def unshared_safely(directory: str) -> str:
    """Why `directory` is unfit to share between users ("" if it is fit): writable by every user without the sticky
    bit, any of them could delete the others' segments. The exporter refuses it and writers do not publish there."""
    try:
        mode = os.stat(directory).st_mode
    except OSError:
        return ""  # the open that follows says what is wrong
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        return (
            f"{directory} is writable by every user without the sticky bit, so any of them could delete the "
            "others' segments: chmod 1777 it, as /dev/shm is (docs/security.md)"
        )
    return ""


def kind_prefix(kind: int) -> str:
    """What every segment of one record kind is named after: alnair.<kind>."""
    return f"{NAME_PREFIX}{layout.KIND_NAMES[kind]}."


def segment_name(kind: int, pid_namespace_inode: int, pid: int, start_time_ticks: int) -> str:
    """alnair.<kind>.<pid namespace inode>.<pid>.<start ticks>: never reused by another live process."""
    return f"{kind_prefix(kind)}{pid_namespace_inode}.{pid}.{start_time_ticks}"


def temp_name(name: str) -> str:
    """The hidden name a segment is built under before it is renamed into place."""
    return f".{name}{TEMP_SUFFIX}"


def reader_state_name(kind: int) -> str:
    """Where a reader keeps the writers of a kind it saw alive, so a restart still serves those that exited."""
    return f".{READER_MARKER}.{layout.KIND_NAMES[kind]}"


def reader_lingers(directory: str) -> bool:
    """Whether a reader that serves exited writers' records announced itself in `directory`."""
    return os.path.isfile(os.path.join(directory, READER_MARKER))


@cache
def _name_pattern(kind: int) -> re.Pattern[str]:
    # Exactly what segment_name() makes (ASCII digits, at most a uint64's 20): any other name is not a writer's, is
    # refused without being opened, and never reaches a log, a label or the reader's saved state.
    number = r"[0-9]{1,20}"
    return re.compile(rf"(\.?){re.escape(kind_prefix(kind))}{number}\.{number}\.{number}(\{TEMP_SUFFIX})?")


def is_segment_name(name: str, kind: int) -> bool:
    """Whether `name` is one segment_name() could have made for `kind`."""
    match = _name_pattern(kind).fullmatch(name)
    return match is not None and not match[1] and not match[2]


def is_temp_name(name: str, kind: int) -> bool:
    """Whether `name` is one temp_name() could have made for a segment of `kind`."""
    match = _name_pattern(kind).fullmatch(name)
    return match is not None and bool(match[1]) and bool(match[2])
