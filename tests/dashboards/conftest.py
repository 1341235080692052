"""Fixtures of the dashboards' tests."""

from __future__ import annotations

import pytest

from dashboard_support import DASHBOARD_FILES, load


@pytest.fixture(params=DASHBOARD_FILES, ids=lambda path: path.name)
def board(request) -> dict:
    """Each committed dashboard in turn, parsed."""
    return load(request.param)
