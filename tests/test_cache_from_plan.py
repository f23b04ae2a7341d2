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
    assert cache.prefix_reuse  # window blocks are hashed and cached like kv blocks
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
    with pytest.raises(kvbudget.OutOfBlocksError, match="recurrent-state slot") as info:
        cache.admit(RequestId("c"), range(100))
    err = info.value
    assert (err.role, err.tier, err.pool, err.needed, err.available) == (
        "target",
        "gpu",
        "state",
        1,
        0,
    )
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


def _applicable_specs(name: str) -> list[tuple[str, str | None]]:
    """(spec, draft) pairs that plan for the preset target ``name``."""
    from kvbudget.planner import EAGLE3_DRAFTS

    model = kvbudget.load_model(name)
    specs: list[tuple[str, str | None]] = [("none", None), ("ngram", None)]
    if name in EAGLE3_DRAFTS:
        specs.append(("eagle3", EAGLE3_DRAFTS[name]))
    if name == "meta-llama/Llama-3.1-8B-Instruct":  # an EAGLE-1 head (for Llama-3-8B)
        specs.append(("eagle", "yuhuili/EAGLE-LLaMA3-Instruct-8B"))
    if model.mtp_layers:
        specs.append(("mtp", None))
    if model.vocab_size == kvbudget.load_model("meta-llama/Llama-3.2-1B-Instruct").vocab_size:
        specs.append(("draft-target", "meta-llama/Llama-3.2-1B-Instruct"))
    if name == "mistralai/Mistral-7B-v0.1":  # every layer a window, with a dense draft
        specs.append(("draft-target", "mistralai/Mistral-7B-v0.1"))
    return specs


_TARGETS = [n for n in kvbudget.list_presets() if not kvbudget.load_model(n).is_head]
_MATRIX = [
    (target, spec, draft, budget, tp, pp)
    for target in _TARGETS
    for spec, draft in _applicable_specs(target)
    for budget, tp, pp in (("40GiB", 1, 1), ("8GiB", 2, 1), ("80GiB", 8, 2))
]


@pytest.mark.parametrize(("target", "spec", "draft", "budget", "tp", "pp"), _MATRIX)
def test_every_preset_and_spec_builds_a_cache_that_serves(
    target: str, spec: str, draft: str | None, budget: str, tp: int, pp: int
) -> None:
    try:
        p = kvbudget.plan(
            target,
            draft,
            spec=spec,
            kv_budget=budget,
            host_budget="4GiB",
            tp=tp,
            pp=pp,
            max_seq_len=8192,
            max_batch_size=8,
        )
    except (kvbudget.InvalidArgumentError, kvbudget.InfeasibleBudgetError) as exc:
        # a tp the heads cannot shard, or a budget below one sequence: refused up front
        assert "tp=" in str(exc) or "budget" in str(exc) or "fit" in str(exc), exc
        return
    cache = SpecDecodeCache.from_plan(p)
    # the plan's capacity is what the cache holds: one count per tier for every role
    stats = cache.stats()
    for m in p.managers:
        assert stats.pool(m.role, "gpu").total_blocks == p.capacity.gpu_blocks > 0
    assert p.capacity.max_concurrency >= 1
    hit = cache.admit(A, list(range(100)))
    assert hit == 0
    cache.reserve(A, p.capacity.lookahead_tokens + 1)
    cache.commit(A, [1])
    cache.check_invariants()
    cache.free(A)
    cache.check_invariants()


