"""/healthz means "this exporter works": on a node without NVML and with the cache collector on but no Redis
URL, both collectors are unavailable, said on / and in metrics, and health stays 200 across their retries."""
from __future__ import annotations

import time
import urllib.error
import urllib.request

from support import parse_samples, scrape_text, wait_until

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def status(url: str) -> int:
    try:
        with OPENER.open(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_unavailable_collectors_never_fail_health_over_two_minutes(start_exporter):
    exporter = start_exporter("--collector.cache", "--collector.nvml")
    success = 'alnair_exporter_collector_success{collector="%s"}'
    samples = wait_until(lambda: (s := parse_samples(scrape_text(exporter.url))).get(success % "host") == 1 and s)
    assert samples[success % "cache"] == 0.0  # no --collector.cache.redis-url
    page = OPENER.open(exporter.url + "/", timeout=10).read().decode()
    assert "<td>cache</td><td>unavailable</td>" in page and "set --collector.cache.redis-url" in page
    deadline, answers = time.monotonic() + 120, []  # past two of their one-minute retries
    while time.monotonic() < deadline:
        answers.append(status(exporter.url + "/healthz"))
        time.sleep(1)
    assert set(answers) == {200} and len(answers) >= 60, answers
    assert exporter.log().count("collector cache unavailable") == 1  # said once, not at every retry
