"""SGLang 0.5.23's DeepSeek-V4 pools (kvbudget.engines.sglang_dsv4), by hand.

Expected figures are by hand from the SGLang 0.5.23 wheel (``python/sglang/srt/``):
``mem_cache/deepseek_v4_memory_pool.py`` (``DeepSeekV4SingleKVPool.create_buffer``: a
584-byte ``KVLayout.V4`` row, pages of ``ceil(p x 584 / 576) x 576`` B;
``_num_dsv4_physical_kv_pages``: ``ceil((size + 256) / p)`` pages;
``DeepSeekV4TokenToKVPool._init_compressed_pools``; ``DeepSeekV4IndexerPool``: ``128 +
128 // 128 x 4`` B a key; ``get_compress_state_ring_size``: rings 8 and 128),
``mem_cache/deepseek_v4_compress_state.py`` (``CompressStatePool``: ``size + ring + 1``
rows padded to the ratio, ``2 x (1 + overlap) x dim`` float32 values a row) and
``model_executor/pool_configurator.py`` (``DSV4PoolConfigurator._compute_dsv4_sizes``;
with MTP, ``__init__``'s ``(L + 1) / L`` inflation and ``calculate_pool_sizes``), and for
the EAGLE draft ``configs/model_config.py`` (``_config_draft_model``: one NextN layer)
and ``mem_cache/kv_cache_configurator.py`` (``_build_dsv4_kv_pool``: window rows only).
The SGLang fidelity harness (``benchmarks/fidelity/sglang``, cases ``family/deepseek-v4-*``)
runs that code on the same configs and measured the plan figures asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import DEEPSEEK_V4, DEEPSEEK_V4_SLIDING, folder
from hypothesis import given
from hypothesis import strategies as st

from kvbudget import plan
from kvbudget.engines import sglang_dsv4
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError

GIB = 1024**3
RATIO = {"sliding_attention": 0, "compressed_sparse_attention": 4,
         "heavily_compressed_attention": 128}  # fmt: skip


# family/deepseek-v4-sliding's pool: 8 layers, 3 of ratio 4 (with the indexer), 3 of 128
LAY = sglang_dsv4.Dsv4Layout(layers=8, c4_layers=3, c128_layers=3, head_dim=512,
                             index_head_dim=128, window=128)  # fmt: skip


def sglang_form(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config with DeepSeek's per-layer compress_ratios (decoder + MTP layers), the
    form SGLang reads, as the harness writes it."""
    out = {k: v for k, v in cfg.items() if k not in ("layer_types", "compress_rates")}
    mtp = [0] * cfg["num_nextn_predict_layers"]
    out["compress_ratios"] = [RATIO[t] for t in cfg["layer_types"]] + mtp
    return out


def sliding_plan(tmp_path: Path, **kw: Any) -> Any:
    args: dict[str, Any] = {"spec": "none", "engine": "sglang", "kv_budget": 40 * GIB,
                            "host_budget": 0, "kv_dtype": "fp8", "gpu": "H200"} | kw  # fmt: skip
    return plan(folder(tmp_path, sglang_form(DEEPSEEK_V4_SLIDING)), None, **args)


def test_sliding_pools_by_hand(tmp_path: Path) -> None:
    # family/deepseek-v4-sliding: 8 layers (2 sliding, then ratio 4 / 128 x 3), 40 GiB,
    # TP 8, DP attention 8: the harness case "... none 40GiB fp8 nohost dpa8"
    p = sliding_plan(tmp_path, tp=8, dp=8, dp_attention=True)
    d = p.engine.detail
    full = 38_228_224  # measured by the harness (SGLang's max_total_num_tokens)
    assert d["max_total_num_tokens"] == full == 149_329 * 256
    # _get_swa_tokens: int(full x 0.1) = 3,822,822, floored to the 256-token page
    assert d["swa_tokens"] == 3_822_592 == 14_932 * 256
    # resolve_max_num_reqs: 256 // 8 per DP worker
    assert d["max_running_requests"] == 32
    swa = 14_933 * 149_760 * 8  # (swa + 256) / 256 pages of ceil(256 x 584 / 576) x 576 B
    c4 = 149_333 * 37_440 * 3  # full // 4 = 9,557,056 rows, + 256, / 64; 65 x 576 B a page
    c128 = 149_457 * 1_728 * 3  # full // 128 = 298,658, + 256, / 2; 3 x 576 B a page
    indexer = 149_333 * 64 * 132 * 3  # c128 x 32 rows, + 256, / 64; 128 + 4 B a key
    # c4 state: swa // 256 x 8 = 119,456 rows + 8 + 1 -> 119,468 (to 4); attention 2 x 2
    # x 512 and indexer 2 x 2 x 128 float32 values a row
    c4_state = 119_468 * (2048 + 512) * 4 * 3
    # c128 state: (32 + 1) x 128 = 4,224 rows + 128 + 1 -> 4,480 (to 128); 2 x 512 values
    c128_state = 4_480 * 1024 * 4 * 3
    by_name = {x.name: x.bytes for x in p.engine.pools}
    assert by_name == {"swa": swa, "c4": c4, "c128": c128, "c4 indexer": indexer,
                       "c4 state": c4_state, "c128 state": c128_state}  # fmt: skip
    total = swa + c4 + c128 + indexer + c4_state + c128_state
    # measured by the harness: SGLang's target_pool_bytes and indexer_pool_bytes
    assert total == d["device_bytes"] == 42_948_599_040 <= 40 * GIB
    assert indexer == d["indexer_bytes"] == 3_784_695_552
    # one more page would not fit the budget
    assert sglang_dsv4.pools(LAY, full + 256, 32).total_bytes > 40 * GIB
    s = p.engine.settings
    assert (s["--max-total-tokens"], s["--page-size"], s["--swa-full-tokens-ratio"]) == (
        full, 256, 0.1)  # fmt: skip
    assert s["--kv-cache-dtype"] == "fp8_e4m3"


