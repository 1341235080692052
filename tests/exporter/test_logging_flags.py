"""--log.level and --log.format, as node_exporter has them, on the real exporter process: every line it writes parses
strictly as logfmt (the default) or JSON, with what its log calls said, their extras and tracebacks on the same line;
a level hides the lines below it; a bad value is one line and exit 2."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from log_lines import records, source_line
from support import env_with_path, free_port, install_distribution, wait_until

ROOT = Path(__file__).resolve().parents[2]
PROG = [sys.executable, "-m", "alnair.exporter"]
# A plug-in that logs at every level as it is built (on its collector's thread, in this order), then is quiet; a
# second entry point names what its module does not have, so loading it fails before the flags are read.
CHATTY = r"""
import logging

log = logging.getLogger("chatty")


class Chatty:
    def __init__(self, options):
        log.debug("debug from the plug-in")
        log.info("info from the plug-in")
        log.warning('a "quoted" word, a = sign, a tab\there, \u00e9, C:\\tmp and\na second line')
        log.error("an error with extras", extra={"pod": "team-a/train 0", "count": 3, "ready": False})
        try:
            raise ValueError("boom")
        except ValueError:
            log.exception("the last line")

    def collect(self):
        return []
"""
WARNING = 'a "quoted" word, a = sign, a tab\there, \u00e9, C:\\tmp and\na second line'
MAIN = ROOT / "exporter" / "main.py"
REGISTRY = ROOT / "exporter" / "registry.py"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture
def chatty(plugin_root) -> dict[str, str]:
    install_distribution(
        plugin_root,
        "chatty-plugin",
        {"chatty_plugin": CHATTY},
        {"chatty": "chatty_plugin:Chatty", "broken": "chatty_plugin:Missing"},
    )
    return env_with_path(plugin_root)


def answers(port: int) -> bool:
    """It serves HTTP: past start-up, its SIGTERM handler set."""
    try:
        with OPENER.open(f"http://127.0.0.1:{port}/", timeout=10) as reply:
            return reply.status == 200
    except OSError:
        return False


def run_exporter(tmp_path, env: dict[str, str], *args: str) -> tuple[str, int]:
    """The exporter with the chatty collector alone, until it serves and the plug-in's last line is logged, then
    SIGTERM: its log and its port."""
    port, log_path = free_port(), tmp_path / "exporter.log"
    shm = tmp_path / "shm"
    shm.mkdir()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                *PROG,
                f"--web.listen-address=127.0.0.1:{port}",
                f"--shm.dir={shm}",
                "--collector.disable-defaults",
                "--collector.chatty",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, **env},
        )
    try:
        wait_until(
            lambda: proc.poll() is not None or "the last line" in log_path.read_text() and answers(port), timeout=30
        )
    finally:
        proc.terminate()
        proc.wait(10)
    return log_path.read_text(), port


def plugin_lines(found: list[dict]) -> list[dict]:
    return [r for r in found if r["source"].startswith("chatty_plugin.py:")]


def at(text: str) -> str:
    """The source of the plug-in's line that holds text."""
    return f"chatty_plugin.py:{next(n for n, line in enumerate(CHATTY.splitlines(), 1) if text in line)}"


def expected_plugin_lines(*levels: str) -> list[tuple]:
    """What the plug-in logged at these levels, as (level, source, msg, extras); ... for a traceback."""
    return [
        line
        for line in [
            ("debug", at("log.debug("), "debug from the plug-in", {}),
            ("info", at("log.info("), "info from the plug-in", {}),
            ("warn", at("log.warning("), WARNING, {}),
            ("error", at("log.error("), "an error with extras", {"pod": "team-a/train 0", "count": 3, "ready": False}),
            ("error", at("log.exception("), "the last line", {"exception": ...}),
        ]
        if line[0] in levels
    ]


def summary(found: list[dict]) -> list[tuple]:
    """Each record as expected_plugin_lines has them, its traceback checked."""
    lines = []
    for record in found:
        extras = {k: v for k, v in record.items() if k not in ("time", "level", "source", "msg")}
        if "exception" in extras:
            trace = extras["exception"]
            assert trace.startswith("Traceback (most recent call last):\n") and trace.endswith("\nValueError: boom")
            extras["exception"] = ...
        lines.append((record["level"], record["source"], record["msg"], extras))
    return lines


def as_logfmt(lines: list[tuple]) -> list[tuple]:
    """Extras as logfmt carries them: text, booleans in lower case."""

    def text(value):
        return value if value is ... else str(value).lower() if isinstance(value, bool) else str(value)

    return [(level, source, msg, {k: text(v) for k, v in extras.items()}) for level, source, msg, extras in lines]


