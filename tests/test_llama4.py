"""Llama-4: chunked local attention (36 layers) with global NoPE layers (12), per engine."""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget import load_model, plan
from kvbudget.errors import ConfigError
from kvbudget.layers import AttentionLayer
from kvbudget.model import parse_config

SCOUT = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
MAVERICK = "meta-llama/Llama-4-Maverick-17B-128E-Instruct"
GLOBAL = [i for i in range(48) if (i + 1) % 4 == 0]  # NoPE layers: 3, 7, ..., 47


@pytest.mark.parametrize("name", [SCOUT, MAVERICK])
def test_default_no_rope_pattern_gives_36_chunked_and_12_global(name: str) -> None:
    m = load_model(name)
    assert m.model_type == "llama4"  # the text model is read from text_config
    assert [x.index for x in m.layers if not x.sliding_window] == GLOBAL
    chunked = [x for x in m.layers if x.sliding_window]
    assert len(chunked) == 36
    assert all(
        isinstance(x, AttentionLayer) and x.chunked and x.sliding_window == 8192 for x in chunked
    )
    assert m.describe() == f"{name}: 36 chunked(8192), 12 attention"
    assert any("vision tower keeps no KV" in note for note in m.assumed)


def _text(**fields: Any) -> dict[str, Any]:
    cfg = dict(load_model(SCOUT).raw_config)
    cfg["text_config"] = {**cfg["text_config"], **fields}
    return cfg


def test_explicit_no_rope_layers_and_layer_types() -> None:
    flags = [1] * 47 + [0]  # only the last layer global
    m = parse_config(_text(no_rope_layers=flags), source="t", name="t")
    assert [x.index for x in m.layers if not x.sliding_window] == [47]
    types = ["full_attention"] * 48
    m = parse_config(_text(layer_types=types), source="t", name="t")
    assert not any(x.sliding_window for x in m.layers)
    with pytest.raises(ConfigError, match=r"text_config\.no_rope_layers"):
        parse_config(_text(no_rope_layers=[1, 0]), source="t", name="t")


def test_kvbudget_caches_chunked_layers_as_windows_of_the_chunk() -> None:
    p = plan(SCOUT, spec="none", tp=8, kv_budget="40GiB", max_seq_len=131072, max_batch_size=8)
    (t,) = p.managers
    # per layer at tp 8: 2 (K, V) x ceil(8 / 8) x 128 x 2 B = 512 B per token
    assert t.slope_bytes_per_token == 12 * 512 == 6_144  # the global layers grow
    (g,) = t.window_groups
    assert (g.window_tokens, g.num_layers, g.bytes_per_token) == (8192, 36, 36 * 512)
    assert g.blocks_per_seq == 8192 // 32 + 1 == 257  # a window may straddle a block
    # 8 sequences x 257 blocks x 32 tokens x 18,432 B
    assert t.window_bytes == 8 * 257 * 32 * 18_432 == 1_212_678_144


def _predicted(engine: str, **kw: Any) -> dict[str, Any]:
    p = plan(SCOUT, tp=8, kv_budget="40GiB", max_seq_len=131072, engine=engine, **kw)
    return dict(p.engine.detail)


def test_vllm_groups_chunked_layers_like_its_hybrid_manager() -> None:
    e = _predicted("vllm", spec="none")
    kinds = [(g["kind"], g["layers"], g["blocks_per_request"]) for g in e["kv_cache_groups"]]
    # 36 chunked + 12 full: group size 12 -> 3 chunked groups and 1 full group; a chunked
    # group holds cdiv(min(8192 + 16,384 in flight, 131,072), 32) = 768 blocks per
    # request (ChunkedLocalAttentionSpec, vLLM 0.33.0), the full one 131,072 / 32 = 4,096
    assert kinds == [("chunked_local", 12, 768)] * 3 + [("full_attention", 12, 4096)]
    assert e["blocks_per_request"] == 3 * 768 + 4096 == 6_400


def test_vllm_turns_chunks_into_full_attention_with_an_eagle_drafter() -> None:
    # VllmConfig disables the hybrid manager for chunked local attention + eagle
    e = _predicted("vllm", spec="eagle", draft="yuhuili/EAGLE-LLaMA3-Instruct-8B")
    (group,) = e["kv_cache_groups"]
    assert group["kind"] == "full_attention"
    assert group["layers"] == 48 + 1  # every target layer and the head's one
    assert e["blocks_per_request"] == 131072 // 32 == 4_096


def test_sglang_puts_chunked_layers_in_the_swa_pool() -> None:
    p = plan(SCOUT, tp=8, kv_budget="40GiB", max_seq_len=131072, engine="sglang", spec="none")
    # 12 global layers x 512 B/token in the full pool, 36 chunked ones (window: the
    # 8,192-token chunk) x 512 B/token in the sliding pool; T + page rows each
    pools = {x.name: x for x in p.engine.pools}
    assert set(pools) == {"full", "swa"}
    full, swa = pools["full"], pools["swa"]
    assert full.bytes == (full.tokens + p.tokens_per_block) * 12 * 512
    assert swa.bytes == (swa.tokens + p.tokens_per_block) * 36 * 512
    assert swa.kind == "window" and swa.window_tokens == 8192


def test_trtllm_allocates_chunked_layers_at_full_length() -> None:
    # the V1 manager's mechanics (the default trtllm plans V2 for Llama-4: PR #19004)
    e = _predicted("trtllm@v1", spec="none")
    (manager,) = e["managers"]
    assert manager["bytes_per_token"] == 48 * 512 == 24_576
    assert [w["window"] for w in manager["windows"]] == [None]


def test_scout_params_by_hand() -> None:
    """Scout's text model: 48 layers of attention (40 heads, 8 KV heads of 128, no bias)
    and an MoE of 16 experts (fused gate_up / down of 8192) plus a shared expert."""
    from kvbudget import count_params

    h, v = 5120, 202048
    attn = h * 40 * 128 + 2 * (h * 8 * 128) + 40 * 128 * h
    c = count_params(load_model(SCOUT))
    assert c.attention == 48 * attn == 3_019_898_880
    assert c.routed_experts == 48 * 16 * 3 * h * 8192 == 96_636_764_160
    assert c.shared_experts == 48 * 3 * h * 8192 == 6_039_797_760
    assert c.routers == 48 * 16 * h == 3_932_160
    assert c.embeddings == c.lm_head == v * h == 1_034_485_760
    assert c.dense_mlp == 0  # interleave_moe_layer_step 1: every layer is MoE
    maverick = count_params(load_model(MAVERICK))
    assert maverick.dense_mlp == 24 * 3 * h * 16384  # the even layers: intermediate_size_mlp
