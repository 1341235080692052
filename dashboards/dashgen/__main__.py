"""`python -m dashgen` writes every generated file; `--check` writes nothing and exits 1 naming the
files that differ from what the code generates (as CI's test does)."""

from __future__ import annotations

import argparse
import sys

from .outputs import ROOT, outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report the files that are not current")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        target = ROOT / path
        if target.exists() and target.read_text() == text:
            continue
        stale.append(path)
        if not args.check:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
