"""One parser for the cache's URLs: the dataset cache and the cache collector accept exactly the same ones."""

from __future__ import annotations

import argparse

import pytest

from alnair.abi import cache_urls
from alnair.collectors.cache import redis_url_list
from alnair.datacache import CachedDataset, DirectoryOrigin

GOOD = [
    "redis://localhost:6379/0",
    "rediss://u:p@cache.ml:6380",
    "unix:///run/redis.sock",
    # nothing listens there: nothing is asked at construction
    "redis+cluster://u:p%40ss@127.0.0.1:1,[::1]:2",
]
BAD = [
    "http://cache:6379",
    "redis://",
    "redis+cluster://",
    "redis+cluster://host",
    "redis+cluster://host:port",
    "redis+cluster://host:70000",
]


def test_a_cluster_url_gives_its_seeds_and_decoded_credentials():
    assert cache_urls.parse_cluster("redis+cluster://u:p%40ss@10.0.0.1:7000,[::1]:7001") == cache_urls.ClusterUrl(
        [("10.0.0.1", 7000), ("::1", 7001)], "u", "p@ss"
    )
    assert [cache_urls.address(n) for n in cache_urls.parse_cluster("redis+cluster://a:1,[::1]:2").seeds] == [
        "a:1",
        "[::1]:2",
    ]


@pytest.mark.parametrize("url", GOOD)
def test_both_sides_accept_a_good_url(url, tmp_path):
    assert redis_url_list(url) == [url]
    assert CachedDataset(url, "train", DirectoryOrigin(tmp_path)).redis_url == url


@pytest.mark.parametrize("url", BAD)
def test_both_sides_refuse_a_bad_url_with_the_same_reason(url, tmp_path):
    with pytest.raises(ValueError) as parsed:
        cache_urls.check(url)
    with pytest.raises(argparse.ArgumentTypeError) as flag:
        redis_url_list(url)
    with pytest.raises(ValueError) as dataset:
        CachedDataset(url, "train", DirectoryOrigin(tmp_path))
    assert str(parsed.value) in str(flag.value) and str(dataset.value) == str(parsed.value)
