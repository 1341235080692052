"""Alnair's dataset cache: training samples kept in Redis under the SHA-256 of their bytes, shared by
every job and dataset that holds the same content, read through a verifying, prefetching loader."""

import importlib

from alnair.commandline import install_command

# The modules of the `cache` extra (pyproject.toml: redis[hiredis], xxhash) that the package imports, checked
# before any of its modules is imported: an install without the extra gets one line saying how to install it,
# not a bare ModuleNotFoundError from whichever module happens to come first.
EXTRA_MODULES = ("redis", "hiredis", "xxhash")
INSTALL = install_command("cache")


def _absent(modules: tuple[str, ...]) -> list[str]:
    absent = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:  # the module is there but something it imports is not: its own error says what
                raise
            absent.append(module)
    return absent


if _missing := _absent(EXTRA_MODULES):
    raise ModuleNotFoundError(
        f"alnair.datacache needs the cache extra (no module {', '.join(_missing)}): {INSTALL}", name=_missing[0]
    )

from .dataset import CachedDataset  # noqa: E402  (after the check above)
from .loader import CacheLoader  # noqa: E402
from .origin import DirectoryOrigin, Origin  # noqa: E402

__all__ = ["CachedDataset", "CacheLoader", "DirectoryOrigin", "Origin"]
