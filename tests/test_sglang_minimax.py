"""SGLang 0.5.23's MiniMax-M3 pool (kvbudget.engines.sglang_minimax), by hand.

Expected figures are by hand from the SGLang 0.5.23 wheel (``python/sglang/srt/``):
``mem_cache/memory_pool.py`` (``MiniMaxSparseKVPool.__init__``: a main
``MHATokenToKVPool`` of K and V on every layer, one index head of ``sparse_index_dim``
per sparse layer, ``MHATokenToKVPool`` (index K and V) or ``MHATokenToKOnlyPool``
(index K, ``sparse_disable_index_value``), ``size + page`` rows each;
``get_minimax_sparse_index_dtype``: fp8 index keys with an fp8_e4m3 KV cache on SM90 or
with fp8 attention GEMMs on SM100, else the model dtype), ``model_executor/
pool_configurator.py`` (``DefaultPoolConfigurator._compute_cell_size``, its
``is_minimax_sparse`` branch: the same bytes per token), ``configs/model_config.py``
(``get_num_kv_heads``: ``max(1, kv_heads // attn_tp)``), ``mem_cache/hybrid_cache/
hybrid_pool_assembler.py`` (``build_minimax_sparse_hicache_stack``: the main pool's
host pool from ``--hicache-size``, the index-K host pool of its tokens on top) and
``pool_host/base.py`` (``HostKVCache``: ``(int(GB x 1e9 // bytes) // page + 1) x page``
tokens). The SGLang fidelity harness (``benchmarks/fidelity/sglang``, ``--match
minimax-m3``) runs that code on the same configs (the index-value one is the harness's
``family/minimax-m3-index-value``) and agrees with every figure here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from family_configs import MINIMAX_M3, MINIMAX_M3_EAGLE3_HEAD, MINIMAX_M3_PATTERN, folder

from kvbudget import plan
from kvbudget.errors import InvalidArgumentError

GIB = 1024**3
BUDGET = 40 * GIB  # 42,949,672,960 B
PAGE = 32  # kvbudget's default --page-size, emitted


def index_value(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` without ``sparse_disable_index_value``: index V on every sparse layer."""
    out = copy.deepcopy(cfg)
    del out["text_config"]["sparse_attention_config"]["sparse_disable_index_value"]
    return out


def sglang(tmp_path: Path, cfg: dict[str, Any], **kw: Any) -> Any:
    args: dict[str, Any] = {"spec": "none", "engine": "sglang", "kv_budget": BUDGET,
                            "host_budget": 0, "gpu": "H200", "tp": 8} | kw  # fmt: skip
    return plan(folder(tmp_path, cfg), None, **args)


