"""/healthz means "this exporter works": on a node without NVML and with the cache collector on but no Redis
URL, both collectors are unavailable, said on / and in metrics, and health stays 200 across their retries
(--collector.retry-interval, a minute by default, is 1 s here)."""

from __future__ import annotations

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


def test_unavailable_collectors_never_fail_health_across_their_retries(start_exporter):
    exporter = start_exporter(
        "--collector.cache", "--collector.nvml", "--collector.retry-interval=1s", "--log.level=debug"
    )
    success = 'alnair_exporter_collector_success{collector="%s"}'
    samples = wait_until(lambda: (s := parse_samples(scrape_text(exporter.url))).get(success % "host") == 1 and s)
    assert samples[success % "cache"] == 0.0  # no --collector.cache.redis-url
    page = OPENER.open(exporter.url + "/", timeout=10).read().decode()
    assert "<td>cache</td><td>unavailable</td>" in page and "set --collector.cache.redis-url" in page
    answers = []

    def retried_three_times() -> bool:
        answers.append(status(exporter.url + "/healthz"))
        log = exporter.log()
        return all(log.count(f"collector {name} still unavailable") >= 3 for name in ("cache", "nvml"))

    wait_until(retried_three_times, timeout=60, interval=0.2)
    assert set(answers) == {200} and len(answers) >= 2, answers  # asked before and during the retries
    assert exporter.log().count("collector cache unavailable") == 1  # said once, not at every retry
