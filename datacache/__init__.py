"""Alnair's dataset cache: training samples kept in Redis under the SHA-256 of their bytes, shared by
every job and dataset that holds the same content, read through a verifying, prefetching loader."""
from .dataset import CachedDataset
from .loader import CacheLoader
from .origin import DirectoryOrigin, Origin

__all__ = ["CachedDataset", "CacheLoader", "DirectoryOrigin", "Origin"]
