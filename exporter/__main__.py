"""`python -m alnair.exporter` runs the exporter."""

from . import main

main()
