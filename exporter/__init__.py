"""The Alnair exporter: collector registry, background sampling and the HTTP endpoint (the `exporter` extra)."""

from __future__ import annotations

from alnair.commandline import main_of_extra

# What the exporter side installs beyond the training side (pyproject.toml, extra `exporter`).
EXTRA_MODULES = {"prometheus_client", "yaml", "bcrypt", "psutil", "pynvml", "kubernetes", "redis", "hiredis", "aiohttp"}


def main(argv: list[str] | None = None) -> None:
    """alnair-exporter: in an install without the exporter extra, one line that says how to get it."""
    main_of_extra("alnair-exporter", "the exporter side", "exporter", EXTRA_MODULES, _load)(argv)


def _load():
    from .main import main

    return main
