"""The end-to-end tests' shared fixture: a real Prometheus, test_prometheus_scrape.py's."""

import test_prometheus_scrape

prometheus = test_prometheus_scrape.prometheus
