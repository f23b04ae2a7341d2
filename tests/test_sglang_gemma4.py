"""Gemma-4 under SGLang 0.5.23 (``kvbudget.engines.sglang_gemma4``): the full and sliding
pools of every layer, KV-shared ones too, and the MTP assistant (FROZEN_KV_MTP).

Facts from the SGLang 0.5.23 wheel (``python/sglang/srt/``):
``utils/hf_transformers/config.py`` (``_apply_gemma4_attention_overrides``: one full and
one sliding shape), ``configs/model_config.py`` (``is_hybrid_swa_model``,
``get_hybrid_layer_ids`` over every layer of ``layer_types``, ``get_num_kv_heads``:
``max(1, kv // tp)``), ``model_executor/pool_configurator.py``
(``HybridSWAPoolConfigurator``: ``cell = F x (full layers + draft layers) + ratio x S x
sliding layers``), ``mem_cache/swa_memory_pool.py`` (``SWAKVPool``: ``T + page`` rows per
pool), ``arg_groups/speculative_hook.py`` (NEXTN with a ``Gemma4AssistantForCausalLM``
draft becomes ``FROZEN_KV_MTP``) and ``speculative/frozen_kv_mtp_worker_v2.py``
(``alloc_memory_pool``: a 64-token dummy pool). The configs are tests/family_configs.py's;
every figure marked "SGLang's own" is what the fidelity harness
(``benchmarks/fidelity/sglang``, ``--match gemma4``) gets from SGLang's
``KVCacheConfigurator.configure`` for the emitted command.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from family_configs import (
    FAMILY_CONFIGS,
    GEMMA4_ASSISTANT,
    GEMMA4_EAGLE3_HEAD,
    GEMMA4_KV_SHARED,
    GEMMA4_MULTIMODAL,
    folder,
)

import kvbudget
from kvbudget import InvalidArgumentError
from kvbudget.deployment import resolve_deployment
from kvbudget.engines.sglang import layout
from kvbudget.plan_types import Plan

GIB = 1024**3
PAGE = 32  # kvbudget's default --page-size
DEFAULTS = FAMILY_CONFIGS["family/gemma4-defaults"]
KV_SHARED_MM = GEMMA4_MULTIMODAL["family/gemma4-kv-shared-mm"]
MOE_MM = GEMMA4_MULTIMODAL["family/gemma4-moe-mm"]
# Gemma4TextConfig's defaults: 30 layers, every sixth full (5, 11, 17, 23, 29), 4 KV heads;
# full layers 512 wide (global_head_dim), sliding ones 256; bf16, K and V
FULL_BF16 = 2 * 4 * 512 * 2  # 8,192 B per full layer and token
SWA_BF16 = 2 * 4 * 256 * 2  # 4,096 B per sliding layer and token


def sgl_plan(target: str, draft: str | None = None, **kwargs: Any) -> Plan:
    args: dict[str, Any] = {
        "kv_budget": 8 * GIB,
        "host_budget": 0,
        "gpu": "H200",
        "tp": 1,
        "engine": "sglang",
    }
    if draft is None:
        args["spec"] = "none"
    args.update(kwargs)
    return kvbudget.plan(target, draft, **args)


def pools(p: Plan) -> dict[str, tuple[int, int]]:
    assert p.engine is not None
    return {x.name: (x.tokens, x.bytes) for x in p.engine.pools}


def test_defaults_full_and_sliding_pools_by_hand(tmp_path: Path) -> None:
    """5 full layers of 8,192 B and 25 sliding ones of 4,096 B per token; 256 requests'
    windows need more sliding rows than the budget holds, so the sliding pool gets the
    full pool's tokens (ratio 1): T = (8 GiB // (40,960 + 102,400) - page) // page x page."""
    target = folder(tmp_path, DEFAULTS)
    lay = layout(resolve_deployment(target, spec="none", engine="sglang", tp=1), 0)
    assert (lay.full, lay.full_layers, lay.per_layer_full) == (5 * FULL_BF16, 5, FULL_BF16)
    assert (lay.swa, lay.swa_layers, lay.window) == (25 * SWA_BF16, 25, 512)
    p = sgl_plan(target)
    tokens = (8 * GIB // (5 * FULL_BF16 + 25 * SWA_BF16) - PAGE) // PAGE * PAGE
    assert tokens == 59_872  # SGLang's own max_total_num_tokens and swa_layer_tokens
    assert pools(p) == {
        "full": (tokens, (tokens + PAGE) * 5 * FULL_BF16),
        "swa": (tokens, (tokens + PAGE) * 25 * SWA_BF16),
    }
    # SGLang's own target_pool_bytes (family/gemma4-defaults none 8GiB bf16 nohost tp1)
    assert (tokens + PAGE) * (5 * FULL_BF16 + 25 * SWA_BF16) == 8_587_837_440
    assert p.engine is not None
    assert p.engine.settings["--swa-full-tokens-ratio"] == 1.0
    assert p.engine.settings["--max-total-tokens"] == tokens


def test_kv_shared_layers_keep_rows_in_sglang_pools(tmp_path: Path) -> None:
    """SGLang gives all 35 layers rows (get_hybrid_layer_ids splits every layer_types
    entry), though the last 20 read earlier layers' caches: full layers 5, 11, 17, 23, 29
    and the forced-full 34 (6), 29 sliding; one KV head (512 wide on k_eq_v full layers,
    256 on sliding ones). vLLM and kvbudget keep the 15 own layers only."""
    target = folder(tmp_path, KV_SHARED_MM)
    d = resolve_deployment(target, spec="none", engine="sglang", tp=8, kv_dtype="fp8")
    lay = layout(d, 0)
    # fp8 (1 B), K and V, one head per rank (max(1, 1 // 8))
    assert (lay.full, lay.full_layers) == (6 * 2 * 512, 6)
    assert (lay.swa, lay.swa_layers) == (29 * 2 * 256, 29)
    own = [x for x in d.target.layers if x.bytes_per_token(d.kv_dtype_value, 8)]
    assert len(own) == 15
    p = sgl_plan(target, kv_budget=40 * GIB, host_budget=64 * 10**9, tp=8, kv_dtype="fp8")
    full, swa = 6_607_200, 158_560  # SGLang's own (family/gemma4-kv-shared-mm none 40GiB
    assert p.engine is not None  # fp8 host64 tp8)
    dev_full, dev_swa = (full + PAGE) * 6144, (swa + PAGE) * 14_848
    assert pools(p)["full"] == (full, dev_full)
    assert pools(p)["swa"] == (swa, dev_swa)
    assert dev_full + dev_swa == 42_949_607_424  # SGLang's own target_pool_bytes
    # --hicache-size 63 split by device bytes (_split_hicache_size), then HostKVCache's
    # (int(GB x 1e9 // bytes_per_token) // page + 1) x page tokens per pool
    assert p.engine.settings["--hicache-size"] == 63
    share = dev_full + dev_swa
    host_full = (int(63 * dev_full / share * 1e9 // 6144) // PAGE + 1) * PAGE
    host_swa = (int(63 * dev_swa / share * 1e9 // 14_848) // PAGE + 1) * PAGE
    assert (host_full, host_swa) == (9_691_744, 232_640)  # SGLang's own host pools
    assert pools(p)["host full"] == (host_full, host_full * 6144)
    assert pools(p)["host swa"] == (host_swa, host_swa * 14_848)
    assert host_full * 6144 + host_swa * 14_848 == 63_000_313_856  # SGLang's host_bytes


def test_moe_under_dp_attention_by_hand(tmp_path: Path) -> None:
    """k_eq_v full layers with 2 KV heads of 512, sliding ones with 8 of 256; DP
    attention keeps every head on each rank (attention TP 1): 5 x 4,096 + 25 x 8,192 B."""
    p = sgl_plan(folder(tmp_path, MOE_MM), tp=8, dp=8, dp_attention=True)
    full_bpt, swa_bpt = 5 * 2 * 2 * 512 * 2, 25 * 2 * 8 * 256 * 2
    tokens = (8 * GIB // (full_bpt + swa_bpt) - PAGE) // PAGE * PAGE
    assert tokens == 38_080  # SGLang's own (family/gemma4-moe-mm none 8GiB bf16 nohost dpa8)
    assert pools(p) == {
        "full": (tokens, (tokens + PAGE) * full_bpt),
        "swa": (tokens, (tokens + PAGE) * swa_bpt),
    }
    assert (tokens + PAGE) * (full_bpt + swa_bpt) == 8_585_871_360  # SGLang's own bytes
    assert p.engine is not None
    assert p.engine.detail["max_running_requests"] == 256 // 8  # per DP worker


def _fits(full: int, budget: int, draft_bytes: int) -> bool:
    """Whether the defaults' pools at ``full`` tokens (sliding pool from the emitted
    ratio rule, 256 requests x (512 + 3 + 1 + 2 pages) + a chunk + a page) fit."""
    need = 256 * (512 + 3 + 1 + 2 * PAGE) + 8192 + PAGE  # 156,704 sliding tokens
    ratio = -(-need * 1000 // full) / 1000  # rounded up to 3 decimals
    swa = int(full * ratio) // PAGE * PAGE
    total = (full + PAGE) * 5 * FULL_BF16 + (swa + PAGE) * 25 * SWA_BF16 + draft_bytes
    return total <= budget


def test_assistant_runs_as_frozen_kv_mtp_by_hand(tmp_path: Path) -> None:
    """The assistant reads the target's pools: SGLang prices its 4 layers as target full
    layers in the profile (eagle_draft_num_layers; cell 8,192 x (5 + 4) + ratio x
    102,400) and its worker keeps a dummy pool of 64 + page rows x 4 layers at the
    assistant's full shape (4 heads of 512)."""
    target = folder(tmp_path / "t", DEFAULTS)
    assistant = folder(tmp_path / "a", GEMMA4_ASSISTANT)
    p = sgl_plan(target, assistant, kv_budget=40 * GIB)
    assert p.spec == "mtp" and p.engine is not None
    dummy = (64 + PAGE) * 4 * FULL_BF16
    assert dummy == 3_145_728  # SGLang's own draft_pool_bytes
    full, swa = 656_288, 156_832  # SGLang's own (family/gemma4-defaults mtp 40GiB bf16)
    assert _fits(full, 40 * GIB, dummy) and not _fits(full + PAGE, 40 * GIB, dummy)
    assert pools(p) == {
        "full": (full, (full + PAGE) * 5 * FULL_BF16),
        "swa": (swa, (swa + PAGE) * 25 * SWA_BF16),
        "assistant": (64, dummy),
    }
    assert (full + PAGE) * 5 * FULL_BF16 + (swa + PAGE) * 25 * SWA_BF16 == 42_945_740_800
    s = p.engine.settings
    ratio = s["--swa-full-tokens-ratio"]
    assert ratio == 0.239  # 156,704 / 656,288 rounded up
    cell = FULL_BF16 * (5 + 4) + ratio * 25 * SWA_BF16
    assert p.engine.detail["profiled_budget_bytes"] == int((full + PAGE) * cell) + 1
    assert s["--speculative-algorithm"] == "NEXTN"  # SGLang promotes it to FROZEN_KV_MTP
    assert s["--speculative-draft-model-path"] == assistant
    assert (s["--speculative-num-steps"], s["--speculative-num-draft-tokens"]) == (3, 4)
    # HiCache: FROZEN_KV_MTP registers no draft pool (_draft_model_runners is empty)
    host = sgl_plan(target, assistant, kv_budget=40 * GIB, host_budget=64 * 10**9)
    assert "host draft" not in pools(host) and "host full" in pools(host)


def test_eagle3_head_priced_at_the_target_full_layer(tmp_path: Path) -> None:
    """An EAGLE3 head (one Llama layer, 4 KV heads of 256: 4,096 B per token) keeps its
    own pool of the full pool's rows; SGLang's profile prices it as one more target full
    layer (8,192 B): cell 8,192 x (5 + 1) + ratio x 102,400."""
    target = folder(tmp_path / "t", DEFAULTS)
    head = folder(tmp_path / "h", GEMMA4_EAGLE3_HEAD)
    p = sgl_plan(target, head, spec="eagle3")
    assert p.engine is not None
    full, _ = pools(p)["full"]
    assert pools(p)["draft"] == (full, (full + PAGE) * SWA_BF16)
    # the ratio-1 branch: every pool holds the same tokens
    assert full == (8 * GIB // (5 * FULL_BF16 + SWA_BF16 + 25 * SWA_BF16) - PAGE) // PAGE * PAGE
    cell = FULL_BF16 * (5 + 1) + 1.0 * 25 * SWA_BF16
    assert p.engine.detail["profiled_budget_bytes"] == int((full + PAGE) * cell) + 1


def _with_text(cfg: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out = copy.deepcopy(cfg)
    out["text_config"].update(fields)
    return out


@pytest.mark.parametrize(
    ("cfg", "kwargs", "match"),
    [
        # transformers 5.19.0's Gemma4TextConfig always carries a per_layer_config
        (GEMMA4_KV_SHARED, {}, "AmbiguousGlobalPerLayerAttributeError"),
        (_with_text(DEFAULTS, per_layer_config={"5": {"head_dim": 512}}), {}, "more than one"),
        (
            _with_text(DEFAULTS, per_layer_config={"5": {"sliding_window": 64}}),
            {},
            "cannot express",
        ),
        (_with_text(DEFAULTS, layer_types=["full_attention"] * 30), {}, "at least one SWA"),
        (DEFAULTS, {"pp": 2}, "--pp > 1"),
        (DEFAULTS, {"engine": "sglang@main@003fca80"}, "checked against SGLang 0.5.23"),
    ],
    ids=["text-config", "two-full-shapes", "per-layer-window", "no-sliding", "pp", "main"],
)
def test_refusals_in_sglangs_words(
    tmp_path: Path, cfg: dict[str, Any], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        sgl_plan(folder(tmp_path, cfg), **kwargs)


def test_assistant_needs_a_gemma4_target_and_draft_target_is_refused(tmp_path: Path) -> None:
    target = folder(tmp_path / "t", DEFAULTS)
    with pytest.raises(InvalidArgumentError, match="--spec draft-target"):
        sgl_plan(target, "meta-llama/Llama-3.2-1B-Instruct", spec="draft-target")
    assistant = folder(tmp_path / "a", GEMMA4_ASSISTANT)
    with pytest.raises(InvalidArgumentError, match="for a Gemma-4 target only"):
        sgl_plan("Qwen/Qwen3-8B", assistant, spec="mtp")
