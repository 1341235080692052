"""The skeleton every collector of one segment kind shares: read the directory each sample, render its
record's families, then the per-process identity and the directory's self-metrics."""

from __future__ import annotations

import logging
import os
import threading
from typing import ClassVar

from alnair.abi import layout, naming
from alnair.abi.segments import DEFAULT_MAX_SEGMENTS, ParsedSegment, SegmentDirectory
from alnair.exporter.plugin import ExpositionBuilder, LabelSets, add_flag, duration, int_between, render

from ..pods.identity import pod_identity
from .metrics import boot_time_seconds, directory_metrics, process_families

log = logging.getLogger(__name__)
_announced: set[str] = set()  # directories marked as read: once per directory, whichever collector comes first
_announce_lock = threading.Lock()


def announce_reader(shm_dir: str) -> None:
    """Tell writers that exited writers' records are served here, so they leave them at exit (--shm.linger)."""
    with _announce_lock:
        if shm_dir in _announced:
            return
        _announced.add(shm_dir)
    try:
        # O_NONBLOCK: a FIFO planted under the name must fail the open (ENXIO), not block the collector forever.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        os.close(os.open(os.path.join(shm_dir, naming.READER_MARKER), flags, 0o644))
    except OSError as e:  # read-only, a planted symlink or FIFO: writers then remove their segments at exit
        log.warning(
            "cannot mark %s as read by this exporter (%s): segments of exited writers are not kept", shm_dir, e.strerror
        )


class SegmentCollector:
    """Subclasses set `kind` and implement `record_families`; the kind's parser is the ABI's. The segment
    directory's flags and checks are the cuda and python collectors' own (shared_arguments, check_options)."""

    kind: ClassVar[int]
    default_interval_seconds = 1.0

    @staticmethod
    def shared_arguments(parser) -> None:
        add_flag(
            parser, "--shm.dir", default=naming.DEFAULT_DIR, help="Directory of the writers' shared-memory segments."
        )
        add_flag(
            parser,
            "--shm.linger",
            type=duration,
            default=120.0,
            help="How long an exited writer's last record is still served, so scrapes see its final counters.",
        )
        # The memory bound docs/security.md states is for the default cap: the flag may lower it, never raise it.
        add_flag(
            parser,
            "--shm.max-segments",
            type=int_between(1, DEFAULT_MAX_SEGMENTS),
            default=DEFAULT_MAX_SEGMENTS,
            help=f"Segments of each kind read per sample at most, 1 to {DEFAULT_MAX_SEGMENTS}; more are counted as "
            "skipped (over_limit).",
        )

    @staticmethod
    def check_options(options) -> str | None:
        if not os.path.isdir(options.shm_dir):
            return f"--shm.dir: not a directory: {options.shm_dir}"
        unsafe = naming.unshared_safely(options.shm_dir)
        return f"--shm.dir {unsafe}" if unsafe else None

    def __init__(self, options):
        announce_reader(options.shm_dir)
        self.directory = SegmentDirectory(
            options.shm_dir,
            self.kind,
            max_segments=getattr(options, "shm_max_segments", DEFAULT_MAX_SEGMENTS),
            linger_seconds=getattr(options, "shm_linger", 0.0),
            state_path=os.path.join(options.shm_dir, naming.reader_state_name(self.kind)),
            watch_arrivals=True,
        )
        # the boot time moves only when the wall clock is stepped: read it once, not every sample
        self.boot_seconds = boot_time_seconds(options.procfs)
        self.clock_ticks = os.sysconf("SC_CLK_TCK")
        self.labels = LabelSets()  # escaped once per process and series, kept while the process lives
        self.identity = pod_identity(options)  # pod, namespace and container of each pid

    def record_families(self, out: ExpositionBuilder, processes: list[ParsedSegment]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.directory.close()

    def collect(self) -> bytes:
        processes = self.directory.read()
        self.labels.new_sample()
        out = ExpositionBuilder()
        self.record_families(out, processes)
        process_families(
            out,
            layout.KIND_NAMES[self.kind],
            processes,
            self.labels,
            self.boot_seconds,
            self.clock_ticks,
            self.identity,
        )
        return out.text() + render(directory_metrics(self.directory, processes))
