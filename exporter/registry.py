"""Finding collectors: every class registered under the `alnair.collectors` entry-point group."""
from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, entry_points

from .collector import Collector

ENTRY_POINT_GROUP = "alnair.collectors"
log = logging.getLogger(__name__)


def load_collector(entry: EntryPoint) -> type[Collector] | None:
    """One entry point's class, or None (logged) if it is broken: a bad plug-in
    must not take the exporter down."""
    try:
        cls = entry.load()
    except Exception as e:  # any import-time error of a third-party package
        log.error("collector entry point %s (%s) failed to load: %s", entry.name, entry.value, e)
        return None
    if not (isinstance(cls, type) and issubclass(cls, Collector)) or getattr(cls, "name", None) != entry.name:
        log.error("collector entry point %s (%s) is not a Collector named %r", entry.name, entry.value, entry.name)
        return None
    return cls


def discover_collectors(group: str = ENTRY_POINT_GROUP) -> list[type[Collector]]:
    found: dict[str, type[Collector]] = {}
    for entry in entry_points(group=group):
        if entry.name in found:
            log.error("collector %r registered twice; keeping %s", entry.name, found[entry.name].__module__)
            continue
        cls = load_collector(entry)
        if cls is not None:
            found[entry.name] = cls
    return [found[name] for name in sorted(found)]
