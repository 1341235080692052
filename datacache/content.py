"""What names cached bytes and what vouches for them when read back: the SHA-256 content address, and
an XXH3-128 check digest seeded by that address, which catches any corruption for a tenth of BLAKE3's CPU.

Redis is the trust anchor either way: the manifest that maps a sample to its SHA-256 lives there too, so a
hostile writer to Redis could rewrite the address as easily as the bytes. What a check must catch is bytes
that are not the sample's (bit rot, a truncated or foreign write, a value out of step with its manifest);
a 128-bit hash misses such an accident with probability 2^-128. docs/datacache.md has the reasoning."""

from __future__ import annotations

import hashlib

import xxhash


def address(data: bytes) -> bytes:
    """The SHA-256 of `data`: the key its bytes are stored under, shared by every dataset that holds them."""
    return hashlib.sha256(data).digest()


def check_digest(data: bytes, address: bytes) -> bytes:
    """XXH3-128 of `data` seeded by its content address: a check digest vouches only for bytes stored under
    the address it was made with, so one left out of step with its manifest entry never passes other bytes."""
    return xxhash.xxh3_128_digest(data, seed=int.from_bytes(address[:8], "little"))
