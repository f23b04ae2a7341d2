"""Helpers for the engine tests: tiny checkpoints written once per session, plans."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import kvbudget  # noqa: E402
from kvbudget.engine import DemoModels, Engine, SamplingParams, write_demo_models  # noqa: E402
from kvbudget.plan_types import Plan  # noqa: E402

# target: 4 layers x 2 (K, V) x 2 KV heads x 16 head_dim x 4 B (fp32) = 1024 B per token
TARGET_BYTES_PER_TOKEN = 4 * 2 * 2 * 16 * 4
# EAGLE3 head: 1 layer x 2 x 2 x 16 x 4 = 256 B; small draft: 1 x 2 x 1 x 16 x 4 = 128 B
EAGLE3_BYTES_PER_TOKEN = 1 * 2 * 2 * 16 * 4
SMALL_DRAFT_BYTES_PER_TOKEN = 1 * 2 * 1 * 16 * 4


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoModels:
    """The demo checkpoints (target, noisy-copy draft, small draft, EAGLE3 head)."""
    return write_demo_models(tmp_path_factory.mktemp("demo"), seed=0, draft_noise=0.02)


def make_plan(target: str, draft: str | None, spec: str, **kw: Any) -> Plan:
    """A plan of the engine tests' shape: 4-token blocks, sequences of at most 64."""
    args: dict[str, Any] = {
        "tokens_per_block": 4,
        "max_batch_size": 8,
        "max_seq_len": 64,
        "kv_budget": 400_000,
    }
    args.update(kw)
    return kvbudget.plan(target=target, draft=draft, spec=spec, **args)


def shared_prefix_prompts() -> list[list[int]]:
    """Ten prompts: six share a 12-token prefix (three whole 4-token blocks), four do not."""
    prefix = [5, 17, 42, 99, 3, 8, 200, 11, 64, 7, 150, 31]
    shared = [[*prefix, 100 + i, 20 + i] for i in range(6)]
    other = [[230 - i, 2 * i + 1, 90, 91, 92][: 3 + i % 3] for i in range(4)]
    return shared + other


def target_only(target: str, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """Greedy output of the target alone, one prompt at a time, a roomy budget."""
    plan = make_plan(target, None, "none", max_batch_size=1)
    engine = Engine(plan, target=target)
    out = []
    for p in prompts:
        out.append(engine.generate([p], SamplingParams(max_new_tokens=max_new))[0].token_ids)
    return out
