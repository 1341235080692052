"""`python -m alnair.exporter` runs the exporter."""
from .main import main

main()
