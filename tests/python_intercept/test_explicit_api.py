"""alnair.counter and alnair.phase publish a python record, with PyTorch unimportable, and bad input never raises."""

from __future__ import annotations

import textwrap

from support import PythonProgram, python_records, wait_until

NO_TORCH = "import sys; sys.modules['torch'] = None  # `import torch` raises ImportError\n"


def program(body: str) -> str:
    return NO_TORCH + textwrap.dedent(body) + "\nprint('ready', flush=True)\nsys.stdin.read()\n"


def test_counters_and_phases_are_published_without_torch(shm_dir):
    p = PythonProgram(
        program("""
        import time
        import alnair, alnair.auto  # activation must not need torch
        images = alnair.counter("images_decoded")
        started = time.monotonic_ns()
        for _ in range(7):
            with alnair.phase("preprocess"):
                time.sleep(0.02)
            images.inc(3)
        alnair.counter("loop_ns").inc(time.monotonic_ns() - started)  # the most the phases can hold
        alnair.counter("images_decoded").inc()  # the same counter by name
        with alnair.phase("checkpoint"):
            pass
    """),
        shm_dir,
    )
    record = wait_until(lambda: python_records(shm_dir).get(p.pid))
    record = wait_until(lambda: (r := python_records(shm_dir)[p.pid]).phase_count == 2 and r)
    counters = {c.name: c.value for c in record.counters[: record.counter_count]}
    phases = {ph.name: (ph.count, ph.total_ns) for ph in record.phases[: record.phase_count]}
    loop_ns = counters.pop(b"loop_ns")
    assert counters == {b"images_decoded": 22}
    assert phases[b"preprocess"][0] == 7 and 0.14e9 <= phases[b"preprocess"][1] <= loop_ns
    assert phases[b"checkpoint"][0] == 1
    assert (record.steps, record.flags, record.max_counters, record.max_phases) == (0, 0, 32, 32)
    assert p.finish() == ""
    assert python_records(shm_dir) == {}  # a clean exit removes the segment


def test_bad_names_and_amounts_warn_once_and_the_program_carries_on(shm_dir):
    p = PythonProgram(
        program("""
        import alnair
        for _ in range(2):
            alnair.counter("").inc()
            alnair.counter("x" * 48).inc()
            alnair.counter(None).inc()
            alnair.counter(["unhashable"]).inc()
            alnair.counter("ok").inc(-1)
            alnair.counter("ok").inc(1.5)
        for i in range(40):
            with alnair.phase(f"phase{i}"):
                pass
        alnair.counter("ok").inc(2)
    """),
        shm_dir,
    )
    record = wait_until(lambda: (r := python_records(shm_dir).get(p.pid)) and r.phase_count == 32 and r)
    assert [(c.name, c.value) for c in record.counters[: record.counter_count]] == [(b"ok", 2)]
    assert [ph.name for ph in record.phases[:32]] == [f"phase{i}".encode() for i in range(32)]
    errors = p.finish().splitlines()
    assert p.proc.returncode == 0
    assert len(errors) == 6, errors  # one line per problem (the bad amounts share one), not per call
    assert all(line.startswith("alnair: ") for line in errors)
    assert any("at most 32 phases" in line for line in errors)


def test_a_process_that_records_nothing_publishes_nothing(shm_dir):
    p = PythonProgram(program("import alnair, alnair.auto"), shm_dir)
    assert list(shm_dir.iterdir()) == []
    p.finish()


def test_segment_that_cannot_be_created_costs_one_line_and_nothing_else(tmp_path):
    p = PythonProgram(
        program("""
        import alnair
        for _ in range(3):
            alnair.counter("c").inc()
            with alnair.phase("p"):
                pass
    """),
        tmp_path / "missing",
    )
    errors = p.finish().splitlines()
    assert p.proc.returncode == 0
    assert len(errors) == 1 and errors[0].startswith("alnair: python metrics off, cannot create a segment:")
