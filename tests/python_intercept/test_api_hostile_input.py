"""Hostile names and amounts given to alnair.counter and alnair.phase: the program never sees an exception,
and the record holds what docs/python-api.md says (names mapped to their published form, values saturated)."""

from __future__ import annotations

from support import PythonProgram, python_records, wait_until
from test_explicit_api import program

U64_MAX = 2**64 - 1
TOO_LONG = "alnair: counter name must be 1 to 47 bytes of text, got {}; not recorded"


def published(shm_dir, pid: int, counters: int, phases: int = 0):
    """(counters, phases) of the pid's record once it holds that many of each, as lists of (name, values...)."""

    def complete():
        record = python_records(shm_dir).get(pid)
        return record if record and (record.counter_count, record.phase_count) == (counters, phases) else None

    record = wait_until(complete)
    return (
        [(c.name.decode(), c.value) for c in record.counters[: record.counter_count]],
        [(ph.name.decode(), ph.count, ph.total_ns) for ph in record.phases[: record.phase_count]],
    )


def finish(p: PythonProgram) -> list[str]:
    """The program's stderr lines after a clean exit."""
    errors = p.finish().splitlines()
    assert p.proc.returncode == 0, errors
    return errors


def test_lone_surrogate_names_publish_with_u_fffd_once_each(shm_dir):
    # it printed "ready" after them: every call returned
    p = PythonProgram(
        program("""
        import alnair
        alnair.counter("x\\udc80").inc(2)  # no UTF-8 for a lone surrogate
        for name in ("p\\ud800", "p\\udfff"):  # one published form, so one phase
            with alnair.phase(name):
                pass
    """),
        shm_dir,
    )
    counters, phases = published(shm_dir, p.pid, counters=1, phases=1)
    assert counters == [("x\ufffd", 2)]
    assert [(name, count) for name, count, _ in phases] == [("p\ufffd", 2)]
    assert finish(p) == []  # the mapping is silent: the U+FFFD in the series shows it


def test_nul_and_control_names_publish_with_u_fffd_and_spellings_of_one_form_share_its_slot(shm_dir):
    p = PythonProgram(
        program("""
        import alnair
        alnair.counter("a\\x00b").inc(1)  # a NUL would end the C string: "a" twice
        alnair.counter("a\\x00c").inc(10)
        alnair.counter("a\\x01b").inc(100)  # the same published form as "a\\x00b"
        alnair.counter("a\\ufffdb").inc(1000)  # and that form spelt out
        for name in ("tab\\there", "c1\\x85", "del\\x7f"):
            with alnair.phase(name):
                pass
    """),
        shm_dir,
    )
    counters, phases = published(shm_dir, p.pid, counters=2, phases=3)
    assert counters == [("a\ufffdb", 1101), ("a\ufffdc", 10)]
    assert [(name, count) for name, count, _ in phases] == [("tab\ufffdhere", 1), ("c1\ufffd", 1), ("del\ufffd", 1)]
    assert finish(p) == []


def test_an_amount_past_2_64_and_sums_past_it_publish_2_64_minus_1(shm_dir):
    p = PythonProgram(
        program("""
        import time
        import alnair
        from alnair.intercept import api
        alnair.counter("huge").inc(2**64 + 5)  # a uint64 field alone would keep 5
        summed = alnair.counter("summed")
        summed.inc(2**63)
        summed.inc(2**63 + 7)
        alnair.counter("exact").inc(2**64 - 1)
        api._clock = iter([0, 2**64 + 5]).__next__  # one phase that lasted past 2**64 ns
        with alnair.phase("long"):
            pass
        api._clock = time.monotonic_ns
    """),
        shm_dir,
    )
    counters, phases = published(shm_dir, p.pid, counters=3, phases=1)
    assert counters == [("huge", U64_MAX), ("summed", U64_MAX), ("exact", U64_MAX)]
    assert phases == [("long", 1, U64_MAX)]
    assert finish(p) == []


def test_names_of_47_bytes_are_recorded_and_of_48_refused_whole_counting_the_published_form(shm_dir):
    accepted = ["x" * 47, "x" * 45 + "é"]  # é is 2 bytes in UTF-8
    refused = ["y" * 48, "y" * 46 + "é", "y" * 45 + "\x00"]  # "é" would be cut mid-character; U+FFFD is 3 bytes
    p = PythonProgram(
        program(f"""
        import alnair
        for name in {accepted + refused!r}:
            for _ in range(2):
                alnair.counter(name).inc()
    """),
        shm_dir,
    )
    counters, _ = published(shm_dir, p.pid, counters=2)
    assert counters == [(name, 2) for name in accepted]
    assert finish(p) == [TOO_LONG.format(repr(name)) for name in refused]  # one line each, not one per call


def test_names_and_amounts_that_raise_when_hashed_or_shown_cost_one_line_each(shm_dir):
    p = PythonProgram(
        program("""
        import alnair
        class Unshowable:
            def __repr__(self):
                raise RuntimeError("no repr")
        class Unhashable(str):
            def __hash__(self):
                raise RuntimeError("no hash")
        for _ in range(2):
            alnair.counter(Unshowable()).inc()
            alnair.counter(Unhashable("h")).inc()
            alnair.counter("ok").inc(-10**5000)  # repr of an int past 4300 digits raises ValueError
            alnair.counter("ok").inc(Unshowable())
        alnair.counter("ok").inc(3)
    """),
        shm_dir,
    )
    counters, _ = published(shm_dir, p.pid, counters=1)
    assert counters == [("ok", 3)]
    assert finish(p) == [
        "alnair: counter name must be 1 to 47 bytes of text, got <Unshowable that cannot be shown>; not recorded",
        "alnair: a counter name raised RuntimeError; not recorded",
        "alnair: counter 'ok': inc() takes an int >= 0, got <int that cannot be shown>; ignored",
    ]


def test_a_warning_with_stderr_closed_is_lost_and_the_program_carries_on(shm_dir):
    p = PythonProgram(
        program("""
        import alnair
        sys.stderr.close()
        alnair.counter("").inc()
        alnair.counter("ok").inc(-1)
        alnair.counter("ok").inc(4)
    """),
        shm_dir,
    )
    counters, _ = published(shm_dir, p.pid, counters=1)
    assert counters == [("ok", 4)]
    assert finish(p) == []
