"""SpecDecodeCache built from plans of the planner (real model presets)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kvbudget
from kvbudget.cache import RequestId, SpecDecodeCache

A = RequestId("a")


@pytest.fixture
def plan() -> Callable[..., Any]:
    return kvbudget.plan


def test_pools_are_the_plans_blocks(plan: Callable[..., Any]) -> None:
    p = plan(
        target="meta-llama/Llama-3.1-8B-Instruct",
        draft="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        spec="eagle3",
        kv_budget="1GiB",
        host_budget="2GiB",
        max_batch_size=8,
        max_seq_len=4096,
    )
    cache = SpecDecodeCache.from_plan(p)
    assert cache.roles == ("target", "draft")
    assert cache.draft_prefix == "drop_last_block"
    assert cache.max_reserve_tokens == p.capacity.lookahead_tokens + 1
    stats = cache.stats()
    for m in p.managers:
        for tier in ("gpu", "host", "disk"):
            pool = stats.pool(m.role, tier)
            assert pool.plan_blocks == m.tier(tier).blocks
            assert pool.total_blocks == min(x.tier(tier).blocks for x in p.managers)
    cache.admit(A, range(1000))
    cache.reserve(A, 4)
    cache.commit(A, [1, 2, 3])
    cache.check_invariants()


def test_sliding_window_model_gets_window_pools(plan: Callable[..., Any]) -> None:
    p = plan(
        target="google/gemma-3-27b-it",
        spec="ngram",
        kv_budget="4GiB",
        max_batch_size=2,
        max_seq_len=8192,
    )
    cache = SpecDecodeCache.from_plan(p)
    assert not cache.prefix_reuse  # a hit would need the window blocks at that position
    (target,) = p.managers
    (group,) = target.window_groups
    # window 1024 + lookahead 3 = 1027 tokens; worst-case alignment over 32-token blocks:
    # ceil(1026 / 32) + 1 = 33 + 1 = 34 blocks per sequence, x max_batch_size 2 = 68
    assert (group.window_tokens, group.blocks_per_seq) == (1024, 34)
    window = cache.stats().pool("target", "gpu", "window1024")
    assert window.total_blocks == 68
    cache.admit(A, range(3000))
    for _ in range(10):
        cache.reserve(A, 4)
        cache.commit(A, [7, 7, 7, 7])
    ((_, blocks),) = cache.window_tables(A, "target")
    assert len(blocks) <= group.blocks_per_seq
    cache.check_invariants()


def test_recurrent_model_gets_state_slots(plan: Callable[..., Any]) -> None:
    p = plan(
        target="Qwen/Qwen3-Next-80B-A3B-Instruct",
        spec="mtp",
        kv_budget="1GiB",
        max_batch_size=2,
        max_seq_len=8192,
    )
    cache = SpecDecodeCache.from_plan(p)
    assert cache.roles == ("target",)  # MTP layers inside the target's manager
    assert cache.stats().pool("target", "gpu", "state").total_blocks == 2
    cache.admit(A, range(100))
    cache.admit(RequestId("b"), range(100))
    with pytest.raises(kvbudget.OutOfBlocksError, match="recurrent-state slot"):
        cache.admit(RequestId("c"), range(100))
    cache.check_invariants()


def test_storage_bytes_and_padding_match_the_plan(plan: Callable[..., Any]) -> None:
    pytest.importorskip("torch")
    p = plan(
        target="meta-llama/Llama-3.2-1B-Instruct",
        spec="none",
        kv_budget="64MiB",
        host_budget="32MiB",
        max_batch_size=2,
        max_seq_len=1024,
    )
    cache = SpecDecodeCache.from_plan(p, device="cpu")
    assert cache.storage is not None
    for m, rs in zip(p.managers, cache.storage.roles, strict=True):
        for tier in ("gpu", "host", "disk"):
            assert rs.padding_bytes[tier] == m.tier(tier).padding_bytes
            assert rs.tier_bytes(tier) + rs.padding_bytes[tier] == m.tier(tier).bytes
    cache.check_invariants()
