"""SGLang 0.5.23's DeepSeek-V4.1 pools (kvbudget.engines.sglang_dsv4), by hand.

Expected figures are by hand from the SGLang 0.5.23 wheel (``python/sglang/srt/``):
``configs/deepseek_v41.py`` (``normalize_deepseek_v41_config``: the ``text_config``
flattened, run as ``DeepseekV4ForCausalLM``); ``mem_cache/deepseek_v4_memory_pool.py``
(``collect_sources_by_ratio``: ratio-1/2 storage on ``kv_source_layer_ids`` only;
``DeepSeekV4TokenToKVPool._init_compressed_pools``: ``full // r`` latent rows in pages of
``256 // r`` rows, the 584-byte ``KVLayout.V4`` row off SM100 in pages of ``ceil(p x 584 /
576) x 576`` B, ``ceil((size + 256) / p)`` pages; the fp4 indexer keys (``force_fp4``,
``get_dsv4_indexer_bytes_per_token``: ``128 // 2 + 128 // 32 = 68`` B) of ``(full + 256)
// r`` keys in ``DSV41_INDEX_PAGE_SIZE`` = 64-key pages plus one reserved page, on every
KV source; ``_make_pair_state_pool``: ``(running + 1) x 2`` rows + ring 2 + 1, padded to
2, of ``2 x 512`` float32 values) and ``model_executor/pool_configurator.py``
(``DSV4PoolConfigurator._compute_dsv4_sizes``: the sliding pool ``int(full x 0.1)``
floored to the page); the refusals from ``arg_groups/deepseek_v4_hook.py``
(``validate_deepseek_v41_features``). DSpark (``--spec dspark``, SGLang's DSPARK):
``arg_groups/speculative_hook.py`` (``_handle_dspark``: one step of top-k 1, the verify
window ``gamma + 1``, the draft path defaulted to the target, whose config bundles the
drafter, ``--enable-dp-lm-head`` with DP attention); ``configs/model_config.py``
(``_config_draft_model``: ``DeepseekV4ForCausalLMDSpark``); ``models/deepseek_v4_dspark.py``
(``num_stages = len(dspark_target_layer_ids)``, each stage ``DSparkAttention`` of compress
ratio 0); ``mem_cache/kv_cache_configurator.py`` (``_build_dsv4_kv_pool``, draft worker:
window rows only on every stage, at the target's sliding tokens);
``mem_cache/deepseek_v4_memory_pool.py`` (``get_compress_state_ring_size(2, n)``: the
pair ring ``1 << (n + 1).bit_length()``) and ``model_executor/pool_configurator.py``
(``DSV4PoolConfigurator``: the ``(L + 1) / L`` inflation, one draft layer whatever the
stages; ``calculate_pool_sizes``). The SGLang fidelity harness
(``benchmarks/fidelity/sglang``, cases ``family/deepseek-v41-*``) runs that code on the same
configs and measured the plan figures asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import DEEPSEEK_V41, DEEPSEEK_V41_DSPARK, DEEPSEEK_V41_RINGS, folder
from hypothesis import given
from hypothesis import strategies as st

from kvbudget import plan
from kvbudget.engines import sglang_dsv4
from kvbudget.errors import InvalidArgumentError

GIB = 1024**3
ROW_PAGE_256 = 149_760  # ceil(256 x 584 / 576) x 576: a 256-row latent page
ROW_PAGE_128 = 74_880  # ceil(128 x 584 / 576) x 576: a 128-row latent page
KEY_PAGE = 64 * 68  # 64 fp4 keys of 128 / 2 + 128 / 32 B

# family/deepseek-v41-rings: 8 layers, ratios [0, 2, 2, 2, 2, 1, 1, 1], KV sources 1-5:
# four ratio-2 sources (1-4), one ratio-1 source (5); layers 6 and 7 read layer 5's
RINGS = sglang_dsv4.Dsv4Layout(layers=8, c4_layers=0, c128_layers=0, head_dim=512,
                               index_head_dim=128, window=128, c1_layers=1,
                               c2_layers=4)  # fmt: skip


def sglang_plan(tmp_path: Path, cfg: dict[str, Any], **kw: Any) -> Any:
    args: dict[str, Any] = {"spec": "none", "engine": "sglang", "kv_budget": 40 * GIB,
                            "host_budget": 0, "kv_dtype": "fp8", "gpu": "H200"} | kw  # fmt: skip
    return plan(folder(tmp_path, cfg), None, **args)


def test_defaults_pools_by_hand(tmp_path: Path) -> None:
    # harness case "family/deepseek-v41-defaults none 40GiB fp8 nohost tp1": 43 layers,
    # ratios [0, 0] + [2] x 20 + [1] x 21, KV sources every fourth layer from 2: layers
    # 2, 6, 10, 14, 18 of ratio 2, 22, 26, 30, 34, 38, 42 of ratio 1
    p = sglang_plan(tmp_path, DEEPSEEK_V41)
    d = p.engine.detail
    full = 5_322_496  # measured by the harness (SGLang's max_total_num_tokens)
    assert d["max_total_num_tokens"] == full == 20_791 * 256
    # _get_swa_tokens: int(532,249.6) = 532,249 floored to the 256-token page
    assert d["swa_tokens"] == 532_224 == 2_079 * 256
    assert d["max_running_requests"] == 256
    swa = 2_080 * ROW_PAGE_256 * 43  # (swa + 256) / 256 pages on every layer
    c1 = 20_792 * ROW_PAGE_256 * 6  # full rows, (full + 256) / 256 pages
    c2 = 20_793 * ROW_PAGE_128 * 5  # full // 2 = 2,661,248 rows, + 256, / 128
    # keys: (full + 256) // 1 = 5,322,752, + 64, / 64 = 83,169 pages; // 2 = 2,661,376,
    # + 64, / 64 = 41,585 pages. Layers 30, 34, 38 and 42 are no index sources (vLLM
    # gives them no keys), but SGLang builds the ratio's pool over all its KV sources
    c1_keys = 83_169 * KEY_PAGE * 6
    c2_keys = 41_585 * KEY_PAGE * 5
    # pair state: 257 slots x 2 = 514 rows + 2 + 1 = 517 -> 518; 2 x 512 float32 values
    c2_state = 518 * 1024 * 4 * 5
    by_name = {x.name: x.bytes for x in p.engine.pools}
    assert by_name == {"swa": swa, "c1": c1, "c1 indexer": c1_keys, "c2": c2,
                       "c2 indexer": c2_keys, "c2 state": c2_state}  # fmt: skip
    # measured by the harness: SGLang's target_pool_bytes and indexer_pool_bytes
    total = swa + c1 + c2 + c1_keys + c2_keys + c2_state
    assert total == d["device_bytes"] == 42_949_500_288 <= 40 * GIB
    assert d["indexer_bytes"] == c1_keys + c2_keys == 3_076_598_528
    # one more page would not fit the budget
    lay = sglang_dsv4.Dsv4Layout(**{**RINGS.__dict__, "layers": 43, "c1_layers": 6,
                                    "c2_layers": 5})  # fmt: skip
    assert sglang_dsv4.pools(lay, full, 256).total_bytes == total
    assert sglang_dsv4.pools(lay, full + 256, 256).total_bytes > 40 * GIB
    s = p.engine.settings
    assert (s["--max-total-tokens"], s["--page-size"], s["--swa-full-tokens-ratio"]) == (
        full, 256, 0.1)  # fmt: skip
    assert "--speculative-algorithm" not in s


def test_rings_pools_by_hand(tmp_path: Path) -> None:
    # harness case "family/deepseek-v41-rings none 8GiB fp8 nohost dpa8": TP 8, DP 8
    # with DP attention, so 256 // 8 = 32 running requests per worker
    p = sglang_plan(tmp_path, DEEPSEEK_V41_RINGS, kv_budget=8 * GIB, tp=8, dp=8,
                    dp_attention=True)  # fmt: skip
    d = p.engine.detail
    full = 3_537_920  # measured by the harness
    assert d["max_total_num_tokens"] == full == 13_820 * 256
    assert d["swa_tokens"] == 353_792  # int(353,792.0) on the page
    assert d["max_running_requests"] == 32
    swa = 1_383 * ROW_PAGE_256 * 8
    c1 = 13_821 * ROW_PAGE_256 * 1  # one ratio-1 source (layer 5)
    c2 = 13_822 * ROW_PAGE_128 * 4  # 1,768,960 rows, + 256, / 128
    c1_keys = 55_285 * KEY_PAGE * 1  # 3,538,176 keys, + 64, / 64
    c2_keys = 27_643 * KEY_PAGE * 4  # 1,769,088 keys, + 64, / 64
    c2_state = 70 * 1024 * 4 * 4  # 33 slots x 2 = 66 + 3 = 69 -> 70 rows
    total = swa + c1 + c2 + c1_keys + c2_keys + c2_state
    # measured by the harness: SGLang's target_pool_bytes and indexer_pool_bytes
    assert d["device_bytes"] == total == 8_589_699_584 <= 8 * GIB
    assert d["indexer_bytes"] == c1_keys + c2_keys == 721_809_664
    assert sglang_dsv4.pools(RINGS, full, 32).total_bytes == total
    assert sglang_dsv4.pools(RINGS, full + 256, 32).total_bytes > 8 * GIB
    # SGLang's _to_config line: c4 / c128 are full // 4 and // 128 whatever the layers;
    # no ratio-4 owner, so no c4 state rows (ring_sizes.get(4, 0) in _compute_dsv4_sizes)
    assert p.engine.log == (
        "DSV4 pool sizes: full=3537920, swa=353792, c4=884480, c128=27640, c4_state=0, "
        "c128_state=0",
    )


def test_layout_counts_kv_sources_only(tmp_path: Path) -> None:
    # bf16 emits --kv-cache-dtype auto (SGLang's fp8_e4m3): the same pools, one warning
    bf16 = sglang_plan(tmp_path / "bf16", DEEPSEEK_V41_RINGS, kv_dtype="bf16")
    fp8 = sglang_plan(tmp_path / "fp8", DEEPSEEK_V41_RINGS)
    assert bf16.engine.pools == fp8.engine.pools
    assert any("fp8_e4m3" in w for w in bf16.engine.warnings)
    # no ratio-4 / ratio-128 pools; the ratio-1/2 readers (layers 6, 7) own nothing
    names = [x.name for x in fp8.engine.pools]
    assert names == ["swa", "c1", "c1 indexer", "c2", "c2 indexer", "c2 state"]


def test_dspark_pools_by_hand(tmp_path: Path) -> None:
    # harness case "family/deepseek-v41-dspark dspark 40GiB fp8 nohost tp1": the defaults'
    # 43 layers (6 ratio-1 and 5 ratio-2 KV sources) and 3 DSpark stages, K = 3 (the
    # default --max-draft-len): gamma 3, 4 draft tokens
    p = sglang_plan(tmp_path, DEEPSEEK_V41_DSPARK, spec="dspark")
    d = p.engine.detail
    # SGLang's estimate (calculate_pool_sizes): per full token 0.1 x 585 x 43 (sliding
    # rows) + 6 x (585 + 68) (ratio 1) + 5 x (585 + 68) / 2 (ratio 2) = 8,066 B, x 44 / 43
    # for the draft (one layer whatever the stages) = 8,253.58 B; fixed: the pair states
    # of 257 slots at the 8-row ring (below), 42,311,680 B; int(42,907,361,280 / 8,253.58)
    # = 5,198,635 -> 5,198,592 on the page, which with the reserved pages' 1,843,200 B
    # (6 + 5 latent pages of 256 x 585 B, no key past its page) is over: one page less
    c2_state = 2_066 * 1024 * 4 * 5  # 257 x 8 = 2,056 rows + 8 + 1 = 2,065 -> 2,066
    assert (40 * GIB - c2_state) / 8_066 / (44 / 43) > 5_198_592  # the floor's page fits
    full = 5_198_336  # measured by the harness (SGLang's max_total_num_tokens)
    assert d["max_total_num_tokens"] == full == 20_306 * 256
    assert d["swa_tokens"] == 519_680 == 2_030 * 256  # int(519,833.6) on the page
    assert d["max_running_requests"] == 256
    swa_layer = 2_031 * ROW_PAGE_256  # (swa + 256) / 256 pages
    by_name = {(x.role, x.name): x.bytes for x in p.engine.pools}
    assert by_name == {
        ("target", "swa"): swa_layer * 43,
        ("target", "c1"): 20_307 * ROW_PAGE_256 * 6,  # (full + 256) / 256 pages
        ("target", "c1 indexer"): 81_229 * KEY_PAGE * 6,  # 5,198,592 keys, + 64, / 64
        ("target", "c2"): 20_308 * ROW_PAGE_128 * 5,  # 2,599,168 rows, + 256, / 128
        ("target", "c2 indexer"): 40_615 * KEY_PAGE * 5,  # 2,599,296 keys, + 64, / 64
        # get_compress_state_ring_size(2, 4): 1 << (5).bit_length() = 8 rows a slot
        ("target", "c2 state"): c2_state,
        # DeepseekV4ForCausalLMDSpark: 3 window-only stages (len(dspark_target_layer_ids))
        # in the draft worker's own pool, at the target's sliding rows
        ("draft", "draft swa"): swa_layer * 3,
    }  # fmt: skip
    # measured by the harness: SGLang's target_pool_bytes and draft_pool_bytes
    assert sum(v for (role, _), v in by_name.items() if role == "target") == 41_976_508_928
    assert d["draft_bytes"] == swa_layer * 3 == 912_487_680
    assert d["device_bytes"] == 41_976_508_928 + 912_487_680 <= 40 * GIB
    # the exact pools would hold more pages: SGLang's estimate binds
    lay = sglang_dsv4.Dsv4Layout(**{**RINGS.__dict__, "layers": 43, "c1_layers": 6,
                                    "c2_layers": 5, "draft_layers": 3,
                                    "draft_tokens": 4})  # fmt: skip
    assert sglang_dsv4.pools(lay, full + 256 * 20, 256).total_bytes < 40 * GIB
    assert sglang_dsv4.estimated_full(lay, 40 * GIB, 256) == full
    s = p.engine.settings
    assert (s["--speculative-algorithm"], s["--speculative-num-steps"],
            s["--speculative-eagle-topk"]) == ("DSPARK", 1, 1)  # fmt: skip
    assert (s["--speculative-dspark-block-size"], s["--speculative-num-draft-tokens"]) == (3, 4)
    assert s["--max-total-tokens"] == full
    assert "--enable-dp-lm-head" not in s and "--speculative-draft-model-path" not in s


def test_dspark_with_dp_attention(tmp_path: Path) -> None:
    # harness case "family/deepseek-v41-dspark dspark 40GiB fp8 nohost dpa8": 256 // 8 =
    # 32 requests a worker, so the pair states are 33 x 8 + 9 = 273 -> 274 rows
    p = sglang_plan(tmp_path, DEEPSEEK_V41_DSPARK, spec="dspark", tp=8, dp=8,
                    dp_attention=True)  # fmt: skip
    d = p.engine.detail
    c2_state = 274 * 1024 * 4 * 5
    # int((40 GiB - 5,611,520) / 8,253.58) = 5,203,082 -> 5,202,944, less the reserved
    # pages' page: 5,202,688 (measured by the harness)
    assert int((40 * GIB - c2_state) / (8_066 * (44 / 43))) // 256 * 256 == 5_202_944
    assert d["max_total_num_tokens"] == 5_202_688 == 20_323 * 256
    assert {x.name: x.bytes for x in p.engine.pools}["c2 state"] == c2_state
    assert d["max_running_requests"] == 32
    # _handle_dspark: "DSpark with dp attention requires --enable-dp-lm-head."
    assert p.engine.settings["--enable-dp-lm-head"] is True


@pytest.mark.parametrize(("k", "ring"), [(1, 4), (2, 8), (3, 8), (5, 8), (6, 16), (13, 16),
                                         (14, 32)])  # fmt: skip
def test_dspark_pair_ring_follows_k(tmp_path: Path, k: int, ring: int) -> None:
    # get_compress_state_ring_size(2, K + 1): 1 << (K + 2).bit_length(), the power of two
    # above K + 1 draft tokens (2 + drafts); 2 without speculative decoding
    lay = sglang_dsv4.Dsv4Layout(**{**RINGS.__dict__, "draft_layers": 3, "draft_tokens": k + 1})
    assert lay.pair_ring == ring
    assert RINGS.pair_ring == 2
    # rings (4 ratio-2 sources): 33 slots x ring + ring + 1 rows, padded to 2
    rows = (33 * ring + ring + 1 + 1) // 2 * 2
    assert sglang_dsv4.pools(lay, 256 * 1000, 32).c2_state_bytes == rows * 1024 * 4 * 4


def test_dspark_refusals(tmp_path: Path) -> None:
    # SGLang builds one stage per dspark_target_layer_ids entry, vLLM (whose stages
    # kvbudget's weights count) n_mtp_layers / num_nextn_predict_layers
    text = {**DEEPSEEK_V41_DSPARK["text_config"], "dspark_target_layer_ids": [1, 41]}
    with pytest.raises(InvalidArgumentError, match="builds 2 DSpark stage"):
        sglang_plan(tmp_path / "stages", {**DEEPSEEK_V41_DSPARK, "text_config": text},
                    spec="dspark")  # fmt: skip
    # read and run against the 0.5.23 wheel only
    with pytest.raises(InvalidArgumentError, match="sglang@main@003fca80 is not modelled"):
        sglang_plan(tmp_path / "main", DEEPSEEK_V41_DSPARK, spec="dspark",
                    engine="sglang@main@003fca80")  # fmt: skip
    # validate_deepseek_v41_features: no pipeline parallelism, with DSpark too
    with pytest.raises(InvalidArgumentError, match="pipeline parallelism"):
        sglang_plan(tmp_path / "pp", DEEPSEEK_V41_DSPARK, spec="dspark", pp=2)


def test_refusals(tmp_path: Path) -> None:
    # validate_deepseek_v41_features: "speculative decoding other than DSpark"
    with pytest.raises(InvalidArgumentError, match="other than DSpark"):
        sglang_plan(tmp_path / "ngram", DEEPSEEK_V41_RINGS, spec="ngram")
    # --spec mtp: V4.1's num_nextn_predict_layers are DSpark stages (both engines' words)
    with pytest.raises(InvalidArgumentError, match="--speculative-algorithm DSPARK"):
        sglang_plan(tmp_path / "mtp", DEEPSEEK_V41_RINGS, spec="mtp")
    # validate_deepseek_v41_features: "pipeline parallelism"
    with pytest.raises(InvalidArgumentError, match="pipeline parallelism"):
        sglang_plan(tmp_path / "pp", DEEPSEEK_V41_RINGS, pp=2)
    with pytest.raises(InvalidArgumentError, match="HiCache"):
        sglang_plan(tmp_path / "host", DEEPSEEK_V41_RINGS, host_budget=64 * 10**9)
    with pytest.raises(InvalidArgumentError, match="nvfp4"):
        sglang_plan(tmp_path / "nvfp4", DEEPSEEK_V41_RINGS, kv_dtype="nvfp4")


@given(st.integers(1, 200_000), st.integers(1, 1024))
def test_bytes_grow_with_pages(pages: int, running: int) -> None:
    a = sglang_dsv4.pools(RINGS, pages * 256, running)
    b = sglang_dsv4.pools(RINGS, (pages + 1) * 256, running)
    assert b.total_bytes > a.total_bytes
    # c1 pages: (full + 256) / 256; c2 pages: ceil((full / 2 + 256) / 128)
    assert a.c1_bytes == (pages + 1) * ROW_PAGE_256
    assert a.c2_bytes == (pages + 2) * ROW_PAGE_128 * 4
    assert a.c4_bytes == a.c128_bytes == a.indexer_bytes == 0
