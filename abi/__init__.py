"""The contract Alnair's writers and readers share, in one package both import and neither owns:
the shared-memory header (alnair_shm.h, the single source of truth) and its Python mirror, segment
naming, the consistent-read protocol and record parsers, and the dataset cache's Redis key schema."""

from pathlib import Path

HEADER = Path(__file__).resolve().parent / "alnair_shm.h"
