# `make test` sets up a fresh Debian machine and runs both suites, the product's and then the dataset lab's
# (README, .ci/run).
PYTHON ?= python3
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

test: test-product test-dataset

# The product (alnair-gpu): tests/, which imports none of the lab.
test-product: system-packages
	$(PYTHON) -m pip install -q -e '.[test]'
	$(MAKE) -s -C intercept
	$(PYTHON) -m pytest

# The dataset lab (alnair-dataset, dataset/): dataset/tests/, on the product it depends on.
test-dataset: system-packages
	$(PYTHON) -m pip install -q -e . -e './dataset[test]'
	$(MAKE) -s -C intercept
	$(PYTHON) -m pytest dataset/tests

# The tests start a real Prometheus and a real redis-server, and read a listening socket's backlog with ss;
# tests/image builds and runs the images with rootful podman and runc on a base that debootstrap makes.
system-packages:
	@command -v prometheus >/dev/null && command -v promtool >/dev/null && command -v redis-server >/dev/null && \
		command -v ss >/dev/null && command -v podman >/dev/null && command -v runc >/dev/null && \
		command -v debootstrap >/dev/null || \
		$(SUDO) sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus redis-server iproute2 podman runc debootstrap debian-archive-keyring'

# Grafana dashboards, rules and docs/dashboards.md from dashboards/dashgen (needs the dashboards extra), and the
# chart's rules template made from the same code, so the two never disagree.
dashboards:
	PYTHONPATH=dashboards $(PYTHON) -m dashgen
	$(MAKE) -s chart

# The chart's generated rules template (helm/alnair/templates/_rules.tpl) from dashboards/dashgen; the chart reads
# the dashboards through its link helm/alnair/dashboards -> dashboards/json.
chart:
	PYTHONPATH=dashboards $(PYTHON) -m chartgen

.PHONY: test test-product test-dataset system-packages dashboards chart
