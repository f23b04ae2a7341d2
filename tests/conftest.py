"""Shared fixtures: small hand-built plans for the cache's unit tests; no test reaches
the Hugging Face Hub (offline, a closed loopback endpoint and an empty cache unless a
test serves its own: tests/hub_server.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from test_cache_support import tiny_plan

from kvbudget.plan_types import Plan


@pytest.fixture(autouse=True, scope="session")
def _no_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test (and the processes it starts) offline from the Hub: HF_HUB_OFFLINE=1,
    HF_ENDPOINT at a closed loopback port, HF_HOME and HF_HUB_CACHE empty folders, no
    HF_TOKEN. A Hub id then fails at once with its typed error, never a request."""
    home = tmp_path_factory.mktemp("hf-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        mp.setenv("HF_HOME", str(home))
        mp.setenv("HF_HUB_CACHE", str(home / "hub"))
        mp.delenv("HF_TOKEN", raising=False)
        yield


@pytest.fixture
def make_plan() -> Callable[..., Plan]:
    """``tiny_plan``: a target of 8 B/token and a draft of 2 B/token, sizes as asked."""
    return tiny_plan
