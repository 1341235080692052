"""How Alnair's daemons log: --log.level and --log.format as node_exporter has them, one line a record on stderr.

    time=2026-12-05T10:11:12.123Z level=info source=main.py:68 msg="listening on :9876" key=value
    {"time":"2026-12-05T10:11:12.123Z","level":"info","source":"main.py:68","msg":"listening on :9876","key":"value"}

Every logger's records go through the root logger's one handler, so log calls stay plain `logging` calls; what
they pass as `extra` follows msg as keys of its own, and a traceback is the key `exception`. A line never
breaks: logfmt quotes and escapes (Go's strconv.Quote), JSON escapes.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from typing import TextIO

from .commandline import OneLineParser, add_flag, one_of

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
FORMATS = ("logfmt", "json")
FIXED_KEYS = ("time", "level", "source", "msg")
# A LogRecord's own attributes; any other was passed as `extra`.
_RECORD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}


def add_flags(parser: argparse.ArgumentParser) -> None:
    """--log.level and --log.format (ALNAIR_LOG_LEVEL, ALNAIR_LOG_FORMAT): what a bad value says, and --help."""
    add_flag(
        parser,
        "--log.level",
        type=one_of(*LEVELS, aliases={"warning": "warn"}),
        default="info",
        help="Only log messages at this level or above: debug, info, warn or error (warning is read as warn).",
    )
    add_flag(
        parser,
        "--log.format",
        type=one_of(*FORMATS),
        default="logfmt",
        help="Format of the log lines on stderr: logfmt (time=... level=... source=... msg=...) or json "
        "(one object a line).",
    )


def configure(prog: str, argv: list[str] | None, stream: TextIO | None = None) -> argparse.Namespace:
    """Reads the log flags (or their environment variables) out of argv, before and apart from the command's other
    flags, and logs as they say from then on: what is logged while the rest are read (a plug-in that fails to load)
    is formatted as the rest. A bad value exits 2 with one line, as every bad flag does."""
    parser = OneLineParser(prog=prog, add_help=False)
    add_flags(parser)
    options = parser.checked(parser.parse_known_args(argv)[0])
    handler = _Handler(stream)  # stderr when None
    handler.setFormatter(LogfmtFormatter() if options.log_format == "logfmt" else JsonFormatter())
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:  # an earlier configure()'s; others' stay
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[options.log_level])
    logging.captureWarnings(True)  # warnings.warn's lines, formatted too
    return options


def timestamp(created: float) -> str:
    """RFC 3339 in UTC with milliseconds: 2026-12-05T10:11:12.123Z"""
    seconds = math.floor(created)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{int((created - seconds) * 1000):03d}Z"


def level_name(levelno: int) -> str:
    """debug, info, warn or error (CRITICAL is error, as Go's levels have nothing above)."""
    for name in ("error", "warn", "info"):
        if levelno >= LEVELS[name]:
            return name
    return "debug"


class _Handler(logging.StreamHandler):
    """The handler configure() installs."""


class _Formatter(logging.Formatter):
    def fields(self, record: logging.LogRecord) -> dict[str, object]:
        fields: dict[str, object] = {
            "time": timestamp(record.created),
            "level": level_name(record.levelno),
            "source": f"{record.filename}:{record.lineno}",
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES:
                fields[f"extra.{key}" if key in FIXED_KEYS else key] = value
        if record.exc_info:
            fields["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            fields["stack"] = self.formatStack(record.stack_info)
        return fields


class LogfmtFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{logfmt_key(key)}={logfmt_value(value)}" for key, value in self.fields(record).items())


class JsonFormatter(_Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {
            key: str(value) if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in self.fields(record).items()
        }
        # ASCII (non-ASCII characters as \u escapes): valid JSON whatever the stream's encoding
        return json.dumps(fields, default=str, separators=(",", ":"))


def _bare(ch: str) -> bool:
    """Whether ch may stand outside quotes: printable, and no space, '=', '"' or backslash."""
    return ch.isprintable() and not ch.isspace() and ch not in '="\\'


def logfmt_key(key: str) -> str:
    """A key as logfmt has them: each character that could not stand outside quotes becomes '_'."""
    return "".join(ch if _bare(ch) else "_" for ch in key) or "_"


def logfmt_value(value: object) -> str:
    """value bare where it can be, as Go's slog writes it; else in double quotes, escaped as strconv.Quote does
    (a backslash too is quoted, so that no reader takes it for an escape)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = "null" if value is None else str(value)
    if text and all(map(_bare, text)):
        return text
    return '"' + "".join(_ESCAPES.get(ch) or (ch if ch.isprintable() else _escaped(ord(ch))) for ch in text) + '"'


def _escaped(code: int) -> str:
    if code < 0x80:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
