"""alnair-injector's flags follow alnair.commandline: a bad flag or file is one line and exit 2, --help shows every
default, a flag's environment variable is read only when the flag is absent."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from alnair.commandline import version
from injector_support import make_pod
from log_lines import records

PROG = [sys.executable, "-m", "alnair.injector"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*PROG, *args], capture_output=True, text=True, timeout=30, env={**os.environ, **(env or {})})


@pytest.fixture
def tls(tls_dir) -> list[str]:
    return [f"--tls.cert-file={tls_dir / 'server.crt'}", f"--tls.key-file={tls_dir / 'server.key'}"]


def test_help_shows_every_flag_with_its_default():
    out = run("--help").stdout
    for text in (
        "--web.listen-address",
        "(default: :8443)",
        "--tls.cert-file",
        "--tls.key-file",
        f"(default: /opt/alnair/{version()})",
        "(default: /run/alnair/shm)",
        "--python-intercept-default",
        "(default: false)",
        "(default: info)",
        "[env ALNAIR_LIBRARY_HOST_PATH]",
    ):
        assert text in " ".join(out.split()), text


def test_version():
    assert run("--version").stdout == f"alnair-injector {version()}\n"


@pytest.mark.parametrize(
    "args, line",
    [
        ((), "alnair-injector: error: --tls.cert-file is required (the API server calls webhooks over HTTPS only)"),
        (
            ("--web.listen-address=8443",),
            "alnair-injector: error: argument --web.listen-address: want host:port, got '8443'",
        ),
        (
            ("--library.host-path=opt/alnair",),
            "alnair-injector: error: argument --library.host-path: want an absolute path without '..', "
            "got 'opt/alnair'",
        ),
        (
            ("--shm.host-path=/run/../etc",),
            "alnair-injector: error: argument --shm.host-path: want an absolute path without '..', got '/run/../etc'",
        ),
        (
            ("--python-intercept-default=maybe",),
            "alnair-injector: error: argument --python-intercept-default: not a boolean: 'maybe'",
        ),
        (
            ("--log.level=loud",),
            "alnair-injector: error: argument --log.level: must be debug, info, warn or error: 'loud'",
        ),
        (("--no-such-flag",), "alnair-injector: error: unrecognized arguments: --no-such-flag"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(tls, args, line):
    result = run(*([] if not args else tls), *args)
    assert (result.returncode, result.stderr, result.stdout) == (2, line + "\n", "")


def test_a_key_that_is_not_the_certificates_is_one_line_and_exit_2(tls_dir, tmp_path):
    (tmp_path / "key.pem").write_text("not a key\n")
    result = run(f"--tls.cert-file={tls_dir / 'server.crt'}", f"--tls.key-file={tmp_path / 'key.pem'}")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"alnair-injector: error: cannot load --tls.cert-file {tls_dir / 'server.crt'} "
        f"with --tls.key-file {tmp_path / 'key.pem'}: "
    )


def test_a_missing_certificate_is_one_line_and_exit_2(tmp_path):
    result = run(f"--tls.cert-file={tmp_path / 'none.crt'}", f"--tls.key-file={tmp_path / 'none.key'}")
    assert (result.returncode, result.stderr) == (
        2,
        f"alnair-injector: error: cannot read --tls.cert-file {tmp_path / 'none.crt'}: No such file or directory\n",
    )


def test_a_busy_port_is_one_line_and_exit_2(tls):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(*tls, f"--web.listen-address=127.0.0.1:{port}")
    assert (result.returncode, result.stderr) == (
        2,
        f"alnair-injector: error: cannot listen on 127.0.0.1:{port}: Address already in use\n",
    )


def test_the_environment_fills_in_absent_flags_only(start_injector, tls_dir):
    """ALNAIR_SHM_HOST_PATH is read as the flag is absent; ALNAIR_LIBRARY_HOST_PATH loses to the flag."""
    injector = start_injector(
        tls_dir=tls_dir,
        env={"ALNAIR_SHM_HOST_PATH": "/var/run/alnair-segments", "ALNAIR_LIBRARY_HOST_PATH": "/not/used"},
    )
    volumes = {v["name"]: v["hostPath"]["path"] for v in injector.inject(make_pod())["spec"]["volumes"]}
    assert volumes == {"alnair-lib": "/opt/alnair/9.9.9", "alnair-shm": "/var/run/alnair-segments"}


def test_the_default_address_form_serves_every_interface_and_sigterm_stops_it(start_injector, tls_dir):
    injector = start_injector(tls_dir=tls_dir, host="")  # ":PORT", as the default ":8443"
    assert injector.healthy()  # reached at 127.0.0.1 through the dual-stack socket
    assert injector.stop() == 0
    assert records(injector.log(), "logfmt")[-1]["msg"] == "shutting down"
