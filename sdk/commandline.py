"""The conventions every Alnair command shares: one-line errors that exit 2, flags with environment
fallbacks and their defaults in --help, Prometheus-style durations, and --version."""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
from collections.abc import Callable
from functools import cache
from importlib import metadata
from typing import NoReturn

DISTRIBUTION = "alnair-gpu"  # the name pip installs; the import name is alnair (PyPI's `alnair` is another project)


def install_command(extra: str) -> str:
    return f"pip install '{DISTRIBUTION}[{extra}]'"


@cache
def version() -> str:
    """The installed distribution's version: its metadata is the one place it is written."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "0+unknown"


def fail(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    sys.exit(2)


def main_of_extra(prog: str, side: str, extra: str, modules: set[str], load: Callable[[], Callable]) -> Callable:
    """The command's main, from load(); in an install without its extra, one line that says how to get it."""
    try:
        return load()
    except ImportError as e:
        if e.name not in modules:
            raise
        fail(prog, f"{side} is not installed (no module {e.name}): {install_command(extra)}")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit 2; every command has --version."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=f"%(prog)s {version()}")

    def error(self, message: str) -> NoReturn:
        fail(self.prog, message)

    def parse_args(self, args=None, namespace=None):
        return self.checked(super().parse_args(args, namespace))

    def checked(self, options: argparse.Namespace) -> argparse.Namespace:
        """options, unless a flag left at its default has an environment variable that does not parse."""
        for value in vars(options).values():
            if isinstance(value, BadEnvironment):
                self.error(value.message)
        return options


def env_name(flag: str) -> str:
    """--web.listen-address -> ALNAIR_WEB_LISTEN_ADDRESS"""
    return "ALNAIR_" + flag.lstrip("-").upper().replace(".", "_").replace("-", "_")


def flag_type(parse: Callable) -> Callable:
    """argparse shows only ArgumentTypeError's message; let parsers raise ValueError."""

    def checked(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    checked.__name__ = parse.__name__
    return checked


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


_DURATION_UNITS = {"y": 31536000, "w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
# Prometheus's own duration syntax: units largest first, each at most once.
_DURATION = re.compile("".join(f"(?:(\\d+){unit})?" for unit in _DURATION_UNITS))


def parse_duration_seconds(text: str) -> float:
    """Prometheus durations (500ms, 2s, 1m, 1h30m) or plain seconds (0.5), as seconds."""
    stripped = text.strip()
    match = _DURATION.fullmatch(stripped)
    if stripped and match:
        return sum(int(n) * scale for n, scale in zip(match.groups(), _DURATION_UNITS.values()) if n)
    try:
        seconds = float(stripped)
    except ValueError:
        raise ValueError(f"not a duration (like 500ms, 2s, 1m30s, or seconds): {text!r}") from None
    if not math.isfinite(seconds):
        raise ValueError(f"not a duration: {text!r}")
    return seconds


MAX_DURATION_SECONDS = 86400  # no interval or timeout of a node agent is longer; far longer overflows timers


@flag_type
def duration(text: str) -> float:
    """A duration flag's type: seconds, more than 0 and at most a day."""
    seconds = parse_duration_seconds(text)
    if not seconds > 0:
        raise ValueError(f"must be longer than 0: {text!r}")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"must be at most 1d: {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Seconds the way a duration flag takes them (1s, 500ms, 1m30s), for --help."""
    milliseconds = round(seconds * 1000)
    if milliseconds % 1000:
        return f"{milliseconds}ms"
    whole, parts = milliseconds // 1000, []
    for unit in ("d", "h", "m", "s"):
        count, whole = divmod(whole, int(_DURATION_UNITS[unit]))
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def int_between(minimum: int, maximum: float = math.inf) -> Callable:
    """An integer flag's type: whole numbers from `minimum` to `maximum`, both included."""
    allowed = f">= {minimum}" if maximum == math.inf else f"{minimum} to {maximum}"

    @flag_type
    def between(text: str) -> int:
        value = int(text)
        if not minimum <= value <= maximum:
            raise ValueError(f"must be {allowed}: {text!r}")
        return value

    return between


def int_at_least(minimum: int) -> Callable:
    """An integer flag's type: whole numbers from `minimum` up, for counts that bound no daemon's memory or work."""
    return int_between(minimum)


def one_of(*choices: str, aliases: dict[str, str] | None = None) -> Callable:
    """A word flag's type: one of `choices`, in any case; `aliases` maps older spellings to a choice."""
    allowed = ", ".join(choices[:-1]) + f" or {choices[-1]}"

    @flag_type
    def choice(text: str) -> str:
        word = text.strip().lower()
        word = (aliases or {}).get(word, word)
        if word not in choices:
            raise ValueError(f"must be {allowed}: {text!r}")
        return word

    return choice


def comma_separated(parse: Callable) -> Callable:
    """A list flag type: `a,b` gives [parse('a'), parse('b')], so one environment variable can hold many."""

    @flag_type
    def items(text: str) -> list:
        return [parse(item.strip()) for item in text.split(",") if item.strip()]

    items.__name__ = f"list of {parse.__name__}"
    return items


class RepeatedList(argparse.Action):
    """action= for a repeatable comma_separated flag: the flags' items replace the environment's list
    (flags win over the environment) instead of being added to it."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, self.dest)
        setattr(namespace, self.dest, [*([] if given is self.default else given), *values])


class BadEnvironment:
    """The default of a flag whose environment variable does not parse: reported by parse_args unless
    the flag itself is given (flags win over the environment)."""

    def __init__(self, message: str):
        self.message = message


def env_default(flag: str, parse: Callable, default):
    """The flag's default from its environment variable, checked like the flag; else `default`."""
    variable = env_name(flag)
    if variable not in os.environ:
        return default
    try:
        return parse(os.environ[variable])
    except (ValueError, argparse.ArgumentTypeError) as e:
        return BadEnvironment(f"{variable}: {e}")


def shown(default) -> str:
    """A default as one would type it."""
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default)) or "none"
    return str(default) if default != "" else '""'


def add_flag(parser, flag: str, *, type: Callable = str, default=None, help: str = "", **extra) -> None:
    """A flag (on a parser or an argument group) whose default comes from its environment variable,
    checked like the flag; --help shows the default and the variable."""
    dest = flag.lstrip("-").replace(".", "_").replace("-", "_")
    text = format_duration(default) if type is duration else shown(default)
    parser.add_argument(
        flag,
        dest=dest,
        type=type,
        default=env_default(flag, type, default),
        help=f"{help} (default: {text}) [env {env_name(flag)}]",
        **extra,
    )
