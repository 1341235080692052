"""`python -m chartgen` (with helm/ and dashboards/ on the path; `make chart`) writes helm/alnair/templates/_rules.tpl;
`--check` writes nothing and exits 1 when the committed file is not what dashgen generates."""

from __future__ import annotations

import argparse
import sys

from .rules import OUTPUT, template


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chartgen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="only report whether the file is current")
    args = parser.parse_args(argv)
    text = template()
    current = OUTPUT.exists() and OUTPUT.read_text() == text
    if args.check:
        if not current:
            print(f"stale {OUTPUT}")
        return 0 if current else 1
    if not current:
        OUTPUT.write_text(text)
        print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
