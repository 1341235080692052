"""The python collector: per-process training-loop counters, custom counters and phases the Python intercept publishes."""
from __future__ import annotations

from alnair.abi import layout
from alnair.abi.records import text
from alnair.abi.segments import ParsedSegment, Segment
from alnair.exporter.plugin import ExpositionBuilder

from .shm.collector import SegmentCollector

# (metric, kind, help, field, scale): one row per exported training-loop field.
LOOP_FIELDS = [
    ("alnair_python_steps", "counter", "Training steps: batches training loops took from their DataLoaders.", "steps", 1),
    ("alnair_python_samples", "counter", "Items in those batches (their leading dimension).", "samples", 1),
    ("alnair_python_epochs", "counter", "Training loops that ran their DataLoader to the end.", "epochs", 1),
    ("alnair_python_optimizer_steps", "counter", "Completed torch.optim optimizer steps.", "optimizer_steps", 1),
    ("alnair_python_data_wait_seconds", "counter", "Time training loops waited for their next batch (the data stall).", "data_wait_ns", 1e-9),
    ("alnair_python_step_seconds", "counter", "Time in training steps, data wait included: stall fraction = data_wait / step.", "step_ns", 1e-9),
]


class PythonCollector(SegmentCollector):
    help = "Per-process training-loop counters (steps, data stall, phases) from the Python intercept's shared memory."
    kind = layout.KIND_PYTHON

    def record_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[layout.PythonRecord]]) -> None:
        self._loop_families(out, processes)
        self._custom_families(out, processes)

    def _pid(self, segment: Segment) -> str:
        pid = segment.pid_label
        return self.labels.get((segment.name, pid), {"pid": pid})

    def _loop_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[layout.PythonRecord]]) -> None:
        rows = [(self._pid(p.segment), p.record) for p in processes]
        for metric, kind, help_text, field, scale in LOOP_FIELDS:
            out.family(metric, kind, help_text, ((labels, getattr(r, field) * scale) for labels, r in rows))
        out.family("alnair_python_time_to_first_step_seconds", "gauge",
                   "From process start to its first training step (absent before it).",
                   ((labels, r.first_step_ns / 1e9) for labels, r in rows if r.first_step_ns))
        out.family("alnair_python_dataloader_worker", "gauge", "1 for a DataLoader worker process, 0 otherwise.",
                   ((labels, int(bool(r.flags & layout.PYTHON_DATALOADER_WORKER))) for labels, r in rows))

    def _custom_families(self, out: ExpositionBuilder, processes: list[ParsedSegment[layout.PythonRecord]]) -> None:
        counters, phase_seconds, phase_count = [], [], []
        for p in processes:
            pid, r = p.segment.pid_label, p.record
            for c in r.counters[: r.counter_count]:
                counters.append((self.labels.get((p.segment.name, pid, "c", c.name), {"pid": pid, "name": text(c.name)}), c.value))
            for ph in r.phases[: r.phase_count]:
                labels = self.labels.get((p.segment.name, pid, "p", ph.name), {"pid": pid, "name": text(ph.name)})
                phase_seconds.append((labels, ph.total_ns / 1e9))
                phase_count.append((labels, ph.count))
        out.family("alnair_python_custom", "counter", "Custom counts: alnair.counter(name).inc().", counters)
        out.family("alnair_python_phase_seconds", "counter", "Time inside `with alnair.phase(name)` blocks.", phase_seconds)
        out.family("alnair_python_phase_completions", "counter", "Completed `with alnair.phase(name)` blocks.", phase_count)
