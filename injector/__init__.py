"""alnair-injector: the mutating admission webhook that puts Alnair's intercepts into opted-in pods
(docs/injection.md). Standard library only; it imports neither the exporter nor the intercept."""
from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    from .main import main as run

    run(argv)
