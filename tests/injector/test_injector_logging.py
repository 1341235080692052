"""alnair-injector logs as the exporter does (alnair.logs): --log.format logfmt (the default) or json, --log.level;
every line of the real webhook's log parses strictly, with what it said about each review."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path

import pytest

from injector_support import LIBRARY_HOST_PATH, POD_KIND, make_pod
from log_lines import records, source_line

INJECTOR = Path(__file__).resolve().parents[2] / "injector"


@pytest.mark.parametrize(
    "flags, log_format, level",
    [
        ((), "logfmt", "info"),
        (("--log.format=json", "--log.level=debug"), "json", "debug"),
    ],
    ids=["logfmt at info by default", "json at debug"],
)
def test_every_line_parses_with_what_the_webhook_said(start_injector, flags, log_format, level):
    since = datetime.datetime.now(datetime.timezone.utc)
    injector = start_injector(*flags)
    patch = json.loads(base64.b64decode(injector.review(make_pod())["patch"]))
    refusal = injector.review(make_pod(annotations={"alnair.io/memory-limit": "lots"}))["status"]["message"]
    unchanged = injector.review(make_pod(), operation="UPDATE")  # logged at debug only
    assert unchanged == {"uid": unchanged["uid"], "allowed": True}
    assert injector.post(b"{}", {"Content-Length": str(9 << 20)})[0] == 413
    assert injector.stop() == 0
    said = [
        (r["level"], r["source"], r["msg"])
        for r in records(injector.log(), log_format, since)
        if r["source"].split(":")[0] in ("main.py", "review.py", "server.py")
    ]
    update = (
        "debug",
        source_line(INJECTOR / "review.py", 'log.debug("not a pod'),
        f"not a pod's creation (UPDATE {POD_KIND}): allowed unchanged",
    )
    assert said == [
        (
            "info",
            source_line(INJECTOR / "main.py", 'log.info("listening on'),
            f"listening on 127.0.0.1:{injector.port} (https); library {LIBRARY_HOST_PATH}, segments /run/alnair/shm, "
            "Python intercept off by default",
        ),
        (
            "info",
            source_line(INJECTOR / "review.py", 'log.info("injected pod'),
            f"injected pod team-a/train-0 ({len(patch)} operations)",
        ),
        (
            "info",
            source_line(INJECTOR / "review.py", 'log.info("refused pod'),
            f"refused pod team-a/train-0: {refusal}",
        ),
        *([update] if level == "debug" else []),
        (
            "warn",
            source_line(INJECTOR / "server.py", 'log.warning("review request from'),
            f"review request from 127.0.0.1 refused: at most {8 << 20} bytes",
        ),
        ("info", source_line(INJECTOR / "main.py", 'log.info("shutting down")'), "shutting down"),
    ]
    assert '"' in refusal  # quoted in logfmt, and read back as it was
