"""Shared fixtures: small hand-built plans for the cache's unit tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_cache_support import tiny_plan

from kvbudget.plan_types import Plan


@pytest.fixture
def make_plan() -> Callable[..., Plan]:
    """``tiny_plan``: a target of 8 B/token and a draft of 2 B/token, sizes as asked."""
    return tiny_plan
