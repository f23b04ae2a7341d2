"""DFlash block drafts: their own multi-layer KV (sometimes all sliding), ``--spec dflash``.

No verbatim DFlash config is available to this project: the configs are written in
tests/family_configs.py (shared with the vLLM fidelity harness), with Qwen3-8B's
attention geometry (8 KV heads of 128, hidden 4096) and five layers, each exercising one
rule of vLLM 0.33.0's ``_resolve_layer_attention`` (model_executor/models/qwen3_dflash.py).
The vLLM figures are also what vLLM 0.33.0's own code gives
(benchmarks/fidelity/vllm_fidelity.py, ``dflash(family/...)`` cases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import DFLASH_FULL, DFLASH_SWA, folder
from hypothesis import given
from hypothesis import strategies as st

import kvbudget
from kvbudget import count_params, plan
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import AttentionLayer
from kvbudget.model import parse_config

GIB = 1024**3
QWEN3_8B = "Qwen/Qwen3-8B"
DRAFT = DFLASH_FULL
SWA = DFLASH_SWA


def windows(cfg: dict[str, Any]) -> list[int | None]:
    m = parse_config(cfg, source="test", name="dflash-test")
    assert m.is_dflash and m.is_head and not m.is_eagle3 and not m.mtp_layers
    out = []
    for x in m.layers:
        assert isinstance(x, AttentionLayer) and (x.num_kv_heads, x.head_dim) == (8, 128)
        out.append(x.sliding_window)
    return out


def test_window_rules() -> None:
    assert windows(DRAFT) == [None] * 5  # no layer_types, no use_swa: full attention
    assert windows(SWA) == [2048] * 5  # use_swa: every layer over swa_window_size
    mixed = {
        **DRAFT,
        "use_sliding_window": True,
        "sliding_window": 4096,
        "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
    }
    assert windows(mixed) == [4096] * 4 + [None]
    # use_swa over an all-full layer_types list: every layer slides
    full_listed = {**SWA, "layer_types": ["full_attention"] * 5}
    assert windows(full_listed) == [2048] * 5


def test_qwen_config_drops_the_window_without_use_sliding_window() -> None:
    # Qwen3Config.__post_init__: sliding_window = None unless use_sliding_window
    cfg = {**DRAFT, "sliding_window": 4096, "dflash_config": {"use_swa": True}}
    with pytest.raises(ConfigError, match="sliding_window"):
        windows(cfg)
    assert windows({**cfg, "use_sliding_window": True}) == [4096] * 5


def test_weights_by_hand() -> None:
    h, kv, heads, d = 4096, 8, 32, 128
    c = count_params(parse_config(DRAFT, source="test", name="dflash-test"))
    # per layer: q (32 x 128) and o, k and v (8 x 128), q/k norms (128 each)
    attention = 2 * heads * d * h + 2 * kv * d * h + 2 * d
    assert c.attention == 5 * attention == 5 * 41_943_296
    assert c.dense_mlp == 5 * 3 * h * 12288
    # fc: the 5 fused target layers' hidden states -> hidden
    assert c.eagle3_fc == 5 * h * h
    # two norms per layer, hidden_norm, norm, the mask_embedding vector
    assert c.norms == 5 * 2 * h + 3 * h
    # embeddings and lm_head are the target's (no has_own_lm_head)
    assert c.embeddings == 0 and c.lm_head == 0


def test_vllm_pool_by_hand(tmp_path: Path) -> None:
    """Qwen3-8B (36 full layers) + 5 sliding draft layers, all pages 16 x 4,096 B =
    65,536 B: the 36 full layers split into groups of 5 (the fewest), 4 with a padding
    layer, beside one sliding group; vLLM 0.33.0's own code gives the same."""
    p = plan(
        QWEN3_8B,
        folder(tmp_path, SWA),
        spec="dflash",
        engine="vllm",
        kv_budget="8GiB",
        host_budget=0,
        max_seq_len=32768,
        tokens_per_block=16,
        max_num_batched_tokens=8192,
        max_draft_len=3,
    )
    assert p.engine is not None
    e = dict(p.engine.detail)
    kinds = sorted((g["kind"], g["layers"], g["draft_layers"]) for g in e["kv_cache_groups"])
    assert kinds == sorted(
        [("full_attention", 5, 0)] * 4 + [("full_attention", 4, 0)] * 4 + [("sliding_window", 5, 5)]
    )
    assert e["bytes_per_block"] == 5 * 65_536
    assert e["num_gpu_blocks"] == 8 * GIB // (5 * 65_536) == 26_214
    # per request: 8 full groups x 2048 + sliding cdiv(2047 + 2 x 8192, 16) + 1 = 1153
    per_request = 8 * 2048 + (-(-(2047 + 2 * 8192) // 16) + 1)
    assert per_request == 17_537
    assert e["gpu_kv_cache_tokens"] == int(26_214 / per_request * 32768) == 48_981
    methods = [v.get("method") for v in p.engine.settings.values() if isinstance(v, dict)]
    assert methods == ["dflash"]


def test_spec_checks(tmp_path: Path) -> None:
    draft = folder(tmp_path, SWA)
    p = plan(QWEN3_8B, draft, engine="vllm", kv_budget="8GiB", host_budget=0, max_batch_size=4)
    assert p.spec == "dflash"  # auto picks it for a DFlash draft
    with pytest.raises(InvalidArgumentError, match="a DFlash draft, not a target model"):
        plan(draft, spec="none", kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match="needs --draft"):
        plan(QWEN3_8B, spec="dflash", kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match="not a DFlash draft"):
        plan(QWEN3_8B, "Qwen/Qwen3-0.6B", spec="dflash", kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match="not an EAGLE3 head; use --spec dflash"):
        plan(QWEN3_8B, draft, spec="eagle3", kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match="is a DFlash block draft, not a draft model"):
        plan(QWEN3_8B, draft, spec="draft-target", kv_budget="8GiB", host_budget=0)
    for engine in ("sglang", "trtllm"):
        with pytest.raises(InvalidArgumentError):
            plan(QWEN3_8B, draft, spec="dflash", engine=engine, kv_budget="8GiB", host_budget=0)


@given(
    layers=st.integers(1, 8),
    use_swa=st.booleans(),
    listed=st.one_of(st.none(), st.lists(st.booleans(), min_size=1, max_size=8)),
)
def test_window_rule_invariants(layers: int, use_swa: bool, listed: list[bool] | None) -> None:
    """``_resolve_layer_attention``'s table: listed types win unless none slides and
    ``use_swa`` is set; without a list, ``use_swa`` decides every layer."""
    cfg: dict[str, Any] = {
        **DRAFT,
        "num_hidden_layers": layers,
        "dflash_config": {"use_swa": use_swa, "swa_window_size": 1024},
    }
    if listed is not None:
        flags = (listed * layers)[:layers]
        cfg["layer_types"] = ["sliding_attention" if s else "full_attention" for s in flags]
        expected = [True] * layers if use_swa and not any(flags) else flags
    else:
        expected = [use_swa] * layers
    assert [w is not None for w in windows(cfg)] == expected
    assert {w for w in windows(cfg) if w is not None} <= {1024}


def test_vllm_029_refuses_a_dflash_draft_under_pp(tmp_path: Path) -> None:
    """vLLM 0.29.0 gives the draft the target's PP size (config/speculative.py
    create_draft_parallel_config) and its DFlashQwen3Model has no SupportsPP, so
    ModelConfig refuses PP 2 (its harness cases: "Pipeline parallelism is not supported
    for this model"); 0.33.0 runs the draft at PP 1 on the last stage, where Qwen3Model
    builds the embedding the head reads (spec_decode_needs_target_embed), and plans it."""
    draft = folder(tmp_path, SWA)
    args = {"spec": "dflash", "kv_budget": "40GiB", "host_budget": 0, "pp": 2}
    args |= {"max_seq_len": 32768}
    assert plan(QWEN3_8B, draft, engine="vllm@0.33.0", **args).capacity.tokens > 0
    with pytest.raises(kvbudget.EngineRefusedError, match="SupportsPP") as info:
        plan(QWEN3_8B, draft, engine="vllm@0.29.0", **args)
    assert "the dflash drafter is given the target's --pipeline-parallel-size" in str(info.value)