def test_defaults_plan(tmp_path: Path) -> None:
    # family/deepseek-v4-defaults, 8 GiB, TP 1 (harness case "... none 8GiB bf16 nohost
    # tp1", which measured 790,784 tokens and 8,586,617,664 B): 43 layers, 20 of
    # ratio 4 (odd offsets after the first two), 23 of ratio 128
    target = folder(tmp_path, sglang_form(DEEPSEEK_V4))
    p = plan(target, None, spec="none", engine="sglang", kv_budget=8 * GIB, host_budget=0,
             gpu="H200")  # fmt: skip
    d = p.engine.detail
    assert d["max_total_num_tokens"] == 790_784 == 3_089 * 256
    assert d["swa_tokens"] == 78_848  # int(79,078.4) = 79,078 floored to 256
    assert d["max_running_requests"] == 256
    swa = 309 * 149_760 * 43  # (78,848 + 256) / 256 pages
    c4 = (197_696 + 256) // 64 * 37_440 * 20  # 790,784 // 4 = 197,696 rows
    c128 = (6_178 + 256) // 2 * 1_728 * 23  # 790,784 // 128 = 6,178 rows
    indexer = (6_178 * 32 + 256) // 64 * 64 * 132 * 20
    c4_state = 2_476 * (2048 + 512) * 4 * 20  # 308 x 8 = 2,464 + 9 = 2,473 -> 2,476
    c128_state = 33_152 * 4096 * 23  # 257 x 128 = 32,896 + 129 = 33,025 -> 33,152
    total = swa + c4 + c128 + indexer + c4_state + c128_state
    assert d["device_bytes"] == total == 8_586_617_664 <= 8 * GIB


def test_bf16_is_planned_as_sglangs_fp8_rows(tmp_path: Path) -> None:
    # bf16 emits --kv-cache-dtype auto, which SGLang resolves to fp8_e4m3 for DeepSeek-V4
    # (_deepseek_v4_kv_cache_dtype): the same pools as fp8, with a warning saying so
    bf16 = sliding_plan(tmp_path / "bf16", kv_dtype="bf16")
    fp8 = sliding_plan(tmp_path / "fp8")
    assert bf16.engine.settings["--kv-cache-dtype"] == "auto"
    assert bf16.engine.pools == fp8.engine.pools
    assert any("fp8_e4m3" in w for w in bf16.engine.warnings)
    assert not fp8.engine.warnings


def test_refusals(tmp_path: Path) -> None:
    # SGLang's ModelConfig reads compress_ratios; the transformers form fails there
    with pytest.raises(InvalidArgumentError, match="compress_ratios"):
        plan(folder(tmp_path / "tf", DEEPSEEK_V4_SLIDING), spec="none", engine="sglang",
             kv_budget="8GiB", host_budget=0)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="without speculative decoding or with"):
        sliding_plan(tmp_path / "ngram", spec="ngram")
    # the spec ring of 16 rows serves 16 - 8 + 2 = 10 draft tokens: K = 10 needs 11
    with pytest.raises(InvalidArgumentError, match="serves at most 10 draft tokens"):
        sliding_plan(tmp_path / "k10", spec="mtp", max_draft_len=10)
    # SGLang asserts a uint8 store for the V4 row (DeepSeekV4SingleKVPool.create_buffer):
    # only fp8 rows; kvbudget's nvfp4 would be --kv-cache-dtype nvfp4
    with pytest.raises(InvalidArgumentError, match="nvfp4"):
        sliding_plan(tmp_path / "nvfp4", kv_dtype="nvfp4")
    with pytest.raises(InvalidArgumentError, match="HiCache"):
        sliding_plan(tmp_path / "host", host_budget=64 * 10**9)
    # 8 MiB: the sliding pool would be at most window + page (validate_swa_pool_size);
    # below 4,679,680 B kvbudget's ledger refuses first (one sequence's window caches and
    # compressor inputs, CompressedMLALayer.window_parts)
    with pytest.raises(InfeasibleBudgetError, match="validate_swa_pool_size"):
        sliding_plan(tmp_path / "small", kv_budget=8 * 1024**2)


