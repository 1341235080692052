"""alnair-injector: the mutating admission webhook that puts Alnair's intercepts into opted-in pods
(docs/injection.md). Its one dependency is aiohttp (the `injector` extra); it imports neither the exporter nor
the intercept."""

from __future__ import annotations

from alnair.commandline import main_of_extra


def main(argv: list[str] | None = None) -> None:
    """alnair-injector: in an install without the injector extra, one line that says how to get it."""
    main_of_extra("alnair-injector", "the injector's server", "injector", {"aiohttp"}, _load)(argv)


def _load():
    from .main import main

    return main
