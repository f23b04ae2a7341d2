"""Gemma-4 under TensorRT-LLM (engines/trtllm_gemma4.py): the V2 manager it always gets,
every layer at its own shape, and what TensorRT-LLM does not run for it.

Configs from tests/family_configs.py (shared with benchmarks/fidelity/trtllm, whose
``--match gemma4`` cases run TensorRT-LLM's transcribed KvCacheCreator and
KVCacheManagerV2 on them). Expected figures by hand, each beside the code it follows
(line numbers of the transcription in shared/trtllm-src, NVIDIA/TensorRT-LLM @ 38198e34):
``_util.py`` ``_non_hybrid_kv_cache_manager_cls`` (line 80: V2 for ``is_gemma4_hybrid``),
``_validate_or_fallback_kv_cache_manager_v2`` (line 676: the Gemma-4 refusal, reached only
for listed incompatibilities, none at this commit), ``_create_kv_cache_manager`` (lines
2022-2041: per-layer head_dim and kv heads from ``layer_types``; 2049: derived windows,
unused when ``max_attention_window`` is given); ``kv_cache_manager_v2.py``
``KVCacheManagerV2.__init__`` (lines 526-564: ``(kv + tp - 1) // tp`` heads and
``head_dim_per_layer`` per layer), the buffer size (lines 1003-1006: kv factor x heads x
head_dim) and ``_get_static_cache_size_layer_components`` (lines 315-370: one
``head_dim x num_key_value_heads`` size for every layer); and the V2 runtime
(kvbudget.engines.trtllm_v2_storage).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from family_configs import (
    FAMILY_CONFIGS,
    GEMMA4_EAGLE3_HEAD,
    GEMMA4_KV_SHARED,
    GEMMA4_MULTIMODAL,
    folder,
)
from typer.testing import CliRunner

from kvbudget import plan
from kvbudget.cli import app
from kvbudget.errors import InvalidArgumentError

GIB = 1 << 30
DEFAULTS = FAMILY_CONFIGS["family/gemma4-defaults"]  # multimodal wrapper, text defaults
SEQ = 32_768
TPB = 32


def trt(tmp_path: Path, cfg: dict[str, Any], engine: str = "trtllm", **kw: Any) -> Any:
    """``cfg`` planned for ``engine`` at 8 GiB, no host tier, 32,768 tokens."""
    args: dict[str, Any] = {
        "spec": "none",
        "engine": engine,
        "kv_budget": "8GiB",
        "host_budget": 0,
        "max_seq_len": SEQ,
    }
    return plan(folder(tmp_path / "model", cfg), **(args | kw))


def manager(p: Any) -> dict[str, Any]:
    (stage,) = p.engine.detail["stages"]
    (m,) = stage["managers"]
    result: dict[str, Any] = m
    return result


def gpu_groups(p: Any) -> list[dict[str, Any]]:
    return [g for g in manager(p)["pools"] if g["tier"] == "gpu"]


def test_defaults_bytes_per_token_per_pool_group_by_hand(tmp_path: Path) -> None:
    p = trt(tmp_path, DEFAULTS)
    m = manager(p)
    assert m["manager_class"] == "KVCacheManagerV2" and m["num_layers"] == 30
    # _create_kv_cache_manager: sliding layers (25: every sixth layer full, the last full)
    # 4 KV heads x head_dim 256; full layers (5) global_head_dim 512, 4 KV heads (no
    # attention_k_eq_v); K and V at 2 B: sliding 2 x 4 x 256 x 2 = 4,096 B, full
    # 2 x 4 x 512 x 2 = 8,192 B per token
    assert m["bytes_per_token"] == 25 * 4096 + 5 * 8192 == 143_360
    sliding, full = gpu_groups(p)
    assert sliding["windows"] == [512] and full["windows"] == [None]
    # a slot holds one 32-token block of every layer of its group, K and V apart:
    # sliding 50 buffers of 4 x 256 x 2 x 32 = 65,536 B; full 10 of 4 x 512 x 2 x 32
    assert sliding["slot_bytes"] == [50 * 65_536] == [3_276_800]
    assert full["slot_bytes"] == [10 * 131_072] == [1_310_720]


def test_defaults_slots_and_tokens_by_hand(tmp_path: Path) -> None:
    p = trt(tmp_path, DEFAULTS)
    sliding, full = gpu_groups(p)
    # 8 GiB quota: granularity 2 MiB << log2(8 GiB / 1 GiB) = 16 MiB, 512 grains. Initial
    # ratio: one 2,049-token request with 2,048 in history holds cdiv(2049, 32) = 65
    # blocks, 65 - (2049 - 512) // 32 = 17 of them in the window: 17 x 3,276,800 B ->
    # 4 grains, 65 x 1,310,720 B -> 6 grains: 0.4 / 0.6. Smallest ratio first: the
    # sliding group gets round(512 x 0.4) = 205 grains, whose 3,439,329,280 B hold 1,049
    # slots (1,050 would need 3,440,640,000); the full group the other 307 grains,
    # 5,150,605,312 B: 3,929 slots (3,930 would need 5,151,129,600)
    grain = 16 << 20
    assert (sliding["slots"], sliding["bytes"]) == (1049, 205 * grain)
    assert 1049 * 3_276_800 <= 205 * grain < 1050 * 3_276_800
    assert (full["slots"], full["bytes"]) == (3929, 307 * grain)
    assert 3929 * 1_310_720 <= 307 * grain < 3930 * 1_310_720
    assert p.capacity.tokens == 3929 * TPB == 125_728


def test_tp8_replicates_the_kv_heads_per_layer(tmp_path: Path) -> None:
    p = trt(tmp_path, DEFAULTS, tp=8)
    # KVCacheManagerV2: (kv + tp - 1) // tp heads per layer: 4 heads at TP 8 -> 1 per rank;
    # sliding 2 x 1 x 256 x 2 = 1,024 B, full 2 x 1 x 512 x 2 = 2,048 B per token
    assert manager(p)["bytes_per_token"] == 25 * 1024 + 5 * 2048 == 35_840


def test_attention_dp_keeps_every_kv_head(tmp_path: Path) -> None:
    moe = {**FAMILY_CONFIGS["family/gemma4-moe"], "enable_moe_block": True}
    p = trt(tmp_path, moe, tp=8, dp=8, dp_attention=True, ep=8)
    # attention DP: each rank its own attention group (tp 1 for the heads); sliding 8 KV
    # heads x 256, full 2 (num_global_key_value_heads, attention_k_eq_v) x 512, at 2 B:
    # 2 x 8 x 256 x 2 = 8,192 and 2 x 2 x 512 x 2 = 4,096 B per token
    assert manager(p)["bytes_per_token"] == 25 * 8192 + 5 * 4096 == 225_280
    # under TP 8: ceil(8 / 8) = 1 and ceil(2 / 8) = 1 head per rank
    tp8 = trt(tmp_path / "tp8", moe, tp=8)
    assert manager(tp8)["bytes_per_token"] == 25 * 1024 + 5 * 2048 == 35_840


def test_kv_shared_layers_keep_their_slots(tmp_path: Path) -> None:
    p = trt(tmp_path, GEMMA4_KV_SHARED)
    m = manager(p)
    # the manager is built for all num_hidden_layers (35) layer_types entries; the last 20
    # read earlier layers' caches (modeling_gemma4.py cache_layer_idx) but keep their own
    # slots. Full layers 5, 11, 17, 23, 29 and the forced last one, 34: 6; sliding 29.
    # One KV head (num_global_key_value_heads 1 under attention_k_eq_v on full layers):
    # sliding 2 x 1 x 256 x 2 = 1,024 B, full 2 x 1 x 512 x 2 = 2,048 B per token
    assert m["num_layers"] == 35
    assert m["bytes_per_token"] == 29 * 1024 + 6 * 2048 == 41_984
    sliding, full = gpu_groups(p)
    assert sliding["slot_bytes"] == [29 * 2 * 256 * 2 * TPB] == [950_272]
    assert full["slot_bytes"] == [6 * 2 * 512 * 2 * TPB] == [393_216]
    # the 20 shared layers' (15-34) slots: 4 full (17, 23, 29 and 34), 16 sliding:
    # 16 x 1,024 + 4 x 2,048 = 24,576 of the 41,984 B per token
    warning = "the 20 KV-shared ones (which read an earlier layer's cache) keep slots they "
    warning += f"never write, {16 * 1024 + 4 * 2048} of the 41984 B per token per rank"
    assert any(warning in w for w in p.engine.warnings), p.engine.warnings
    # the multimodal wrapper of the same text config: the same manager
    mm = trt(tmp_path / "mm", GEMMA4_MULTIMODAL["family/gemma4-kv-shared-mm"])
    assert manager(mm)["bytes_per_token"] == 41_984


def test_emitted_windows_and_manager(tmp_path: Path) -> None:
    p = trt(tmp_path, DEFAULTS)
    s = p.engine.settings
    assert s["kv_cache_config.use_kv_cache_manager_v2"] is True
    # five sliding layers of 512 then one full (max_seq_len + 1024), repeated
    assert s["kv_cache_config.max_attention_window"] == [512] * 5 + [SEQ + 1024]
    assert p.engine.detail["kv_cache_manager"] == "V2"
    assert "is_gemma4_hybrid" in p.engine.notes[0]
    assert "builds Gemma-4 no V1 manager" in p.engine.notes[0]


def test_creator_price_is_one_shape_for_every_layer(tmp_path: Path) -> None:
    p = trt(tmp_path, DEFAULTS)
    # _get_static_cache_size_layer_components: config head_dim 256 x 4 KV heads x 2 (K, V)
    # x 2 B for every layer; the slope is the full layers' (5 x 4,096), not 5 x 8,192
    assert manager(p)["cost"]["slope"] == 5 * 2 * 256 * 4 * 2 == 20_480


def test_v1_is_refused_in_trtllm_terms(tmp_path: Path) -> None:
    # _non_hybrid_kv_cache_manager_cls: KVCacheManagerV2 for is_gemma4_hybrid whatever
    # use_kv_cache_manager_v2 says; trtllm@v1 would describe pools TensorRT-LLM never builds
    with pytest.raises(InvalidArgumentError, match="builds no V1 KVCacheManager"):
        trt(tmp_path, DEFAULTS, engine="trtllm@v1")
    # trtllm@v2 is the same plan as the auto pick
    auto, v2 = trt(tmp_path, DEFAULTS), trt(tmp_path / "v2", DEFAULTS, engine="trtllm@v2")
    assert auto.capacity.tokens == v2.capacity.tokens == 125_728


def test_what_tensorrt_llm_does_not_run_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="pp_size == 1"):
        trt(tmp_path, DEFAULTS, tp=4, pp=2)
    head = folder(tmp_path / "head", GEMMA4_EAGLE3_HEAD)
    with pytest.raises(InvalidArgumentError, match="SpecDecOneEngineForCausalLM"):
        trt(tmp_path, DEFAULTS, spec="eagle3", draft=head)
    assistant = folder(tmp_path / "assistant", FAMILY_CONFIGS["family/gemma4-assistant"])
    with pytest.raises(InvalidArgumentError, match="no one-model draft"):
        trt(tmp_path, DEFAULTS, spec="mtp", draft=assistant)
    moe = FAMILY_CONFIGS["family/gemma4-moe"]
    with pytest.raises(InvalidArgumentError, match="enable_moe_block"):
        trt(tmp_path, moe, tp=8, dp=8, dp_attention=True, ep=8)
    same = {**DEFAULTS, "text_config": {**DEFAULTS["text_config"], "global_head_dim": 256}}
    with pytest.raises(InvalidArgumentError, match="global_head_dim equals"):
        trt(tmp_path / "same", same)


def test_ngram_plans_without_a_draft_manager(tmp_path: Path) -> None:
    p = trt(tmp_path, DEFAULTS, spec="ngram")
    assert [m["role"] for m in p.engine.detail["stages"][0]["managers"]] == ["target"]
    assert p.engine.settings["speculative_config.decoding_type"] == "NGram"


def test_cli_plans_it_end_to_end(tmp_path: Path) -> None:
    target = folder(tmp_path / "model", DEFAULTS)
    args = ["plan", "--target", target, "--spec", "none", "--kv-budget", "8GiB"]
    args += ["--host-budget", "0", "--max-seq-len", str(SEQ)]
    result = CliRunner().invoke(app, [*args, "--engine", "trtllm", "--json"])
    assert result.exit_code == 0, result.output
    engine = json.loads(result.stdout)["engine"]
    assert engine["detail"]["kv_cache_manager"] == "V2"
    assert engine["capacity"]["tokens"] == 125_728
    refused = CliRunner().invoke(app, [*args, "--engine", "trtllm@v1"])
    assert refused.exit_code == 2
    assert "builds no V1 KVCacheManager" in refused.output
