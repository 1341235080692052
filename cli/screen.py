"""alnair top's interactive screen (curses): refreshes every interval, sorts by any column, like htop."""

from __future__ import annotations

import curses
import time

from .node_gpus import NodeGpus
from .top import (
    COLUMNS,
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

HELP = "</> sort column  r reverse  q quit"


class TopScreen:
    def __init__(self, reader: NodeReader, gpus: NodeGpus, options):
        self.reader = reader
        self.gpus = gpus
        self.interval = options.interval
        self.idle_after = options.idle_after
        self.kernel_limit = options.kernels
        self.sort_index = SORT_KEYS.index(options.sort)
        self.descending = not options.ascending
        self.before = reader.read()
        self.table = rows(self.before, {}, self.idle_after)
        self.kernels = kernel_rows(self.before, {}, self.kernel_limit)
        self.gpu_rows = gpus.read()

    def run(self) -> None:
        curses.wrapper(self._loop)

    def _loop(self, window) -> None:
        try:
            curses.curs_set(0)
        except curses.error:
            pass  # a terminal that cannot hide the cursor
        next_refresh = time.monotonic() + self.interval
        while True:
            self._draw(window)
            window.timeout(max(1, int((next_refresh - time.monotonic()) * 1000)))
            key = window.getch()
            if key in (ord("q"), ord("Q"), 27):
                return
            self._handle_key(key)
            if time.monotonic() >= next_refresh:
                self._refresh()
                next_refresh = time.monotonic() + self.interval

    def _handle_key(self, key: int) -> None:
        if key in (ord(">"), ord("."), curses.KEY_RIGHT):
            self.sort_index = (self.sort_index + 1) % len(SORT_KEYS)
        elif key in (ord("<"), ord(","), curses.KEY_LEFT):
            self.sort_index = (self.sort_index - 1) % len(SORT_KEYS)
        elif key in (ord("r"), ord("R")):
            self.descending = not self.descending

    def _refresh(self) -> None:
        now = self.reader.read()
        self.table = rows(now, self.before, self.idle_after)
        self.kernels = kernel_rows(now, self.before, self.kernel_limit)
        self.before = now
        self.gpu_rows = self.gpus.read()

    def _draw(self, window) -> None:
        height, width = window.getmaxyx()
        window.erase()
        key = SORT_KEYS[self.sort_index]
        order = "descending" if self.descending else "ascending"
        status = f"alnair top: {len(self.table)} processes  sort: {COLUMNS[self.sort_index].title} {order}  {HELP}"
        unreadable = self.reader.unreadable()
        if unreadable:
            status += f"  ({unreadable} segments unreadable: run as root or in the writers' group)"
        if self.gpus.problem:
            status += f"  ({self.gpus.problem})"
        lines = [(status, curses.A_BOLD)]
        gpu_table = gpu_lines(self.gpu_rows)
        if gpu_table:
            lines += [(gpu_table[0], curses.A_REVERSE), *[(line, curses.A_NORMAL) for line in gpu_table[1:]], ("", 0)]
        lines.append((header_line(), curses.A_REVERSE))
        lines += [(line, curses.A_NORMAL) for line in table_lines(sorted_rows(self.table, key, self.descending))]
        kernel_table = kernel_lines(self.kernels)
        if kernel_table:
            lines += [
                ("", 0),
                (kernel_table[0], curses.A_REVERSE),
                *[(line, curses.A_NORMAL) for line in kernel_table[1:]],
            ]
        for y, (text, attribute) in enumerate(lines[:height]):
            try:
                window.addnstr(y, 0, text, width - 1, attribute)
            except curses.error:
                pass  # the bottom-right cell of a full screen
        window.refresh()
