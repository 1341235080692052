"""Reading a daemon's log as a log pipeline would (alnair.logs): a strict logfmt parser, JSON lines, and the checks
every line passes whatever its format: time, level, source and msg first, each of the right form."""

from __future__ import annotations

import datetime
import json
import re

FIXED = ["time", "level", "source", "msg"]
LEVELS = ["debug", "info", "warn", "error"]
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
SOURCE = re.compile(r"[\w.<>-]+\.py:[1-9]\d*")
# Go's strconv.Quote escapes; anything else after a backslash is refused.
ESCAPE = r'\\(?:["\\abfnrtv]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})'
SIMPLE_ESCAPES = {'"': '"', "\\": "\\", "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
# A bare key or value: no space, '=', '"' or backslash, nor control characters (printable is checked apart).
BARE = r'[^\s="\\\x00-\x1f\x7f]+'
PAIR = re.compile(rf'({BARE})=(?:"((?:[^"\\\x00-\x1f\x7f]|{ESCAPE})*)"|({BARE}))')


def unescape(quoted: str) -> str:
    def one(match: re.Match) -> str:
        code = match.group()[1:]
        return SIMPLE_ESCAPES[code] if len(code) == 1 else chr(int(code[1:], 16))

    return re.sub(ESCAPE, one, quoted)


def parse_logfmt(line: str) -> list[tuple[str, str]]:
    """key=value pairs separated by one space, nothing before, between or after; a value bare or in double quotes
    with only strconv.Quote's escapes; every character printable, else escaped. ValueError for anything else."""
    pairs, position = [], 0
    while True:
        match = PAIR.match(line, position)
        if match is None:
            raise ValueError(f"not logfmt at {position}: {line!r}")
        key, quoted, bare = match.groups()
        raw = key + (bare if quoted is None else quoted)
        if not raw.isprintable():
            raise ValueError(f"an unprintable character not escaped: {line!r}")
        pairs.append((key, bare if quoted is None else unescape(quoted)))
        position = match.end()
        if position == len(line):
            return pairs
        if line[position] != " ":
            raise ValueError(f"no space after a pair at {position}: {line!r}")
        position += 1


def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)


def records(text: str, log_format: str, since: datetime.datetime | None = None) -> list[dict[str, object]]:
    """Each line of a log, parsed strictly in its format: its keys in order, time, level, source and msg first.
    Time is RFC 3339 in UTC with milliseconds, from `since` (whole seconds) to now."""
    assert text.endswith("\n"), text  # and not empty
    found = []
    for line in text[:-1].split("\n"):  # lines as a pipeline splits them: at \n alone
        if log_format == "logfmt":
            record = unique(parse_logfmt(line))
        else:
            record = json.loads(line, object_pairs_hook=unique)
            assert line == json.dumps(record, separators=(",", ":")), line  # one compact object, ASCII only
        assert list(record)[:4] == FIXED, line
        assert all(isinstance(record[key], str) for key in FIXED), line
        assert TIME.fullmatch(record["time"]) and record["level"] in LEVELS and SOURCE.fullmatch(record["source"]), line
        when = datetime.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
        assert when <= datetime.datetime.now(datetime.timezone.utc), line
        assert since is None or since.replace(microsecond=0) <= when, line
        found.append(record)
    return found


def source_line(path, text: str) -> str:
    """file.py:N, N the line of path where text begins (once): a call's opening parenthesis may end its line, as the
    formatter wraps a long call (`log.info("listening on` finds `log.info(` then the string on the next line), and a
    log record names the line of the call's start."""
    source = path.read_text()
    starts = [m.start() for m in re.finditer(re.escape(text).replace(r"\(", r"\(\s*"), source)]
    assert len(starts) == 1, (path, text, starts)
    line = source.count("\n", 0, starts[0]) + 1
    return f"{path.name}:{line}"


def logged(text: str) -> str:
    """The messages of a log (logfmt, or JSON lines), one a line as they were said: what tests look for in them."""
    return "\n".join(record["msg"] for record in records(text, "json" if text.startswith("{") else "logfmt"))
