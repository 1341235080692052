"""Fixtures for the dataset cache: real redis-servers (support.start_redis), a real Redis Cluster
(support.redis_cluster, one per session) and origin directories."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from alnair.datacache import DirectoryOrigin
from support import cluster, redis_cluster, start_redis  # noqa: F401  (fixtures)


def sample_bytes(count: int, size: int = 4096, seed: int = 0) -> list[bytes]:
    generator = random.Random(seed)
    return [generator.randbytes(size) for _ in range(count)]


@pytest.fixture
def make_origin(tmp_path):
    """make_origin(samples, name) writes one file per sample and returns a DirectoryOrigin over them."""

    def make(samples: list[bytes], name: str = "origin") -> DirectoryOrigin:
        root: Path = tmp_path / name
        root.mkdir()
        for index, data in enumerate(samples):
            (root / f"{index:05d}.bin").write_bytes(data)
        return DirectoryOrigin(root)

    return make
