"""`alnair`: command-line tools for a GPU node. `alnair top` on a terminal is a live screen; piped, one table."""
from __future__ import annotations

import argparse
import os
import sys
import time

from alnair.collectors.shm import layout

from .top import SORT_KEYS, NodeReader, header_line, rows, sorted_rows, table_lines


def positive_seconds(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="alnair", description="Alnair command-line tools for a GPU node.")
    commands = parser.add_subparsers(dest="command", required=True)
    top = commands.add_parser("top", help="live view of the node's GPU and training processes, from shared memory",
                              description="Per process: GPU, kernel launches/s, GPU memory and limit, throttled %, "
                                          "data-stall %, steps/s. On a terminal it refreshes every interval "
                                          "(</> sort column, r reverse, q quit); piped, it prints one table.")
    top.add_argument("--shm-dir", default=os.environ.get("ALNAIR_SHM_DIR") or layout.DEFAULT_DIR,
                     help="directory of the writers' segments [env ALNAIR_SHM_DIR, default /dev/shm]")
    top.add_argument("-d", "--interval", type=positive_seconds, default=1.0, help="seconds between refreshes (default 1)")
    top.add_argument("-s", "--sort", choices=SORT_KEYS, default="memory_used", help="column to sort by (default memory_used)")
    top.add_argument("--ascending", action="store_true", help="sort smallest first")
    return parser


def print_table(reader: NodeReader, interval: float, sort_key: str, descending: bool) -> None:
    """Two reads one interval apart, so the rates are real, then one table."""
    before = reader.read()
    time.sleep(interval)
    table = rows(reader.read(), before)
    print(header_line())
    for line in table_lines(sorted_rows(table, sort_key, descending)):
        print(line)
    if reader.unreadable():
        print(f"alnair top: {reader.unreadable()} segments unreadable: run as root or in the writers' group", file=sys.stderr)


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    if not os.path.isdir(options.shm_dir):
        print(f"alnair top: not a directory: {options.shm_dir}", file=sys.stderr)
        sys.exit(2)
    reader = NodeReader(options.shm_dir)
    descending = not options.ascending
    try:
        if sys.stdout.isatty() and sys.stdin.isatty():
            from .screen import TopScreen

            TopScreen(reader, options.interval, options.sort, descending).run()
        else:
            print_table(reader, options.interval, options.sort, descending)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