def test_mtp_pools_by_hand(tmp_path: Path) -> None:
    # harness case "family/deepseek-v4-sliding mtp 40GiB fp8 nohost dpa8": EAGLE, K = 3
    p = sliding_plan(tmp_path, spec="mtp", tp=8, dp=8, dp_attention=True)
    d = p.engine.detail
    # SGLang's estimate: per sliding row 585 B (149,760 / 256) x 8 layers + the c4 states
    # priced per row, 16 / 256 x (2 x 2 x 512 + 2 x 2 x 128) x 4 B x 3 layers = 6,600 B;
    # per full token 0.1 x 6,600 + 3 x (585 / 4 + 132 / 4) + 3 x 864 / 128 = 1,218 B,
    # x (8 + 1) / 8 for the draft = 1,370.25 B; fixed: the c128 states of 33 slots,
    # (33 x 256 + 257 -> 8,832 rows) x 1,024 x 4 B x 3 = 108,527,616 B
    c128_state = 8_832 * 1024 * 4 * 3
    full = int((40 * GIB - c128_state) / 1370.25) // 256 * 256
    assert d["max_total_num_tokens"] == full == 31_265_024 == 122_129 * 256
    assert d["swa_tokens"] == 3_126_272  # int(3,126,502.4) floored to 256
    swa_layer = 12_213 * 149_760  # (swa + 256) / 256 pages
    c4 = 122_133 * 37_440 * 3  # full // 4 = 7,816,256 rows, + 256, / 64
    c128 = 122_257 * 1_728 * 3  # full // 128 = 244,258, + 256, / 2
    indexer = 122_133 * 64 * 132 * 3
    # the spec rings: c4 state 12,212 x 16 = 195,392 rows + 17 -> 195,412 (to 4)
    c4_state = 195_412 * (2048 + 512) * 4 * 3
    by_name = {(x.role, x.name): x.bytes for x in p.engine.pools}
    assert by_name == {
        ("target", "swa"): swa_layer * 8, ("target", "c4"): c4, ("target", "c128"): c128,
        ("target", "c4 indexer"): indexer, ("target", "c4 state"): c4_state,
        ("target", "c128 state"): c128_state,
        # DeepseekV4ForCausalLMNextN: one window-only layer of the same sliding rows
        # (the config ships 3 MTP layers; SGLang sets num_nextn_predict_layers = 1)
        ("draft", "draft swa"): swa_layer,
    }  # fmt: skip
    # measured by the harness: SGLang's target_pool_bytes and draft_pool_bytes
    assert sum(v for (role, _), v in by_name.items() if role == "target") == 38_190_832_896
    assert d["draft_bytes"] == swa_layer == 1_829_018_880
    assert d["device_bytes"] == 38_190_832_896 + 1_829_018_880 <= 40 * GIB
    # the exact pools would hold more: SGLang's inflated estimate binds
    lay = sglang_dsv4.Dsv4Layout(**{**LAY.__dict__, "draft_layers": 1})
    assert sglang_dsv4.pools(lay, full + 256 * 1000, 32).total_bytes < 40 * GIB
    s = p.engine.settings
    assert (s["--speculative-algorithm"], s["--speculative-num-steps"]) == ("EAGLE", 3)
    assert (s["--speculative-eagle-topk"], s["--speculative-num-draft-tokens"]) == (1, 4)
    assert s["--max-total-tokens"] == full


@given(st.integers(1, 200_000), st.integers(1, 1024))
def test_bytes_grow_with_pages(pages: int, running: int) -> None:
    a = sglang_dsv4.pools(LAY, pages * 256, running)
    b = sglang_dsv4.pools(LAY, (pages + 1) * 256, running)
    assert b.total_bytes > a.total_bytes
    assert a.c4 == pages * 64 and a.c128 == pages * 2 and a.swa % 256 == 0
