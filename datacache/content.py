"""What names cached bytes and what vouches for them when read back: the SHA-256 content address, and
a BLAKE3 check digest keyed by that address, the same guarantee for a quarter of SHA-256's CPU."""
from __future__ import annotations

import hashlib

from blake3 import blake3


def address(data: bytes) -> bytes:
    """The SHA-256 of `data`: the key its bytes are stored under, shared by every dataset that holds them."""
    return hashlib.sha256(data).digest()


def check_digest(data: bytes, address: bytes) -> bytes:
    """BLAKE3 of `data` keyed by its content address: a check digest vouches only for bytes stored under
    the address it was made with, so one left out of step with its manifest entry can never pass other bytes."""
    return blake3(data, key=address).digest()
