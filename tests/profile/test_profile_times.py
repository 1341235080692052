"""`alnair profile` writes times for people (its messages on stderr) in RFC 3339, UTC, with fractional seconds only
where the time has them; its rows (CSV, Parquet) keep Unix seconds, as before. Exact output, against the Prometheus
double of test_profile_hostile.py where a message needs a server."""

from __future__ import annotations

import csv
import io
import subprocess

import pytest

from alnair.profiler.selection import rfc3339
from test_profile_hostile import INFO, PROFILE, http, matrix, one_line


@pytest.mark.parametrize(
    "seconds, text",
    [
        (1796465472, "2026-12-05T10:11:12Z"),
        (1796465472.0, "2026-12-05T10:11:12Z"),
        (1796465472.5, "2026-12-05T10:11:12.5Z"),
        (1796465472.25, "2026-12-05T10:11:12.25Z"),
        (1796465472.1, "2026-12-05T10:11:12.1Z"),  # not 12.099999: the nearest microsecond
        (1796465472.000001, "2026-12-05T10:11:12.000001Z"),
        (1000000000, "2001-09-09T01:46:40Z"),
        (0, "1970-01-01T00:00:00Z"),
        (-0.5, "1969-12-31T23:59:59.5Z"),
    ],
)
def test_rfc3339_in_utc_with_the_fraction_the_time_has(seconds, text):
    assert rfc3339(seconds) == text


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*PROFILE, *args, "-q"], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "start, end, line",
    [
        (
            "1000000000.7",
            "1000000000.2",
            "alnair profile: error: empty range: the start (2001-09-09T01:46:40.7Z) is not before the end "
            "(2001-09-09T01:46:40.2Z)",
        ),
        (
            "2001-09-09T03:46:40.25+02:00",
            "1000000000",
            "alnair profile: error: empty range: the start (2001-09-09T01:46:40.25Z) is not before the end "
            "(2001-09-09T01:46:40Z)",
        ),
        (
            "2026-12-05T10:11:12",
            "2026-12-05T10:11:12Z",  # no zone: UTC
            "alnair profile: error: empty range: the start (2026-12-05T10:11:12Z) is not before the end "
            "(2026-12-05T10:11:12Z)",
        ),
    ],
)
def test_an_empty_range_names_its_times_as_given(start, end, line):
    # the range is checked before Prometheus is asked: no server needed
    assert one_line(run("--prometheus", "http://127.0.0.1:9", "--start", start, "--end", end), 2) == line


def info_unless(excluded: str):
    """An answer: pid 7's process info sampled at 1000000000.5 to the process-info queries that do not name
    `excluded`, its steps counter at 1000000000.5 and 1000000001.25, and no series to any other query."""

    def answer(double, handler, query):
        found = []
        if query.startswith("alnair_python_process_info{") and excluded not in query:
            found = [{"metric": INFO, "values": [[1000000000.5, "1"]]}]
        elif query.startswith("alnair_python_steps_total{"):
            found = [
                {
                    "metric": {**INFO, "__name__": "alnair_python_steps_total"},
                    "values": [[1000000000.5, "1"], [1000000001.25, "4"]],
                }
            ]
        double.send(handler, http(matrix(*found)))

    return answer


def test_a_range_without_jobs_is_named_in_rfc3339(serve):
    double = serve(lambda double, handler, query: double.send(handler, http(matrix())))
    result = run("--prometheus", double.url, "--start", "999998200.5", "--end", "1000000600")
    assert one_line(result, 2) == (
        "alnair profile: error: no Alnair job in the range 2001-09-09T01:16:40.5Z to 2001-09-09T01:56:40Z (empty range)"
    )


def test_selectors_that_match_no_job_name_the_range_in_rfc3339(serve):
    double = serve(info_unless('namespace="nowhere"'))
    result = run(
        "--prometheus", double.url, "--start", "999999000.125", "--end", "1000000600.75", "--namespace", "nowhere"
    )
    assert one_line(result, 2) == (
        'alnair profile: error: no job matches {namespace="nowhere"} from '
        "2001-09-09T01:30:00.125Z to 2001-09-09T01:56:40.75Z"
    )


def test_the_rows_keep_unix_seconds(serve):
    """CSV is a machine format: the job's first and last sample as Unix seconds, as before."""
    double = serve(info_unless("nothing excluded"))
    result = run("--prometheus", double.url, "--start", "999999000", "--end", "1000000600")
    assert (result.returncode, result.stderr) == (0, "")
    [row] = list(csv.DictReader(io.StringIO(result.stdout)))
    assert (row["start_time"], row["end_time"]) == ("1000000000.5", "1000000001.25")


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--start", "nan"),
        ("--end", "inf"),
        ("--end", "-inf"),
        ("--start", "1e20"),
        # 10000-01-01: RFC 3339 has four digits
        ("--start", "253402300800"),
    ],
)
def test_a_time_rfc3339_cannot_write_is_refused_in_one_line(flag, value):
    other = {"--start": "--end", "--end": "--start"}[flag]
    result = run("--prometheus", "http://127.0.0.1:9", f"{flag}={value}", other, "1000000000")
    assert one_line(result, 2) == (
        f"alnair profile: error: argument {flag}: not a time (Unix seconds or RFC 3339 like "
        f"2026-12-01T10:00:00Z): {value!r}"
    )
