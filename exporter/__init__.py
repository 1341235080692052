"""The Alnair exporter: collector registry, background sampling and the HTTP endpoint (the `exporter` extra)."""
from __future__ import annotations

import sys

# What the exporter side installs beyond the training side (pyproject.toml, extra `exporter`).
EXTRA_MODULES = {"prometheus_client", "yaml", "bcrypt", "psutil", "pynvml", "kubernetes", "redis", "hiredis"}


def main(argv: list[str] | None = None) -> None:
    """alnair-exporter: in an install without the exporter extra, one line that says how to get it."""
    try:
        from .main import main as run
    except ImportError as e:
        if e.name not in EXTRA_MODULES:
            raise
        print(f"alnair-exporter: error: the exporter side is not installed (no module {e.name}): "
              "pip install 'alnair[exporter]'", file=sys.stderr)
        sys.exit(2)
    run(argv)
