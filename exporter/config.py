"""Command-line flags, each also settable as ALNAIR_<FLAG> in the environment; bad input exits 2 with one line."""
from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Callable, Iterable, NoReturn

from .collector import Collector

PROG = "alnair-exporter"
DEFAULT_LISTEN = ":9876"


def fail(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage dump) and exit 2."""

    def error(self, message: str) -> NoReturn:
        fail(message)


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


@flag_type
def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:  # also rejects NaN
        raise ValueError(f"must be > 0: {text!r}")
    return value


@flag_type
def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError(f"must be >= 0: {text!r}")
    return value


@flag_type
def parse_listen_address(text: str) -> tuple[str, int]:
    """host:port, [v6]:port or :port (all interfaces)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"want host:port, got {text!r}")
    return host.strip("[]"), int(port)


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


def env_default(flag: str, parse: Callable, default):
    """The flag's default from its environment variable, checked like the flag; else `default`."""
    variable = env_name(flag)
    if variable not in os.environ:
        return default
    try:
        return parse(os.environ[variable])
    except (ValueError, argparse.ArgumentTypeError) as e:
        fail(f"{variable}: {e}")


def add_flag(parser: argparse.ArgumentParser, flag: str, *, type: Callable = str, default=None, help: str = "", **extra) -> None:
    """A flag whose default comes from its environment variable, checked like the flag."""
    dest = flag.lstrip("-").replace(".", "_").replace("-", "_")
    parser.add_argument(flag, dest=dest, type=type, default=env_default(flag, type, default),
                        help=f"{help} [env {env_name(flag)}]", **extra)


def add_collector_flags(parser: argparse.ArgumentParser, collector: type[Collector]) -> None:
    flag = f"--collector.{collector.name}"
    dest = f"collector_{collector.name}"
    enabled = env_default(flag, parse_bool, collector.default_enabled)
    group = parser.add_argument_group(f"collector {collector.name}", collector.help)
    group.add_argument(flag, dest=dest, action="store_true", default=None, help=f"Enable the {collector.name} collector (default: {enabled}) [env {env_name(flag)}]")
    group.add_argument(f"--no-collector.{collector.name}", dest=dest, action="store_false", help=f"Disable the {collector.name} collector.")
    parser.set_defaults(**{f"default_{dest}": enabled})
    add_flag(group, f"--collector.{collector.name}.interval", type=positive_float, default=collector.default_interval_seconds, help="Seconds between samples.")
    collector.add_arguments(group)


def build_parser(collectors: Iterable[type[Collector]]) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description="Alnair: GPU and AI workload metrics for Prometheus.")
    add_flag(parser, "--web.listen-address", type=parse_listen_address, default=parse_listen_address(DEFAULT_LISTEN), help="Address to serve /metrics on.")
    add_flag(parser, "--web.config.file", default="", help="exporter-toolkit web config (TLS, basic auth).")
    add_flag(parser, "--web.max-requests", type=non_negative_int, default=40, help="Concurrent scrapes served at most; 0 = no limit.")
    add_flag(parser, "--web.telemetry-path", default="/metrics", help="Path of the metrics endpoint.")
    add_flag(parser, "--node.name", default=os.environ.get("NODE_NAME") or socket.gethostname(), help="Node name (Kubernetes downward API).")
    add_flag(parser, "--shm.dir", default="/dev/shm", help="Directory of the writers' shared-memory segments.")
    add_flag(parser, "--path.procfs", default="/proc", help="procfs mount point (the host's /proc in a DaemonSet).")
    add_flag(parser, "--log.level", type=str.lower, default="info", help="debug, info, warning or error.")
    add_flag(parser, "--collector.disable-defaults", type=flag_type(parse_bool), default=False, nargs="?", const=True,
             help="Disable every collector not enabled by a flag.")
    for collector in collectors:
        add_collector_flags(parser, collector)
    return parser


def enabled_collectors(options: argparse.Namespace, collectors: Iterable[type[Collector]]) -> list[type[Collector]]:
    chosen = []
    for collector in collectors:
        explicit = getattr(options, f"collector_{collector.name}")
        default = False if options.collector_disable_defaults else getattr(options, f"default_collector_{collector.name}")
        if default if explicit is None else explicit:
            chosen.append(collector)
    return chosen


def parse_options(argv: list[str] | None, collectors: list[type[Collector]]) -> argparse.Namespace:
    options = build_parser(collectors).parse_args(argv)
    if options.log_level not in ("debug", "info", "warning", "error"):
        fail(f"--log.level: unknown level {options.log_level!r}")
    if not options.web_telemetry_path.startswith("/"):
        fail(f"--web.telemetry-path must start with '/': {options.web_telemetry_path!r}")
    for path_flag, path in (("--shm.dir", options.shm_dir), ("--path.procfs", options.path_procfs)):
        if not os.path.isdir(path):
            fail(f"{path_flag}: not a directory: {path}")
    options.procfs = options.path_procfs
    return options
