"""The skeleton every collector of one segment kind shares: read the directory each sample, render its
record's families, then the per-process identity and the directory's self-metrics."""
from __future__ import annotations

import os
from typing import ClassVar

from alnair.abi import layout, naming
from alnair.abi.segments import DEFAULT_MAX_SEGMENTS, ParsedSegment, SegmentDirectory
from alnair.exporter.plugin import ExpositionBuilder, LabelSets, render

from ..pods.identity import pod_identity
from .metrics import boot_time_seconds, directory_metrics, process_families


class SegmentCollector:
    """Subclasses set `kind` and implement `record_families`; the kind's parser is the ABI's."""

    kind: ClassVar[int]
    default_interval_seconds = 1.0

    def __init__(self, options):
        self.directory = SegmentDirectory(options.shm_dir, self.kind,
                                          max_segments=getattr(options, "shm_max_segments", DEFAULT_MAX_SEGMENTS),
                                          linger_seconds=getattr(options, "shm_linger", 0.0),
                                          state_path=os.path.join(options.shm_dir, naming.reader_state_name(self.kind)),
                                          watch_arrivals=True)
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
        process_families(out, layout.KIND_NAMES[self.kind], processes, self.labels, self.boot_seconds,
                         self.clock_ticks, self.identity)
        return out.text() + render(directory_metrics(self.directory, processes))
