"""examples/kubernetes: the training Job that opts in to injection and the one wired by hand validate against
Kubernetes 1.29 and 1.33 (test_chart_injection.py checks that the webhook's patch turns the first into the second)."""

from __future__ import annotations

import pytest
import yaml

from chart_support import KUBERNETES_VERSIONS, ROOT, validation_errors

EXAMPLES = ROOT / "examples" / "kubernetes"


def load(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_examples_validate(name, version):
    assert validation_errors(load(name), version) == []


def test_both_examples_are_there():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == ["training-by-hand.yaml", "training-injected.yaml"]
