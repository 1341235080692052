"""`alnair`: command-line tools for a GPU node. `alnair top` on a terminal is a live screen; piped, one table."""

from __future__ import annotations

import argparse
import os
import sys
import time

from alnair.abi import naming
from alnair.commandline import OneLineParser, add_flag, duration, fail
from alnair.profiler import profile

from .node_gpus import NodeGpus
from .top import (
    IDLE_AFTER,
    SORT_KEYS,
    NodeReader,
    gpu_lines,
    header_line,
    kernel_lines,
    kernel_rows,
    rows,
    sorted_rows,
    table_lines,
)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="alnair", description="Alnair command-line tools for a GPU node.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    top = commands.add_parser(
        "top",
        help="live view of the node's GPUs (NVML) and its GPU and training processes (shared memory)",
        description="Per GPU (NVML, also when no writer runs): utilization, SM active (GPM, "
        "Hopper and later), memory bandwidth utilization, memory used and total. "
        "Per process: GPU, state (starting: no kernel launched yet; "
        "idle: none for --idle-after; cap:NN%, share:NN%: active under a compute "
        "cap or share, ALNAIR_COMPUTE_LIMIT or ALNAIR_COMPUTE_SHARE; turns:NN%: "
        "an older writer taking turns, NN its window's share; else active), "
        "kernel launches/s, GPU memory "
        "and limit, the contexts' own memory, what the limit charges, "
        "host-to-device and device-to-host copy bytes/s, GPU time % (its share of "
        "its GPUs over the interval, each moment of a shared GPU divided among the "
        "processes busy then), throttled %, "
        "data-stall %, steps/s. On a terminal it refreshes every interval "
        "(</> sort column, r reverse, q quit); piped, it prints one table.",
    )
    add_flag(top, "--shm.dir", default=naming.DEFAULT_DIR, help="Directory of the writers' segments.")
    top.add_argument("-d", "--interval", type=duration, default=1.0, help="Time between refreshes (default: 1s).")
    top.add_argument(
        "-s", "--sort", choices=SORT_KEYS, default="memory_used", help="Column to sort by (default: memory_used)."
    )
    top.add_argument("--ascending", action="store_true", help="Sort smallest first (default: largest first).")
    top.add_argument(
        "-k",
        "--kernels",
        type=int,
        default=0,
        metavar="N",
        help="Also show the N kernels launched most often, by name, per process and GPU (default: 0).",
    )
    top.add_argument(
        "--idle-after",
        type=duration,
        default=IDLE_AFTER,
        help="Seconds without a kernel launch before a process is idle (default: 60s).",
    )
    profile.add_parser(commands)
    return parser


def print_table(reader: NodeReader, gpus: NodeGpus, options: argparse.Namespace) -> None:
    """Two reads one interval apart, so the rates are real, then the GPUs' table, a blank line and the processes'
    (and with --kernels, a blank line and the kernels')."""
    before = reader.read()
    gpus.read()  # GPM's first sample: SM active is measured between two reads
    time.sleep(options.interval)
    now = reader.read()
    table = rows(now, before, options.idle_after)
    if gpus.problem:
        print(f"alnair top: {gpus.problem}", file=sys.stderr)
    else:
        print("\n".join([*gpu_lines(gpus.read()), ""]))
    print(header_line())
    for line in table_lines(sorted_rows(table, options.sort, not options.ascending)):
        print(line)
    if options.kernels:
        print("\n".join(["", *kernel_lines(kernel_rows(now, before, options.kernels))]))
    if reader.unreadable():
        print(
            f"alnair top: {reader.unreadable()} segments unreadable: run as root or in the writers' group",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    if options.command == "profile":
        return profile.main(options)
    if not os.path.isdir(options.shm_dir):
        fail("alnair top", f"--shm.dir: not a directory: {options.shm_dir}")
    if options.kernels < 0:
        fail("alnair top", f"--kernels: want a number of kernels, 0 or more: {options.kernels}")
    reader, gpus = NodeReader(options.shm_dir), NodeGpus()
    try:
        if sys.stdout.isatty() and sys.stdin.isatty():
            from .screen import TopScreen

            TopScreen(reader, gpus, options).run()
        else:
            print_table(reader, gpus, options)
    except KeyboardInterrupt:
        pass
    finally:
        gpus.close()


if __name__ == "__main__":
    main()
