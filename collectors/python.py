"""The python collector: per-process training-loop counters, custom counters and phases the Python intercept
publishes."""

from __future__ import annotations

from alnair.abi import fields
from alnair.abi.layout import KIND_PYTHON, PythonRecord
from alnair.abi.records import text
from alnair.abi.segments import ParsedSegment
from alnair.exporter.plugin import ExpositionBuilder

from .shm.collector import SegmentCollector


class PythonCollector(SegmentCollector):
    help = "Per-process training-loop counters (steps, data stall, phases) from the Python intercept's shared memory."
    kind = KIND_PYTHON

    def record_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[PythonRecord]]) -> None:
        """Every field the ABI's field table serves: the training loop's per process, the custom counters' and
        phases' per process and name."""
        loops: list[fields.Row] = []
        counters: list[fields.Row] = []
        phases: list[fields.Row] = []
        for p in processes:
            name, pid, r = p.segment.name, p.segment.pid_label, p.record
            loops.append((self.labels.get((name, pid), {"pid": pid}), r, None))
            counters += [
                (self.labels.get((name, pid, "c", c.name), {"pid": pid, "name": text(c.name)}), c, None)
                for c in r.counters[: r.counter_count]
            ]
            phases += [
                (self.labels.get((name, pid, "p", ph.name), {"pid": pid, "name": text(ph.name)}), ph, None)
                for ph in r.phases[: r.phase_count]
            ]
        rows = {"alnair_python_record": loops, "alnair_python_counter": counters, "alnair_python_phase": phases}
        for family in fields.families(rows):
            out.family(*family)
