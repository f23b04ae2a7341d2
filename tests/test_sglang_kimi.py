"""Kimi-Linear and Kimi K3 under SGLang 0.5.23 (``kvbudget.engines.sglang_kimi``): the
KDA state in the ``MambaPool``, the MLA latents in the KV pool.

Facts from the SGLang 0.5.23 wheel (``python/sglang/srt/``):
``configs/kimi_linear.py`` (``KimiLinearConfig.mamba2_cache_params``,
``full_attention_layer_ids``), ``configs/mamba_utils.py`` (``KimiLinearStateShape.create``,
``BaseLinearStateParams.mamba_cache_per_req``, ``mamba2_state_dtype``),
``mem_cache/memory_pool.py`` (``MambaPool.__init__``, ``conv_window_dedup_enabled``),
``mem_cache/kv_cache_configurator.py`` (``_handle_max_mamba_cache``) and
``configs/model_config.py`` (``_derive_model_shapes``: both are MLA). The configs are the
family configs of tests/family_configs.py; every plan figure asserted here is what the
fidelity harness (``benchmarks/fidelity/sglang``, ``--match kimi``) gets from SGLang's own
``KVCacheConfigurator.configure`` and ``MambaPool`` for the emitted command.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from family_configs import KIMI_K3, KIMI_LINEAR, folder

import kvbudget
from kvbudget import InvalidArgumentError
from kvbudget.deployment import resolve_deployment
from kvbudget.engines import emit
from kvbudget.engines.sglang_state import state_layout
from kvbudget.plan_types import Plan

GIB = 1024**3
KV_BUDGET = 8 * GIB
# SGLang's default state share of 8 GiB: x 0.9 / 1.9 (--mamba-full-memory-ratio 0.9)
STATE_SHARE = KV_BUDGET * 9 // 19  # 4,068,916,385 B
# 21 KDA layers (the 27 less full_attn_layers 5, 9, ..., 25), 32 heads of 128, 4-tap conv.
# KimiLinearStateShape.create at TP t: conv (4 - 1, 3 x 32 x 128 / t) in bf16 (q, k, v
# packed), temporal (32 / t, 128, 128) in float32
KDA_LAYERS = 21
PER_REQUEST_TP1 = KDA_LAYERS * (3 * 12_288 * 2 + 32 * 128 * 128 * 4)  # 45,588,480 B
PER_REQUEST_TP8 = KDA_LAYERS * (3 * 1_536 * 2 + 4 * 128 * 128 * 4)  # 5,698,560 B
# MLATokenToKVPool: kv_lora_rank 512 + qk_rope_head_dim 64 per token and full layer (6)
MLA_BF16 = 6 * 576 * 2  # 6,912 B
MLA_FP8 = 6 * 576  # 3,456 B
PAGE = 32


def sgl_plan(target: Path, **kwargs: Any) -> Plan:
    args: dict[str, Any] = {
        "spec": "none",
        "kv_budget": KV_BUDGET,
        "host_budget": 0,
        "gpu": "H200",
        "tp": 1,
        "engine": "sglang",
    }
    args.update(kwargs)
    return kvbudget.plan(target, **args)


def with_text(**fields: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(KIMI_K3)
    cfg["text_config"].update(fields)
    return cfg


@pytest.mark.parametrize("cfg", [KIMI_LINEAR, KIMI_K3], ids=["kimi-linear", "kimi-k3"])
def test_kda_state_per_request_by_hand(tmp_path: Path, cfg: dict[str, Any]) -> None:
    for tp, conv_dim, ssm_elems, per_request in (
        (1, 3 * 32 * 128, 32 * 128 * 128, PER_REQUEST_TP1),
        (8, 3 * 4 * 128, 4 * 128 * 128, PER_REQUEST_TP8),
    ):
        d = resolve_deployment(
            folder(tmp_path / str(tp), cfg),
            spec="none",
            kv_budget=KV_BUDGET,
            tp=tp,
            engine="sglang",
        )
        lay = state_layout(d, list(d.target.layers))
        assert lay is not None and lay.layers == KDA_LAYERS
        assert (lay.conv_dim, lay.ssm_elems, lay.conv_kernel) == (conv_dim, ssm_elems, 4)
        assert lay.per_request_bytes == per_request
        # KimiLinearStateShape sets disable_conv_window_dedup (and conv_window_dedup_
        # enabled is false for KDA): the speculative conv windows are dense
        assert not lay.dedup_conv_window and lay.ssm_dtype == "float32"
    assert PER_REQUEST_TP1 == 45_588_480 and PER_REQUEST_TP8 == 5_698_560


def test_kda_state_stays_float32_whatever_mamba_ssm_dtype(tmp_path: Path) -> None:
    # KimiLinearConfig.mamba2_cache_params builds KimiLinearCacheParams without a dtype:
    # mamba2_state_dtype(None) reads no config field (the harness runs this config too:
    # family/kimi-k3-ssm-bf16)
    target = folder(tmp_path, with_text(mamba_ssm_dtype="bfloat16"))
    d = resolve_deployment(target, spec="none", kv_budget=KV_BUDGET, tp=8, engine="sglang")
    lay = state_layout(d, list(d.target.layers))
    assert lay is not None and lay.ssm_bytes == 4 and lay.per_request_bytes == PER_REQUEST_TP8


def test_kimi_linear_state_pool_then_the_mla_pool(tmp_path: Path) -> None:
    p = sgl_plan(folder(tmp_path, KIMI_LINEAR))
    e = p.engine.detail
    # 4,068,916,385 // 45,588,480 = 89 slots' worth, less the padding slot, over 5 slots
    # per request (extra_buffer): 17 requests, 85 slots, (85 + 1) x 45,588,480 B
    assert e["max_running_requests"] == 17 and e["mamba_cache_slots"] == 85
    assert e["mamba_state_bytes"] == 86 * PER_REQUEST_TP1 == 3_920_609_280
    # (8 GiB - 3,920,609,280) // 6,912 = 675,539; (675,539 - 32) // 32 x 32 = 675,488
    # tokens, T + 32 rows of the six MLA layers
    assert e["max_total_num_tokens"] == 675_488
    assert e["device_bytes"] == (675_488 + PAGE) * MLA_BF16 == 4_669_194_240
    assert [(x.name, x.blocks, x.bytes) for x in p.engine.pools] == [
        ("full", 675_488 // PAGE, 4_669_194_240),
        ("mamba", 85, 3_920_609_280),
    ]
    s = p.engine.settings
    assert s["--max-mamba-cache-size"] == 85 and s["--max-running-requests"] == 17
    assert s["--mamba-radix-cache-strategy"] == "extra_buffer"
    text = emit(p, "sglang")
    assert "--max-total-tokens 675488" in text and "--speculative-algorithm" not in text


def test_ngram_speculative_conv_windows_are_dense(tmp_path: Path) -> None:
    p = sgl_plan(folder(tmp_path, KIMI_LINEAR), tp=8, spec="ngram")
    e = p.engine.detail
    # D = 3 draft tokens + 1 = 4; a request's reservation is 5 slots + 4 rows:
    # (4,068,916,385 // 5,698,560 - 1 - 4) // (5 + 4) = (714 - 5) // 9 = 78 requests
    assert e["max_running_requests"] == 78 and e["mamba_cache_slots"] == 390
    slots = 391 * PER_REQUEST_TP8
    # MambaPool.__init__: intermediate_ssm (78 + 1) x 4 temporal states and, dense (KDA),
    # 4 windows of 3 columns x 1,536 channels per layer and row
    spec = 79 * KDA_LAYERS * (4 * 4 * 128 * 128 * 4 + 4 * 3 * 1_536 * 2)
    assert [(x.name, x.blocks, x.bytes) for x in p.engine.pools if x.kind == "state"] == [
        ("mamba", 390, slots),
        ("mamba speculative", 79, spec),
    ]
    assert slots == 2_228_136_960 and spec == 1_800_744_960
    # _handle_max_mamba_cache reserves per_req x (running + 1) x D: for a dense window that
    # is exactly what is allocated
    assert e["mamba_reserved_bytes"] == slots + PER_REQUEST_TP8 * 79 * 4 == slots + spec
    # (8 GiB - 4,028,881,920) // 6,912 = 659,874 -> 659,840 tokens
    assert e["max_total_num_tokens"] == 659_840
    assert p.engine.settings["--speculative-algorithm"] == "NGRAM"


def test_kimi_k3_fp8_latents_and_hicache_split(tmp_path: Path) -> None:
    p = sgl_plan(folder(tmp_path, KIMI_K3), tp=8, kv_dtype="fp8", host_budget=64 * 10**9)
    e = p.engine.detail
    # (4,068,916,385 // 5,698,560 - 1) // 5 = 142 requests, 710 slots
    assert e["max_running_requests"] == 142 and e["mamba_cache_slots"] == 710
    assert e["mamba_state_bytes"] == 711 * PER_REQUEST_TP8 == 4_051_676_160
    # fp8 latents, 576 B a layer: (8 GiB - 4,051,676,160) // 3,456 = 1,313,153 -> 1,313,120
    assert e["max_total_num_tokens"] == 1_313_120
    kv_dev = (1_313_120 + PAGE) * MLA_FP8
    assert e["device_bytes"] == kv_dev == 4_538_253_312
    # build_hybrid_mamba_stack: _split_hicache_size over the MLA pool and the MambaPool by
    # device bytes; HostKVCache (int(GB x 1e9 // 3,456) // 32 + 1) x 32 tokens,
    # MambaPoolHost int(GB x 1e9 // per_req) + 1 slots
    gb = p.engine.settings["--hicache-size"]
    state_dev = e["mamba_reserved_bytes"]
    kv_share = gb * kv_dev / (kv_dev + state_dev)
    state_share = gb * state_dev / (kv_dev + state_dev)
    assert gb == 63
    assert e["host_tokens"] == (int(kv_share * 1e9 // MLA_FP8) // PAGE + 1) * PAGE == 9_630_880
    assert e["host_state_slots"] == int(state_share * 1e9 // PER_REQUEST_TP8) + 1 == 5_215
    assert e["host_bytes"] == 9_630_880 * MLA_FP8 + 5_215 * PER_REQUEST_TP8 <= 64 * 10**9


def test_what_sglang_does_not_run_or_kvbudget_does_not_model_is_refused(tmp_path: Path) -> None:
    k3 = folder(tmp_path / "k3", KIMI_K3)
    # no Kimi NextN/MTP draft class in SGLang 0.5.23: --spec mtp has no draft to run
    with pytest.raises(InvalidArgumentError, match="no Kimi MTP draft model"):
        sgl_plan(k3, spec="mtp")
    # KimiLinearStateShape.create: divide(num_heads, tp) for the temporal state (kvbudget's
    # own check, vLLM's assert, asks the same)
    odd = copy.deepcopy(KIMI_LINEAR)
    odd["linear_attn_config"]["num_heads"] = 24
    with pytest.raises(InvalidArgumentError, match=r"tp=16 cannot shard .*num_heads=24"):
        sgl_plan(folder(tmp_path / "odd", odd), tp=16)
    # KimiLinearConfig.__init__: assert linear_attn_config["full_attn_layers"] is not None
    # (the harness saw SGLang fail with KeyError: 'full_attn_layers' when it is absent)
    for value in (None, "absent"):
        cfg = copy.deepcopy(KIMI_LINEAR)
        if value is None:
            cfg["linear_attn_config"]["full_attn_layers"] = None
        else:
            del cfg["linear_attn_config"]["full_attn_layers"]
        with pytest.raises(InvalidArgumentError, match="has no full_attn_layers"):
            sgl_plan(folder(tmp_path / f"no-full-{value}", cfg))
    with pytest.raises(InvalidArgumentError, match="plan with --state-dtype auto"):
        sgl_plan(k3, state_dtype="bf16")
    with pytest.raises(InvalidArgumentError, match="plan --pp 1"):
        sgl_plan(k3, tp=4, pp=2)
    with pytest.raises(InvalidArgumentError, match=r"checked against SGLang 0\.5\.23 only"):
        sgl_plan(k3, engine="sglang@main@003fca80")
