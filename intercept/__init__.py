"""The writers' side: the shared-memory ABI header and the C sources built from it."""
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
ABI_HEADER = SOURCE_DIR / "alnair_shm.h"
