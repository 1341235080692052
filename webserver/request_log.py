"""aiohttp's server log, given to it as its logger: a request it cannot parse becomes one warning line naming the
client and the problem. aiohttp would log it with a traceback, or at debug level when a connection's first bytes
are not HTTP at all; other errors keep aiohttp's words and traceback."""

from __future__ import annotations

import logging

from aiohttp.http import HttpProcessingError

MAX_PROBLEM_CHARS = 200  # the parser quotes the client's bytes: a line stays short whatever it sent


def one_line(text: str) -> str:
    """text on one line of printable characters, the rest escaped, at most MAX_PROBLEM_CHARS of it."""
    text = " ".join(text.split())[:MAX_PROBLEM_CHARS]
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


class RequestLog(logging.LoggerAdapter):
    def log(self, level, msg, *args, exc_info=None, **kwargs) -> None:
        if isinstance(exc_info, HttpProcessingError):
            client = args[0] if args else "?"  # aiohttp's "Error handling request from %s"
            self.logger.warning("malformed request from %s: %s", client, one_line(exc_info.message))
        else:
            super().log(level, msg, *args, exc_info=exc_info, **kwargs)
