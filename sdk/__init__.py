"""Alnair's public API for training programs: `alnair.phase`, `alnair.counter`; `import alnair.auto` turns on the
intercept.

The rest of the namespace is the exporter and its tools (alnair.exporter, alnair.collectors, ...);
importing this package starts nothing.
"""

from __future__ import annotations

__all__ = ["counter", "phase", "__version__"]


def __getattr__(name: str):
    # Imported on first use, so `import alnair.exporter` never loads the training-side code.
    if name == "__version__":
        from alnair.commandline import version

        return version()
    if name in __all__:
        from alnair.intercept import api

        return getattr(api, name)
    raise AttributeError(f"module 'alnair' has no attribute {name!r}")
