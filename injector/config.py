"""alnair-injector's flags, each also read from ALNAIR_<FLAG> when the flag is not given (alnair.commandline's
conventions: one-line errors that exit 2, every default in --help)."""

from __future__ import annotations

import argparse
import posixpath
from typing import NoReturn

from alnair import commandline, logs
from alnair.commandline import OneLineParser, add_flag, flag_type, parse_bool, version

PROG = "alnair-injector"
DEFAULT_LISTEN = ":8443"
DEFAULT_SHM_HOST_PATH = "/run/alnair/shm"


def fail(message: str) -> NoReturn:
    commandline.fail(PROG, message)


@flag_type
def listen_address(text: str) -> tuple[str, int]:
    """host:port, [v6]:port or :port (every interface), as the exporter's --web.listen-address."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"want host:port, got {text!r}")
    return host.strip("[]"), int(port)


@flag_type
def host_path(text: str) -> str:
    """A node path for a hostPath volume: absolute and without '..', as the API server requires of hostPath."""
    if not text.startswith("/") or ".." in text.split("/"):
        raise ValueError(f"want an absolute path without '..', got {text!r}")
    return posixpath.normpath(text)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Alnair's mutating admission webhook: puts the CUDA and Python "
        "intercepts into the pods it is sent (docs/injection.md).",
    )
    add_flag(
        parser,
        "--web.listen-address",
        type=listen_address,
        default=DEFAULT_LISTEN,
        help="Address to serve HTTPS on (POST /mutate, GET /healthz).",
    )
    add_flag(
        parser,
        "--tls.cert-file",
        default="",
        help="Serving certificate (PEM, chain included); required. Read again for new connections when it changes.",
    )
    add_flag(parser, "--tls.key-file", default="", help="Its private key (PEM); required.")
    add_flag(
        parser,
        "--library.host-path",
        type=host_path,
        default=f"/opt/alnair/{version()}",
        help="Node directory holding lib/libalnair.so and python/, mounted read-only at /opt/alnair.",
    )
    add_flag(
        parser,
        "--shm.host-path",
        type=host_path,
        default=DEFAULT_SHM_HOST_PATH,
        help="Node directory of the shared-memory segments (the exporter's --shm.dir), mounted at /run/alnair/shm.",
    )
    add_flag(
        parser,
        "--python-intercept-default",
        type=flag_type(parse_bool),
        default=False,
        nargs="?",
        const=True,
        help="Turn the Python intercept on in pods without an alnair.io/python-intercept annotation.",
    )
    logs.add_flags(parser)
    return parser


def parse_options(argv: list[str] | None) -> argparse.Namespace:
    options = build_parser().parse_args(argv)
    for flag in ("--tls.cert-file", "--tls.key-file"):
        if not getattr(options, flag[2:].replace(".", "_").replace("-", "_")):
            fail(f"{flag} is required (the API server calls webhooks over HTTPS only)")
    return options
