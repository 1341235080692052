"""The writers' side: the CUDA intercept library (C, LD_PRELOAD) and the Python intercept."""

from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
LIBRARY_NAME = "libalnair.so"


def library_path() -> Path:
    """Where the CUDA intercept library is, for LD_PRELOAD: the copy an installed
    package carries, else the source tree's build (`make -C intercept`)."""
    packaged = SOURCE_DIR / LIBRARY_NAME
    return packaged if packaged.is_file() else SOURCE_DIR / "build" / LIBRARY_NAME
