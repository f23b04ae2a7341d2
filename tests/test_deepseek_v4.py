"""DeepSeek-V4: compressed latents per layer type, the window cache, indexer caches, MTP.

No verbatim DeepSeek-V4 config is reachable from this project, so the configs are
transformers 5.20.2 ``DeepseekV4Config``'s defaults (tests/family_configs.py, shared with
the vLLM fidelity harness: ``family/deepseek-v4-*`` cases) or small ones written here.
Expected figures are by hand from vLLM 0.33.0's code (the PyPI wheel):
``models/deepseek_v4/attention.py`` (``DeepseekV4Attention.get_kv_cache_spec``,
``DeepseekV4IndexerCache``, ``DeepseekV4Indexer``), ``models/deepseek_v4/compressor.py``
(``CompressorStateCache``), ``v1/attention/backends/mla/sparse_swa.py``
(``DeepseekV4SWACache``), ``v1/kv_cache_interface.py`` (page sizes, alignment padding,
``SlidingWindowSpec.max_admission_blocks_per_request``) and ``v1/core/kv_cache_planning.py``
(``_get_packed_kv_cache_groups``, ``_approximate_gcd``); the harness runs that code on the
same configs and agrees with each figure asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import (
    DEEPSEEK_V4,
    DEEPSEEK_V4_SLIDING,
    DEEPSEEK_V4_SMALL_DIMS,
    folder,
    vllm_plan,
)
from hypothesis import given
from hypothesis import strategies as st

from kvbudget import count_params, plan, weights_bytes
from kvbudget.dtypes import parse_dtype
from kvbudget.engines.vllm import LayerSpec, _approximate_gcd, packed_groups
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import CompressedMLALayer
from kvbudget.model import parse_config

GIB = 1024**3
CSA, HCA, SLIDING = (
    "compressed_sparse_attention",
    "heavily_compressed_attention",
    "sliding_attention",
)
# A small config for weights by hand (values chosen): 4 layers, one of each type and a
# second CSA layer, hidden 256, 8 heads of 64 (16 rotary), 4 experts
SMALL: dict[str, Any] = {
    **DEEPSEEK_V4,
    **DEEPSEEK_V4_SMALL_DIMS,
    "num_attention_heads": 8,
    "head_dim": 64,
    "qk_rope_head_dim": 16,
    "layer_types": [SLIDING, CSA, HCA, CSA],
    "mlp_layer_types": ["hash_moe", "moe", "moe", "moe"],
}


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="dsv4-test")


def test_layers_follow_the_config_defaults() -> None:
    m = parse(DEEPSEEK_V4)
    ratios = [x.compress_ratio for x in m.layers]
    # DeepseekV4Config.__post_init__: two HCA layers, then CSA on odd offsets: 23 x 128, 20 x 4
    assert ratios[:4] == [128, 128, 128, 4] and ratios.count(128) == 23 and ratios.count(4) == 20
    for x in m.layers:
        assert isinstance(x, CompressedMLALayer)
        assert (x.head_dim, x.rope_head_dim, x.window) == (512, 64, 128)
        # only the ratio-4 layers run the indexer (attention.py: ``if compress_ratio == 4``)
        assert x.index_head_dim == (128 if x.compress_ratio == 4 else 0)
    # one MTP layer after the 43: vLLM gives it ratio 1 (the window cache only)
    assert [(x.index, x.compress_ratio) for x in m.mtp_layers] == [(43, 1)]


def test_legacy_and_default_layer_types_read_as_transformers_does() -> None:
    base = {k: v for k, v in DEEPSEEK_V4.items() if k not in ("layer_types", "compress_rates")}
    default = parse(base)  # no layer_types: the __post_init__ pattern
    assert [x.compress_ratio for x in default.layers] == [
        x.compress_ratio for x in parse(DEEPSEEK_V4).layers
    ]
    legacy = parse({**base, "num_hidden_layers": 3, "compress_ratios": [0, 4, 128]})
    assert [x.compress_ratio for x in legacy.layers] == [1, 4, 128]
    rope = {k: v for k, v in base.items() if k != "qk_rope_head_dim"}
    assert parse(rope).layers[0].rope_head_dim == 64  # 512 x the default 64 / 512
    with pytest.raises(ConfigError, match="compresses by 4 or 128"):
        parse({**DEEPSEEK_V4, "compress_rates": {CSA: 8, HCA: 128}})
    with pytest.raises(ConfigError, match="compress_ratios"):
        parse({**base, "compress_ratios": [0, 2]})


def test_bytes_per_token_by_hand() -> None:
    fp8, bf16 = parse_dtype("fp8"), parse_dtype("bf16")
    csa = CompressedMLALayer(index=0, head_dim=512, rope_head_dim=64, window=128,
                             compress_ratio=4, index_head_dim=128)  # fmt: skip
    hca = CompressedMLALayer(index=1, head_dim=512, rope_head_dim=64, window=128,
                             compress_ratio=128)  # fmt: skip
    swa = CompressedMLALayer(index=2, head_dim=512, rope_head_dim=64, window=128)
    # fp8_ds_mla (attention.py): 448 NoPE fp8 + 64 x 2 B RoPE + 448 / 64 = 7 scales + 1 pad
    assert csa.entry_bytes(fp8) == 448 + 128 + 7 + 1 == 584
    assert csa.entry_bytes(bf16) == 512 * 2
    # indexer key (DeepseekV4Indexer): 128 fp8 + one fp32 scale per 128 = 132
    assert csa.indexer_key_bytes == 132 and hca.indexer_key_bytes == 0
    # growing part per token: (584 + 132) / 4 = 179; 584 / 128 rounded up = 5; window only 0
    assert [x.bytes_per_token(fp8, 8) for x in (csa, hca, swa)] == [179, 5, 0]
    assert [x.bytes_per_token(bf16, 1) for x in (csa, hca)] == [(1024 + 132) // 4, 1024 // 128]


def test_vllm_groups_by_hand(tmp_path: Path) -> None:
    """The defaults at 40 GiB: vLLM 0.33.0's five groups, pages and capacity."""
    e = vllm_plan(tmp_path, DEEPSEEK_V4)
    groups = sorted(
        (g["kind"], g["layers"], g["padding_layers"], g["page_bytes"], g["block_size"],
         g["sliding_window"])
        for g in e["kv_cache_groups"]
    )  # fmt: skip
    # pages (256-token MLA blocks, padded to 576 B): CSA latent 256 / 4 x 584 = 37,376 ->
    # 37,440; HCA 2 x 584 = 1,168 -> 1,728; indexer key 64 x 132 = 8,448 -> 8,640; window
    # 64 x 584 -> 37,440; states (fp32): HCA 8 x 1 x 2 x 512 x 4 = 32,768 -> 32,832, CSA
    # 4 x 2 x 2 x 512 x 4 = 32,768 -> 32,832, indexer 4 x 2 x 2 x 128 x 4 = 8,192 -> 8,640.
    # Buckets: window (43), MLA (20 + 23 + 20 = 63, unbalanced), HCA state (23), CSA +
    # indexer states (20 + 20, balanced); repeats = _approximate_gcd([43, 23, 20], >= 20)
    # = 23 (padding 3 + 0 + 3), so the window bucket splits in cdiv(43, 23) = 2 (22, 21)
    assert groups == sorted(
        [
            ("sliding_window", 22, 41, 37_440, 64, 128),
            ("sliding_window", 21, 42, 37_440, 64, 128),
            ("mla", 63, 0, 37_440, 256, None),
            ("sliding_window", 23, 40, 32_832, 8, 128),
            ("sliding_window", 40, 23, 32_832, 4, 8),
        ]
    )
    # a block: the widest group's pages, 20 x 37,440 + 23 x 1,728 + 20 x 8,640
    assert e["bytes_per_block"] == 20 * 37_440 + 23 * 1_728 + 20 * 8_640 == 961_344
    assert e["num_gpu_blocks"] == 40 * GIB // 961_344 == 44_676
    # per request (in flight 2 x 8,192): windows cdiv(127 + 16,384, 64) + 1 = 259 twice,
    # MLA cdiv(32,768, 256) = 128, states cdiv(16,511, 8) + 1 = 2,065, cdiv(16,391, 4) + 1
    # = 4,099
    assert [259, 259, 128, 2065, 4099] == [
        -(-(127 + 16_384) // 64) + 1,
        -(-(127 + 16_384) // 64) + 1,
        32_768 // 256,
        -(-(127 + 16_384) // 8) + 1,
        -(-(7 + 16_384) // 4) + 1,
    ]
    assert e["blocks_per_request"] == 259 * 2 + 128 + 2065 + 4099 == 6810
    # the line vLLM 0.33.0's own code logs for this case (fidelity harness)
    assert e["gpu_kv_cache_tokens"] == int(44_676 / 6810 * 32_768) == 214_969
    assert e["block_size"] == 4  # the smallest group block (scheduler block size)
    # fp8_ds_mla whatever --kv-cache-dtype (attention.py _resolve_dsv4_kv_cache_dtype)
    assert vllm_plan(tmp_path / "fp8", DEEPSEEK_V4, kv_dtype="fp8")["num_gpu_blocks"] == 44_676
    assert e["settings"]["--block-size"] == 256


def test_vllm_plan_says_its_block_size_and_cache_format(tmp_path: Path) -> None:
    p = plan(folder(tmp_path, DEEPSEEK_V4), spec="none", engine="vllm", kv_budget="40GiB",
             host_budget=0, tokens_per_block=16)  # fmt: skip
    assert p.engine is not None and p.engine.settings["--block-size"] == 256
    assert any("fp8_ds_mla" in note and "--block-size 256" in note for note in p.engine.notes)


def test_vllm_multi_module_mtp_retains_draft_tokens(tmp_path: Path) -> None:
    """Three MTP layers, K = 3: every sliding spec keeps K - 1 = 2 more tokens
    (``extra_retained_tokens``, get_global_kv_cache_groups), one more block each here."""
    e = vllm_plan(tmp_path, DEEPSEEK_V4_SLIDING, spec="mtp", max_draft_len=3)
    windows = [g for g in e["kv_cache_groups"] if g["kind"] == "sliding_window"]
    # 8 + 3 MTP window caches (11) in cdiv(11, 3) = 4 groups, each MTP layer in its own
    assert sorted(g["layers"] for g in windows if g["block_size"] == 64) == [2, 3, 3, 3]
    assert sum(g["draft_layers"] for g in windows) == 3
    by_block = {g["block_size"]: g["blocks_per_request"] for g in windows}
    assert by_block == {
        64: -(-(127 + 2 + 16_384) // 64) + 1,  # 260 (259 without the retained tokens)
        8: -(-(127 + 2 + 16_384) // 8) + 1,  # 2,066
        4: -(-(7 + 2 + 16_384) // 4) + 1,  # 4,100
    }
    # bytes per block: the MLA group, 3 x 37,440 + 3 x 1,728 + 3 x 8,640
    assert e["bytes_per_block"] == 3 * (37_440 + 1_728 + 8_640) == 143_424
    per_request = 4 * 260 + 128 + 4100 + 2066
    assert e["gpu_kv_cache_tokens"] == int(40 * GIB // 143_424 / per_request * 32_768)
    assert e["gpu_kv_cache_tokens"] == 1_337_970  # vLLM 0.33.0's figure (harness)


def test_weights_by_hand() -> None:
    c = count_params(parse(SMALL))
    h = 256
    # attention: wq_a 32 x h, wkv 64 x h, q_norm 32, wq_b 8 x 64 x 32, kv_norm 64,
    # wo_a (2 x 16) x (8 x 64 / 2), wo_b h x 32, attn_sink 8
    attention = 32 * h + 64 * h + 32 + 8 * 64 * 32 + 64 + 32 * 256 + h * 32 + 8
    assert attention == 57_448
    # compressors (ape r x coff*d, wkv and wgate coff*d x h, norm d): CSA r 4, coff 2, d 64;
    # HCA r 128, coff 1; the indexer's r 4, coff 2, d 32, beside wq_b (4 x 32) x 32 and
    # weights_proj 4 x h
    csa = 4 * 128 + 2 * 128 * h + 64
    hca = 128 * 64 + 2 * 64 * h + 64
    indexer = 4 * 32 * 32 + 4 * h + (4 * 64 + 2 * 64 * h + 32)
    moe = 4 * h + 4 * (2 * 32 * h + h * 32) + (2 * 32 * h + h * 32)  # router, 4 + 1 shared
    hc = 2 * ((2 + 2) * 2 * (2 * h) + 8 + 3)  # hc_attn and hc_ffn: fn, base, scale
    base = attention + moe + 2 * h + hc
    layers = base + (base + csa + indexer) + (base + hca) + (base + csa + indexer)
    head = 1000 * h + h + (2 * 2 * h + 2 + 1) + 1000 * h  # embed, norm, hc_head, lm_head
    # transformers 5.20.2 builds DeepseekV4ForCausalLM with 1,523,195 parameters for this
    # config on the meta device (it does not build the MTP layer)
    assert c.total - c.mtp == layers + head == 1_523_195
    # MTP (nvidia/mtp.py): enorm, hnorm, e_proj and h_proj (h x h), hc_head, a window-only
    # layer (index 4: not a hash layer), shared_head.norm
    assert c.mtp == 2 * h + 2 * h * h + (2 * 2 * h + 3) + base + h == 322_945


def test_weight_bytes_by_hand() -> None:
    w = weights_bytes(parse(SMALL), tp=1)
    # bf16, but fp32 for the sinks (4 x 8), the compressors' ape (2 x 4 x 128 + 128 x 64 +
    # 2 x 4 x 64) and the mHC mappings (4 layers x 2 x (8 x 512 + 8 + 3), the head's
    # 2 x 512 + 2 + 1); the hash layer's int32 tid2eid table (1000 x 2) is stored too; the
    # embedding and lm_head padded to 1,024 rows (vLLM's vocab padding of 64): 2 x 24 x 256
    fp32 = 4 * 8 + (2 * 512 + 8192 + 2 * 256) + 4 * 2 * (8 * 512 + 8 + 3) + (2 * 512 + 2 + 1)
    assert fp32 == 43_643
    padding = 2 * 24 * 256
    expected = (1_523_195 - fp32 + padding) * 2 + fp32 * 4 + 1000 * 2 * 4
    assert w.total_bytes == expected == 3_166_252


def test_default_weights_match_transformers() -> None:
    c = count_params(parse(DEEPSEEK_V4))
    # transformers 5.20.2 DeepseekV4ForCausalLM(DeepseekV4Config()) on the meta device:
    # 284,325,869,015 parameters (buffers and the MTP layer not built)
    assert c.total - c.mtp == 284_325_869_015


def test_engines_that_do_not_model_it_refuse(tmp_path: Path) -> None:
    target = folder(tmp_path, DEEPSEEK_V4)
    # SGLang reads only the per-layer compress_ratios form (tests/test_sglang_dsv4.py)
    with pytest.raises(
        InvalidArgumentError, match=r"compress_ratios, or plan it with --engine vllm$"
    ):
        plan(target, spec="none", engine="sglang", kv_budget="8GiB", host_budget=0)
    with pytest.raises(
        InvalidArgumentError,
        match=r"plan it with --engine vllm or --engine sglang or --engine kvbudget$",
    ):
        plan(target, spec="none", engine="trtllm", kv_budget="8GiB", host_budget=0)
    # kvbudget's own cache: tests/test_deepseek_v4_own_cache.py
    # o_groups 8 does not split over 16 ranks (the grouped output projection)
    with pytest.raises(InvalidArgumentError, match="output groups"):
        plan(target, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0, tp=16)
    # PP 4 puts the two window-only layers alone on stage 0: vLLM's stages then share no
    # KV cache layout (resolve_kv_cache_layout asserts at start-up)
    sliding = folder(tmp_path / "sliding", DEEPSEEK_V4_SLIDING)
    with pytest.raises(InvalidArgumentError, match=r"stage 0 \(layers 0-1\) holds only"):
        plan(sliding, spec="none", engine="vllm", kv_budget="40GiB", host_budget=0, pp=4)


def spec(page: int, kind: str = "sliding_window", block: int = 64) -> LayerSpec:
    return LayerSpec(kind=kind, block_size=block, page_bytes=page, geometry=(page,),  # type: ignore[arg-type]
                     sliding_window=128 if kind == "sliding_window" else None)  # fmt: skip


def test_approximate_gcd_pads_least_and_prefers_larger() -> None:
    # pads: 20 -> 17 + 17 + 0, 22 -> 1 + 21 + 2, 23 -> 3 + 0 + 3 (the least)
    assert _approximate_gcd([43, 23, 20], 20) == 23
    assert _approximate_gcd([4, 6], 1) == 2  # pads 0 at 1 and 2: the larger
    assert _approximate_gcd([3], 5) == 5  # a floor above every value is kept


@given(st.integers(1, 40), st.integers(1, 12))
def test_packed_groups_keep_every_layer_once(windows: int, mla: int) -> None:
    specs = [spec(37_440)] * windows + [spec(1_728, "mla", 256), spec(37_440, "mla", 256)] * mla
    groups = packed_groups(specs)
    members = sorted(i for g in groups for i in g.layers)
    assert members == list(range(len(specs)))
    widest = max(len(g.layers) for g in groups)
    assert all(g.padding_layers == widest - len(g.layers) for g in groups)
    # the balanced MLA bucket (one of each page a repeat) stays whole; windows split into
    # groups of at most the repeats per group
    assert sum(1 for g in groups if g.kind == "mla") == 1
    assert max(len(g.layers) for g in groups if g.kind == "sliding_window") <= max(windows, mla)


def test_vllm_plan_does_not_say_auto_keeps_the_checkpoints_dtype(tmp_path: Path) -> None:
    # vLLM stores fp8_ds_mla for DeepSeek-V4 whatever --kv-cache-dtype says
    # (attention.py _resolve_dsv4_kv_cache_dtype): the generic "auto keeps the
    # checkpoint's dtype; the plan assumes bf16" note would contradict the plan's own
    p = plan(folder(tmp_path / "v4", DEEPSEEK_V4), engine="vllm", kv_budget="40GiB",
             host_budget=0, spec="none", max_seq_len=32768)  # fmt: skip
    assert not any("assumes bf16" in n for n in p.engine.notes)
    assert any("fp8_ds_mla pages" in n for n in p.engine.notes)