def tokens(cell: int) -> int:
    """``T = (budget // cell - page) // page x page``: the most page-aligned tokens whose
    ``T + page`` rows fit the budget (sglang.py ``plan_stage``)."""
    return (BUDGET // cell - PAGE) // PAGE * PAGE


def test_defaults_bf16_by_hand(tmp_path: Path) -> None:
    # family/minimax-m3-defaults at TP 8: 60 layers of max(1, 4 // 8) = 1 KV head of 128,
    # bf16: 60 x 2 x 1 x 128 x 2 = 30,720 B; 57 sparse layers, index K only
    # (sparse_disable_index_value), one bf16 head of 128: 57 x 128 x 2 = 14,592 B
    main, index = 30_720, 14_592
    p = sglang(tmp_path, MINIMAX_M3, kv_dtype="auto")
    d = p.engine.detail
    assert d["max_total_num_tokens"] == tokens(main + index) == 947_808
    assert d["device_bytes"] == (947_808 + PAGE) * 45_312 == 42_948_526_080
    assert d["indexer_bytes"] == (947_808 + PAGE) * index == 13_830_881_280
    assert p.engine.settings["--page-size"] == PAGE
    assert p.engine.settings["--max-total-tokens"] == 947_808
    assert any("MiniMaxSparseKVPool" in n for n in p.engine.notes)


@pytest.mark.parametrize(
    ("gpu", "index_bytes", "expected"),
    [
        # SM90: fp8_e4m3 KV keeps the index key in fp8 (get_minimax_sparse_index_dtype)
        ("H200", 57 * 128 * 1, 1_895_680),
        # SM100: m3_fp8_attn_gemm_enabled (trtllm_mha, which the override picks for fp8)
        ("B200", 57 * 128 * 1, 1_895_680),
        # elsewhere the index key stays in the model dtype, bf16
        ("A100-80GB", 57 * 128 * 2, 1_433_888),
    ],
)
def test_fp8_index_dtype_follows_the_gpu(
    tmp_path: Path, gpu: str, index_bytes: int, expected: int
) -> None:
    main = 60 * 2 * 1 * 128 * 1  # fp8 K/V: 15,360 B
    d = sglang(tmp_path, MINIMAX_M3, kv_dtype="fp8", gpu=gpu).engine.detail
    assert d["max_total_num_tokens"] == tokens(main + index_bytes) == expected
    assert d["indexer_bytes"] == (expected + PAGE) * index_bytes


def test_index_value_layers_keep_two_vectors(tmp_path: Path) -> None:
    # the pattern config: 12 layers (8 KV heads: 1 a rank at TP 8), 9 sparse; without
    # sparse_disable_index_value each sparse layer's index_kv_pool row holds K and V
    main = 12 * 2 * 1 * 128 * 2  # 6,144 B
    k_only = sglang(tmp_path / "k", MINIMAX_M3_PATTERN, kv_dtype="auto").engine.detail
    assert k_only["max_total_num_tokens"] == tokens(main + 9 * 128 * 2) == 5_083_968
    kv = sglang(tmp_path / "kv", index_value(MINIMAX_M3_PATTERN), kv_dtype="auto").engine.detail
    assert kv["max_total_num_tokens"] == tokens(main + 9 * 2 * 128 * 2) == 3_994_528
    assert kv["indexer_bytes"] == (3_994_528 + PAGE) * 4_608 == 18_406_932_480


def test_dp_attention_keeps_every_kv_head(tmp_path: Path) -> None:
    # TP 8, DP 8 with DP attention: attn_tp 1, so all 8 KV heads on the rank:
    # 12 x 2 x 8 x 128 x 2 = 49,152 B, plus the index keys 9 x 128 x 2 = 2,304 B
    p = sglang(tmp_path, MINIMAX_M3_PATTERN, kv_dtype="auto", dp=8, dp_attention=True)
    d = p.engine.detail
    assert d["max_total_num_tokens"] == tokens(49_152 + 2_304) == 834_624
    assert d["indexer_bytes"] == (834_624 + PAGE) * 2_304 == 1_923_047_424
    assert d["max_running_requests"] == 256 // 8  # resolve_max_num_reqs per DP worker


def test_hicache_puts_the_index_host_pool_on_top(tmp_path: Path) -> None:
    # --hicache-size sizes the main pool's host pool (30,720 B a token); the index-K host
    # pool has its tokens (14,592 B each) on top, so 64 GB of host budget holds 43 GB:
    # (int(43e9 // 30,720) // 32 + 1) x 32 = 1,399,744 tokens x 45,312 B = 63,425,200,128
    # B; 44 GB would pin 1,432,320 x 45,312 = 64,901,283,840 B
    d = sglang(tmp_path, MINIMAX_M3, kv_dtype="auto", host_budget=64 * 10**9).engine.detail
    assert d["hicache_size_gb"] == 43
    assert d["host_tokens"] == (int(43e9 // 30_720) // PAGE + 1) * PAGE == 1_399_744
    assert d["host_indexer_bytes"] == 1_399_744 * 14_592 == 20_425_064_448
    assert d["host_bytes"] == 1_399_744 * 45_312 == 63_425_200_128


@pytest.mark.parametrize(
    ("kw", "cfg", "match"),
    [
        ({"spec": "mtp"}, MINIMAX_M3, r"no MiniMax-M3 MTP model"),
        ({"spec": "ngram", "pp": 2, "host_budget": 64 * 10**9}, MINIMAX_M3, r"PP > 1"),
        ({"host_budget": 64 * 10**9}, index_value(MINIMAX_M3_PATTERN), r"index-K-only"),
        ({"kv_dtype": "fp8", "gpu": None, "gpu_memory": 80 * GIB}, MINIMAX_M3, r"--gpu"),
        ({"gpu": "MI300X"}, MINIMAX_M3, r"ROCm"),
        ({"engine": "sglang@main@003fca80"}, MINIMAX_M3, r"checked against SGLang 0.5.23"),
    ],
)
def test_refusals(tmp_path: Path, kw: dict[str, Any], cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        sglang(tmp_path, cfg, **kw)


def test_config_refusals(tmp_path: Path) -> None:
    other = copy.deepcopy(MINIMAX_M3) | {"architectures": ["MiniMaxM3ForCausalLM"]}
    with pytest.raises(InvalidArgumentError, match=r"is_minimax_sparse"):
        sglang(tmp_path / "arch", other)
    bare = copy.deepcopy(MINIMAX_M3)
    del bare["text_config"]["sparse_attention_config"]
    with pytest.raises(InvalidArgumentError, match=r"no sparse_attention_config"):
        sglang(tmp_path / "bare", bare)
    nvfp4 = copy.deepcopy(MINIMAX_M3) | {
        "quantization_config": {
            "quant_method": "mxfp8",
            "moe_quant_algo": "NVFP4",
            "moe_quant_format": "nvfp4-pack-quantized",
        }
    }
    with pytest.raises(InvalidArgumentError, match=r"minimax_m3_nvfp4"):
        sglang(tmp_path / "nvfp4", nvfp4)


def test_eagle3_head_is_a_sidecar_draft(tmp_path: Path) -> None:
    # family/minimax-m3-eagle3-head: one Llama layer of 8 KV heads of 128, 1 a rank at
    # TP 8, fp8: 2 x 128 = 256 B a token in the draft worker's MHATokenToKVPool; the
    # target's cell with fp8 index keys (H200) is 60 x 256 + 57 x 128 = 22,656 B, so
    # T = (budget // (22,656 + 256) - 32) // 32 x 32; SGLang's own estimate prices the
    # head at int(22,656 x (1 + 1 / 60)) = 23,033 B, which the emitted
    # --mem-fraction-static covers ("SGLang 0.5.23 --match 'minimax-m3-defaults eagle3'")
    head = folder(tmp_path / "head", MINIMAX_M3_EAGLE3_HEAD)
    p = plan(folder(tmp_path / "t", MINIMAX_M3), head, spec="eagle3", engine="sglang",
             kv_budget=BUDGET, host_budget=64 * 10**9, gpu="H200", tp=8,
             kv_dtype="fp8")  # fmt: skip
    d = p.engine.detail
    assert d["max_total_num_tokens"] == tokens(22_656 + 256) == 1_874_496
    draft = [x for x in p.engine.pools if x.role == "draft" and x.tier == "gpu"]
    assert [x.bytes for x in draft] == [(1_874_496 + PAGE) * 256] == [479_879_168]
    # HiCache: 42 GB for the main host pool, (int(42e9 // 15,360) // 32 + 1) x 32 =
    # 2,734,400 tokens, with the index-K and the head's host pools of as many on top:
    # 2,734,400 x (15,360 + 7,296 + 256) = 62,650,572,800 B of the 64 GB
    assert d["hicache_size_gb"] == 42
    assert d["host_tokens"] == d["host_draft_tokens"] == 2_734_400
    assert d["host_indexer_bytes"] == 2_734_400 * 7_296
    assert d["host_bytes"] == 2_734_400 * 22_912 == 62_650_572_800


def test_draft_models_are_refused(tmp_path: Path) -> None:
    # a whole draft model's pool beside the MiniMax pool is not checked against SGLang
    with pytest.raises(InvalidArgumentError, match=r"--spec draft-target: its draft pools"):
        plan(folder(tmp_path, MINIMAX_M3), "meta-llama/Llama-3.2-1B-Instruct",
             spec="draft-target", engine="sglang", kv_budget=BUDGET, host_budget=0,
             gpu="H200", tp=8)  # fmt: skip


def test_the_index_dtype_tables_name_gpu_presets() -> None:
    # SM90_GPUS / SM100_GPUS are matched against GpuSpec.name: a renamed preset would
    # silently fall to the model-dtype branch
    from kvbudget.engines.sglang_minimax import SM90_GPUS, SM100_GPUS
    from kvbudget.gpus import get_gpu, list_gpus

    names = {get_gpu(gpu).name for gpu in list_gpus()}
    assert names >= SM90_GPUS | SM100_GPUS
    assert not SM90_GPUS & SM100_GPUS
