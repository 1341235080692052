"""Finding collectors: every factory registered under the `alnair.collectors` entry-point group, with
what it says of itself (help, default on or off, interval, flags)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from alnair.commandline import DISTRIBUTION as BUILT_IN_DISTRIBUTION

ENTRY_POINT_GROUP = "alnair.collectors"
NAME = re.compile(r"[a-z][a-z0-9_]*")  # it becomes --collector.NAME and a label value
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CollectorSpec:
    """A registered collector: its factory and the optional attributes docs/plugins.md lists."""

    name: str
    factory: Callable
    help: str = ""
    default_enabled: bool = True
    default_interval_seconds: float = 5.0
    add_arguments: Callable | None = None
    built_in: bool = False  # shipped with Alnair: its family names win over a plug-in's
    shared_arguments: Callable | None = None  # flags several collectors share: added once, by the first
    check_options: Callable | None = None  # options -> why they are unusable (exit 2 with it), or None

    @classmethod
    def of(cls, name: str, factory: Callable, built_in: bool = False) -> CollectorSpec:
        return cls(
            name,
            factory,
            str(getattr(factory, "help", "")),
            bool(getattr(factory, "default_enabled", True)),
            float(getattr(factory, "default_interval_seconds", 5.0)),
            getattr(factory, "add_arguments", None),
            built_in,
            getattr(factory, "shared_arguments", None),
            getattr(factory, "check_options", None),
        )


def load_collector(entry: EntryPoint) -> CollectorSpec | None:
    """One entry point's collector, or None (logged) if it is broken: a bad plug-in must not take the
    exporter down."""
    if not NAME.fullmatch(entry.name):
        log.error("collector entry point %r (%s): a name must match %s", entry.name, entry.value, NAME.pattern)
        return None
    try:
        factory = entry.load()
        if not callable(factory):
            raise TypeError(f"{type(factory).__name__} is not callable")
        built_in = entry.dist is not None and entry.dist.name == BUILT_IN_DISTRIBUTION
        return CollectorSpec.of(entry.name, factory, built_in)
    except Exception as e:  # any import-time error of a third-party package
        log.error("collector entry point %s (%s) failed to load: %s", entry.name, entry.value, e)
        return None


def discover_collectors(group: str = ENTRY_POINT_GROUP) -> list[CollectorSpec]:
    """Built-in collectors first, then plug-ins, each by name: the order in which family names are
    claimed when two collectors emit the same one."""
    found: dict[str, CollectorSpec] = {}
    for entry in entry_points(group=group):
        if entry.name in found:
            log.error("collector %r registered twice; keeping %s", entry.name, found[entry.name].factory.__module__)
            continue
        spec = load_collector(entry)
        if spec is not None:
            found[entry.name] = spec
    return sorted(found.values(), key=lambda s: (not s.built_in, s.name))
