"""`alnair profile`: one row per job from a Prometheus that scrapes Alnair exporters, as CSV or Parquet.

    alnair profile --prometheus http://prometheus:9090 --last 6h --namespace team-a --output jobs.parquet

Every family is one query for all jobs (a range selector, so the raw samples come back), which keeps a thousand
jobs to some 40 queries; progress goes to stderr, one line per query.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from alnair.commandline import duration, flag_type, format_duration, int_at_least

from . import jobs as job_series
from .output import write
from .prometheus import MAX_ANSWER_BYTES, TIMEOUT_SECONDS, MiB, ProfileError, Prometheus
from .selection import Selection, parse_last, parse_time, time_range

PROG = "alnair profile"


def add_parser(commands) -> argparse.ArgumentParser:
    """Registers `profile` on the `alnair` command's subparsers."""
    profile = commands.add_parser(
        "profile",
        help="one row per job (process) from Prometheus's Alnair series, as CSV or Parquet",
        description="Per job (pid@instance): duration, node CPU and memory, GPU utilization, memory, temperature, "
        "power and energy, the CUDA intercept's counters and the training loop's steps, throughput, step "
        "time and data stall, with the node, pod and GPU it ran on (docs/dataset.md lists every column).",
        epilog="Exit status: 0 with the rows written; 1 when Prometheus fails (unreachable, slower than --timeout, "
        "HTTP 5xx, an error of its own); 2 for bad flags, a URL that is no Prometheus, an answer that is not "
        "Prometheus's or is over --max-answer-mib, a query Prometheus cannot parse, or no job in the range. "
        "Errors are one line on stderr; the server's control characters in it and in label values are "
        "printed as escapes (\\x1b).",
    )
    profile.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus's base URL (http://host:9090).")
    profile.add_argument(
        "--timeout",
        type=duration,
        default=TIMEOUT_SECONDS,
        metavar="DURATION",
        help=f"Longest wait for one query's whole answer (default: {format_duration(TIMEOUT_SECONDS)}).",
    )
    profile.add_argument(
        "--max-answer-mib",
        type=int_at_least(1),
        default=MAX_ANSWER_BYTES // MiB,
        metavar="MIB",
        help="Largest answer read, in MiB; a larger one is refused (default: %(default)s).",
    )
    times = profile.add_argument_group("time range (default: the last hour)")
    times.add_argument("--start", type=flag_type(parse_time), help="Unix seconds or RFC 3339.")
    times.add_argument("--end", type=flag_type(parse_time), help="Unix seconds or RFC 3339 (default: now).")
    times.add_argument(
        "--last", type=flag_type(parse_last), metavar="DURATION", help="The range before --end: 30m, 6h, 7d."
    )
    labels = profile.add_argument_group("which jobs")
    labels.add_argument("--namespace", help="Kubernetes namespace.")
    labels.add_argument("--pod", help="Pod name.")
    labels.add_argument("--pid", action="append", default=[], help="Process id as labelled (repeatable).")
    labels.add_argument("--instance", help="The exporter's scrape target (host:port).")
    labels.add_argument("--selector", default="", help='PromQL label matchers added to every query, e.g. job="alnair".')
    profile.add_argument(
        "-o", "--output", default="-", help="CSV or Parquet file by its suffix; - is CSV on stdout (default)."
    )
    profile.add_argument("--format", choices=("csv", "parquet"), help="Overrides the output's suffix.")
    profile.add_argument("-q", "--quiet", action="store_true", help="No progress on stderr.")
    return profile


def main(options: argparse.Namespace) -> None:
    if options.start is not None and options.last is not None:
        options_error("--start and --last both give the start: use one")
    try:
        began = time.monotonic()
        count = profile(options)
        if not options.quiet:
            print(f"{PROG}: {count} jobs to {options.output} in {time.monotonic() - began:.1f} s", file=sys.stderr)
    except ProfileError as e:
        options_error(str(e), e.exit_status)


def options_error(message: str, status: int = 2):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(status)


def profile(options: argparse.Namespace) -> int:
    selection = Selection(
        *time_range(options.start, options.end, options.last),
        namespace=options.namespace,
        pod=options.pod,
        pids=tuple(options.pid),
        instance=options.instance,
        raw=options.selector,
    )
    form = options.format or ("parquet" if options.output.endswith(".parquet") else "csv")
    prometheus = Prometheus(options.prometheus, options.timeout, options.max_answer_mib * MiB)
    prometheus.check()
    # Millions of samples become millions of small objects, none of them in a cycle: the cyclic collector would
    # walk them all again and again (a third of the run at 1,000 jobs).
    gc.disable()
    try:
        rows = job_rows(
            prometheus, selection, quiet=options.quiet, chosen_by_pod=bool(options.namespace or options.pod)
        )
    finally:
        gc.enable()
    write(rows, options.output, form)
    return len(rows)


def job_rows(prometheus: Prometheus, selection: Selection, quiet: bool, chosen_by_pod: bool) -> list[dict]:
    found = job_series.discover(prometheus, selection.info(), selection.start, selection.end)
    if not found:
        raise ProfileError(nothing_found(prometheus, selection))
    chosen = sorted({pid for _, pid in found}) if chosen_by_pod else None
    progress = (lambda line: None) if quiet else (lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True))
    nodes = job_series.fetch(
        prometheus, found, selection.process(chosen), selection.node(), selection.start, selection.end, progress
    )
    return job_series.rows(found, nodes)


def nothing_found(prometheus: Prometheus, selection: Selection) -> str:
    """Why no job was found: nothing at all in the range, or nothing the selectors match."""
    everything = Selection(selection.start, selection.end)
    if selection.info() and job_series.discover(prometheus, everything.info(), selection.start, selection.end):
        return f"no job matches {selection.describe()} from {selection.span()}"
    return f"no Alnair job in the range {selection.span()} (empty range)"