def test_a_sliding_only_target_with_a_dense_draft_admits(tmp_path: Any) -> None:
    import json

    # a small full-attention draft with Mistral's vocabulary (a Llama-style config)
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "vocab_size": 32000,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    p = kvbudget.plan(
        "mistralai/Mistral-7B-v0.1",
        str(path),
        spec="draft-target",
        kv_budget="40GiB",
        host_budget=0,
        max_seq_len=8192,
        max_batch_size=8,
    )
    target, draft = p.managers
    # Mistral: 32 layers, all a 4,096-token window < 8,192: no growing layer, 0 B blocks
    assert target.slope_bytes_per_token == 0 and draft.slope_bytes_per_token > 0
    # the common count is the draft's, and the target's pool holds as many (0 B each)
    assert target.gpu.blocks == draft.gpu.blocks == p.capacity.gpu_blocks > 0
    cache = SpecDecodeCache.from_plan(p)
    assert cache.admit(A, list(range(100))) == 0
    cache.reserve(A, 4)
    cache.commit(A, [1, 2])
    cache.check_invariants()


def test_every_layer_a_window_with_no_draft_admits() -> None:
    p = kvbudget.plan(
        "mistralai/Mistral-7B-v0.1",
        spec="ngram",
        kv_budget="40GiB",
        max_seq_len=32768,
        max_batch_size=8,
    )
    # no growing layer anywhere: 8 sequences x ceil(32,768 / 32) = 8,192 blocks of 0 B
    assert p.capacity.gpu_blocks == 8 * 1024
    assert p.capacity.max_concurrency == 8
    cache = SpecDecodeCache.from_plan(p)
    for i in range(8):
        cache.admit(RequestId(f"r{i}"), list(range(100)))
    cache.check_invariants()


def test_gpt_oss_eagle3_reuses_a_shared_system_prompt() -> None:
    p = kvbudget.plan(
        "openai/gpt-oss-120b",
        spec="eagle3",
        kv_budget="8GiB",
        host_budget=0,
        max_seq_len=8192,
        max_batch_size=4,
    )
    cache = SpecDecodeCache.from_plan(p)
    assert cache.prefix_reuse and cache.draft_prefix == "drop_last_block"
    system = list(range(1000, 3000))  # 2,000 shared tokens = 62 full blocks of 32 + 16
    cache.admit(A, system + list(range(5000, 5500)))
    cache.free(A)
    hit = cache.admit(RequestId("b"), system + list(range(6000, 6300)))
    # 62 shared full blocks; the EAGLE3 chain hashes each block with the token after it,
    # and token 1,984 (after block 61) is still the system prompt's: all 62 blocks hit.
    # The 128-token window at 62 x 32 = 1,984 tokens needs blocks 58..61 (tokens
    # 1,857..1,983), which A's prefill slid past and left cached
    assert hit == 62 * 32
    stats = cache.stats()
    # blocks 58..61 read by the prefill (kept cached; the final window 67..71 is new)
    assert stats.pool("target", "gpu", "window128").hit_blocks == 4
    assert stats.hit_tokens == 62 * 32
    cache.check_invariants()


def test_gemma3_reuses_a_prefix_only_while_its_window_blocks_are_cached() -> None:
    p = kvbudget.plan(
        "google/gemma-3-27b-it",
        spec="ngram",
        kv_budget="8GiB",
        host_budget=0,
        max_seq_len=8192,
        max_batch_size=1,
    )
    cache = SpecDecodeCache.from_plan(p)
    prompt = list(range(100, 3100))  # 3,000 tokens = 93 full blocks of 32 + 24
    cache.admit(A, prompt)
    cache.free(A)
    # the same prompt + more: 93 blocks hit; the 1,024-token window at 2,976 tokens needs
    # blocks 61..92, all cached (61..92 as A's final window, the rest left by its prefill)
    assert cache.admit(RequestId("b"), [*prompt, 7, 7, 7]) == 93 * 32
    cache.free(RequestId("b"))
    # a long unrelated prompt cycles the window pool (34 blocks x batch 1): A's window
    # blocks are evicted, so a prefix of A no longer hits though its kv blocks remain
    cache.admit(RequestId("c"), list(range(20_000, 28_000)))
    cache.free(RequestId("c"))
    assert cache.admit(RequestId("d"), [*prompt, 8]) == 0
    cache.check_invariants()