def test_logfmt_is_the_default_and_every_line_parses_exactly(tmp_path, chatty):
    since = datetime.datetime.now(datetime.timezone.utc)
    log, port = run_exporter(tmp_path, chatty)
    found = records(log, "logfmt", since)
    assert summary(plugin_lines(found)) == as_logfmt(expected_plugin_lines("info", "warn", "error"))
    exporters = [(r["level"], r["source"], r["msg"]) for r in found if not r["source"].startswith("chatty_plugin.py:")]
    assert exporters == [
        # Logged while the plug-ins loaded, before the flags were read: formatted as the rest.
        (
            "error",
            source_line(REGISTRY, "failed to load: %s"),
            "collector entry point broken (chatty_plugin:Missing) failed to load: module 'chatty_plugin' has no "
            "attribute 'Missing'",
        ),
        (
            "info",
            source_line(MAIN, 'log.info("listening on'),
            f"listening on 127.0.0.1:{port} (http), collectors: chatty",
        ),
        ("info", source_line(MAIN, 'log.info("shutting down")'), "shutting down"),
    ]
    # The plug-in's lines as written, after their time: quoted where they must be, escaped as strconv.Quote does.
    written = [line.split(" ", 1)[1] for line in log.splitlines() if " source=chatty_plugin.py:" in line]
    assert written[1] == (
        f'level=warn source={at("log.warning(")} msg="a \\"quoted\\" word, a = sign, a tab\\there, '
        '\u00e9, C:\\\\tmp and\\na second line"'
    )
    assert written[2] == (
        f'level=error source={at("log.error(")} msg="an error with extras" pod="team-a/train 0" count=3 ready=false'
    )
    assert written[3].startswith(
        f'level=error source={at("log.exception(")} msg="the last line" '
        'exception="Traceback (most recent call last):\\n  File '
    )


def test_json_is_one_object_a_line(tmp_path, chatty):
    since = datetime.datetime.now(datetime.timezone.utc)
    log, port = run_exporter(tmp_path, chatty, "--log.format=json")
    found = records(log, "json", since)
    assert summary(plugin_lines(found)) == expected_plugin_lines("info", "warn", "error")
    assert f"listening on 127.0.0.1:{port} (http), collectors: chatty" in [r["msg"] for r in found]
    assert (found[0]["level"], found[0]["source"]) == ("error", source_line(REGISTRY, "failed to load: %s"))
    assert found[-1]["msg"] == "shutting down"
    assert "\\u00e9" in log and "\u00e9" not in log  # ASCII: valid JSON in any locale


@pytest.mark.parametrize(
    "args, env, shown",
    [
        (["--log.level=debug"], {}, ("debug", "info", "warn", "error")),
        ([], {}, ("info", "warn", "error")),
        (["--log.level=warn"], {}, ("warn", "error")),
        (["--log.level=WARNING"], {}, ("warn", "error")),  # the level's older name, in any case, as before
        (["--log.level=error", "--log.format=json"], {}, ("error",)),
        ([], {"ALNAIR_LOG_LEVEL": "debug", "ALNAIR_LOG_FORMAT": "json"}, ("debug", "info", "warn", "error")),
        (["--log.level=error"], {"ALNAIR_LOG_LEVEL": "loud"}, ("error",)),  # the flag wins over a bad variable
    ],
    ids=["debug", "info by default", "warn", "warning", "error", "environment", "flag over environment"],
)
def test_a_level_hides_the_lines_below_it(tmp_path, chatty, args, env, shown):
    log_format = "json" if "--log.format=json" in args or env.get("ALNAIR_LOG_FORMAT") == "json" else "logfmt"
    found = records(run_exporter(tmp_path, {**chatty, **env}, *args)[0], log_format)
    expected = expected_plugin_lines(*shown)
    assert summary(plugin_lines(found)) == (expected if log_format == "json" else as_logfmt(expected))
    assert {r["level"] for r in found} <= set(shown)
    assert any(r["msg"].startswith("listening on") for r in found) == ("info" in shown)


@pytest.mark.parametrize(
    "args, env, line",
    [
        (["--log.level=loud"], {}, "argument --log.level: must be debug, info, warn or error: 'loud'"),
        (["--log.level", "trace"], {}, "argument --log.level: must be debug, info, warn or error: 'trace'"),
        (["--log.format=xml"], {}, "argument --log.format: must be logfmt or json: 'xml'"),
        (["--log.format"], {}, "argument --log.format: expected one argument"),
        ([], {"ALNAIR_LOG_LEVEL": "verbose"}, "ALNAIR_LOG_LEVEL: must be debug, info, warn or error: 'verbose'"),
        ([], {"ALNAIR_LOG_FORMAT": "text"}, "ALNAIR_LOG_FORMAT: must be logfmt or json: 'text'"),
        (["--no-such-flag", "--log.format=xml"], {}, "argument --log.format: must be logfmt or json: 'xml'"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2(args, env, line):
    result = subprocess.run([*PROG, *args], capture_output=True, text=True, timeout=60, env={**os.environ, **env})
    assert (result.returncode, result.stderr, result.stdout) == (2, f"alnair-exporter: error: {line}\n", "")


def test_help_shows_both_flags_their_values_and_defaults():
    help_text = subprocess.run([*PROG, "--help"], capture_output=True, text=True, timeout=60, check=True).stdout
    text = " ".join(help_text.split())
    for shown in (
        "--log.level LOG_LEVEL Only log messages at this level or above: debug, info, warn or error",
        "(default: info) [env ALNAIR_LOG_LEVEL]",
        "--log.format LOG_FORMAT Format of the log lines on stderr: logfmt",
        "or json",
        "(default: logfmt) [env ALNAIR_LOG_FORMAT]",
    ):
        assert shown in text, shown
