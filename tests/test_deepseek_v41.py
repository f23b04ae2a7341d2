"""DeepSeek-V4.1: compressed caches shared by KV sources, indexer keys, 32-token windows,
compressor rings; vLLM 0.33.0's groups, blocks and tokens; the weights.

No verbatim DeepSeek-V4.1 config is reachable from this project and vLLM's
``DeepseekV41Config`` has no geometry defaults, so the configs are a ``text_config`` of
DeepSeek-V4's transformers 5.20.2 defaults plus the V4.1 fields vLLM reads, with values
chosen (tests/family_configs.py, shared with the vLLM fidelity harness:
``family/deepseek-v41-*`` cases), or small ones written here. Expected figures are by hand
from vLLM 0.33.0's code (the PyPI wheel): ``models/deepseek_v41/attention.py``
(``DeepseekV4Attention.__init__`` and ``get_kv_cache_spec``, ``DeepseekV4IndexerCache``,
``_indexer_k_cache_head_dim``), ``models/deepseek_v41/compressor.py``
(``CompressorStateCache``, ``DeepseekCompressor``), ``v1/attention/backends/mla/sparse_swa.py``
(``DeepseekV4SWACache``), ``v1/kv_cache_interface.py`` (page sizes, alignment padding,
``CircularBufferSpec``, ``SlidingWindowSpec.max_admission_blocks_per_request``) and
``v1/core/kv_cache_planning.py`` (``_get_packed_kv_cache_groups``); the harness runs that
code on the same configs and agrees with each figure asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import (
    DEEPSEEK_V41,
    DEEPSEEK_V41_RINGS,
    DEEPSEEK_V41_SMALL_TEXT,
    folder,
    vllm_plan,
)

from kvbudget import count_params, plan, weights_bytes
from kvbudget.dtypes import parse_dtype
from kvbudget.engines.vllm import LayerSpec, packed_groups
from kvbudget.engines.vllm_dsv41 import ring_rows
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import SharedCompressedMLALayer
from kvbudget.model import parse_config

GIB = 1024**3
TEXT: dict[str, Any] = DEEPSEEK_V41["text_config"]
SMALL_TEXT: dict[str, Any] = DEEPSEEK_V41_SMALL_TEXT
SMALL: dict[str, Any] = {**DEEPSEEK_V41, "text_config": SMALL_TEXT}


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="dsv41-test")


def with_text(**fields: Any) -> dict[str, Any]:
    return {**DEEPSEEK_V41, "text_config": {**TEXT, **fields}}


def test_layers_follow_the_sources() -> None:
    m = parse(DEEPSEEK_V41)
    assert [x.compress_ratio for x in m.layers] == [0, 0] + [2] * 20 + [1] * 21
    for x in m.layers:
        assert isinstance(x, SharedCompressedMLALayer)
        assert (x.head_dim, x.rope_head_dim, x.window) == (512, 64, 128)
    # KV sources every fourth layer from 2 (kv_source_layer_ids)
    assert [x.index for x in m.layers if x.kv_source] == list(range(2, 43, 4))
    # indexer keys only where a layer is an index and a KV source (attention.py: the other
    # index sources, 4, 24 and 28, read their source's k_cache)
    assert [x.index for x in m.layers if x.index_head_dim] == [2, 10, 18, 22, 26]
    # no classic MTP: num_nextn_predict_layers counts DSpark stages (config/speculative.py)
    assert m.mtp_layers == ()
    assert any("vision tower keeps no KV cache" in note for note in m.assumed)


def test_configs_vllm_would_not_build_are_refused() -> None:
    # DeepseekV4Attention.__init__: "only 0 (sliding window), 1 and 2 are supported"
    with pytest.raises(ConfigError, match="0, 1 or 2"):
        parse(with_text(compress_ratios=[4] * 43))
    # compressed layers need kv_source_layer_ids and index_source_layer_ids
    with pytest.raises(ConfigError, match="layer 2 has compress ratio 2 but no KV source"):
        parse(with_text(kv_source_layer_ids=[]))
    # layer 6 (a source without keys) has no k_cache for index source 7 to read
    with pytest.raises(ConfigError, match="layer 7 reads the indexer keys of its KV source"):
        parse(with_text(index_source_layer_ids=[2, 7]))
    with pytest.raises(ConfigError, match="layer 0 is a KV or index source but has ratio 0"):
        parse(with_text(kv_source_layer_ids=[0, 2]))
    # no compress_ratios: every layer keeps its window only (ratio 0 past the list)
    plain = {k: v for k, v in TEXT.items() if k != "compress_ratios"}
    m = parse(
        {
            **DEEPSEEK_V41,
            "text_config": {**plain, "kv_source_layer_ids": [], "index_source_layer_ids": []},
        }
    )
    assert {x.compress_ratio for x in m.layers} == {0}


def test_bytes_per_token_by_hand() -> None:
    fp8, bf16 = parse_dtype("fp8"), parse_dtype("bf16")

    def layer(ratio: int, source: bool, index: int = 0) -> SharedCompressedMLALayer:
        return SharedCompressedMLALayer(index=0, head_dim=512, rope_head_dim=64, window=128,
                                        compress_ratio=ratio, kv_source=source,
                                        index_head_dim=index)  # fmt: skip

    # fp8_ds_mla latent 584 B, indexer key 128 fp8 + one fp32 scale = 132 B
    r2_keyed, r2, r1_keyed, r1 = (
        layer(2, True, 128),
        layer(2, True),
        layer(1, True, 128),
        layer(1, True),
    )
    assert [x.bytes_per_token(fp8, 8) for x in (r2_keyed, r2, r1_keyed, r1)] == [
        (584 + 132) // 2,  # 358
        584 // 2,  # 292
        584 + 132,  # 716
        584,
    ]
    # a consumer and a window-only layer own nothing that grows
    assert layer(2, False).bytes_per_token(fp8, 1) == layer(0, False).bytes_per_token(fp8, 1) == 0
    assert r2_keyed.bytes_per_token(bf16, 1) == (1024 + 132) // 2
    m = parse(DEEPSEEK_V41)
    # sources: ratio 2 at 2, 6, 10, 14, 18 (keys at 2, 10, 18), ratio 1 at 22 ... 42 (keys
    # at 22, 26): 3 x 358 + 2 x 292 + 2 x 716 + 4 x 584
    assert (
        sum(x.bytes_per_token(fp8, 1) for x in m.layers)
        == 3 * 358 + 2 * 292 + 2 * 716 + 4 * 584
        == 5426
    )


def test_vllm_groups_by_hand(tmp_path: Path) -> None:
    """The defaults at 40 GiB: vLLM 0.33.0's five groups, pages and capacity."""
    e = vllm_plan(tmp_path, DEEPSEEK_V41)
    groups = sorted(
        (g["kind"], g["layers"], g["padding_layers"], g["page_bytes"], g["block_size"],
         g["blocks_per_request"])
        for g in e["kv_cache_groups"]
    )  # fmt: skip
    # pages (64-token MLA blocks, padded to 576 B): ratio-2 latent 32 x 584 = 18,688 ->
    # 19,008, ratio-1 64 x 584 = 37,376 -> 37,440, keys 32 x 132 = 4,224 -> 4,608 and
    # 64 x 132 = 8,448 -> 8,640; window 32 x 584 -> 19,008; ring 8 rows x 1,024 x 4 = 32,768.
    # Buckets: MLA (5 + 6 latents, 3 + 2 keys: unbalanced, whole), windows (43), rings (5);
    # no balanced bucket mixes pages, so no repeats: windows and rings are state buckets,
    # capped at the MLA group's 3 x 4,608 + 2 x 8,640 + 5 x 19,008 + 6 x 37,440 = 350,784 B:
    # 350,784 // 19,008 = 18 windows a block -> cdiv(43, 18) = 3 groups (15, 14, 14);
    # 350,784 // 32,768 = 10 rings -> one group
    # per request (in flight 2 x 8,192): windows cdiv(127 + 16,384, 32) + 1 = 517, MLA
    # cdiv(32,768, 64) = 512, a ring one block
    assert groups == sorted(
        [
            ("sliding_window", 15, 1, 19_008, 32, 517),
            ("sliding_window", 14, 2, 19_008, 32, 517),
            ("sliding_window", 14, 2, 19_008, 32, 517),
            ("mla", 16, 0, 37_440, 64, 512),
            ("circular_buffer", 5, 11, 32_768, 8, 1),
        ]
    )
    assert e["bytes_per_block"] == 3 * 4_608 + 2 * 8_640 + 5 * 19_008 + 6 * 37_440 == 350_784
    assert e["num_gpu_blocks"] == 40 * GIB // 350_784 == 122_439
    assert e["blocks_per_request"] == 3 * 517 + 512 + 1 == 2064
    # the line vLLM 0.33.0's own code logs for this case (fidelity harness)
    assert e["gpu_kv_cache_tokens"] == int(122_439 / 2064 * 32_768) == 1_943_837
    # the scheduler block: the MLA group's, the only one in prefix caching (bounded-replay
    # windows and rings are not prefix_cacheable)
    assert e["block_size"] == 64
    assert e["settings"]["--block-size"] == 64
    # fp8_ds_mla whatever --kv-cache-dtype; everything replicated over TP
    other = vllm_plan(tmp_path / "fp8", DEEPSEEK_V41, kv_dtype="fp8", tp=8)
    assert other["num_gpu_blocks"] == 122_439


def test_vllm_splits_rings_the_block_cannot_hold(tmp_path: Path) -> None:
    """Eight layers at 8 GiB: four rings outgrow the block the MLA group sets."""
    e = vllm_plan(tmp_path, DEEPSEEK_V41_RINGS, kv_budget="8GiB")
    rows = sorted((g["kind"], g["layers"], g["padding_layers"]) for g in e["kv_cache_groups"])
    # MLA: 4 x 19,008 + 37,440 + one key page 4,608 = 118,080 B, whole (6 layers); windows
    # 118,080 // 19,008 = 6 a block -> 2 groups of 4; rings 118,080 // 32,768 = 3 a block
    # -> cdiv(4, 3) = 2 groups of 2
    assert rows == sorted(
        [("mla", 6, 0), ("sliding_window", 4, 2), ("sliding_window", 4, 2),
         ("circular_buffer", 2, 4), ("circular_buffer", 2, 4)]
    )  # fmt: skip
    assert e["bytes_per_block"] == 4 * 19_008 + 37_440 + 4_608 == 118_080
    assert e["num_gpu_blocks"] == 8 * GIB // 118_080 == 72_746
    assert e["blocks_per_request"] == 2 * 517 + 512 + 2 == 1548
    assert e["gpu_kv_cache_tokens"] == int(72_746 / 1548 * 32_768) == 1_539_884


def test_ring_rows_follow_the_lookahead(tmp_path: Path) -> None:
    # CompressorStateCache: max(8, a power of two >= K + 2)
    assert [ring_rows(k) for k in (0, 3, 6, 7, 14, 15)] == [8, 8, 8, 16, 16, 32]
    e = vllm_plan(tmp_path, DEEPSEEK_V41, spec="ngram", max_draft_len=7)
    ring = [g for g in e["kv_cache_groups"] if g["kind"] == "circular_buffer"]
    # 16 rows x 1,024 x 4 = 65,536 B; 350,784 // 65,536 = 5 rings a block: one group
    assert [(g["layers"], g["page_bytes"], g["block_size"]) for g in ring] == [(5, 65_536, 16)]
    assert e["num_gpu_blocks"] == 122_439  # the MLA group still sets the block


def test_weights_by_hand() -> None:
    c = count_params(parse(SMALL))
    h = 256
    # attention (DeepSeek-V4's): wq_a 32 x h, wkv 512 x h, q_norm 32, wq_b (2 x 512) x 32,
    # kv_norm 512, wo_a (2 x 16) x (2 x 512 / 2), wo_b h x 32, attn_sink 2
    attention = 32 * h + 512 * h + 32 + 1024 * 32 + 512 + 32 * 512 + h * 32 + 2
    assert attention == 197_154
    # V4.1 compressor (no ape): wkv (+ wgate at ratio 2) 512 x h, norm 512
    compressor2, compressor1 = 2 * 512 * h + 512, 512 * h + 512
    # indexer: wq_b (4 x 32) x 32, weights_proj 4 x h; wk 32 x 512 and k_norm where it
    # owns the keys (a KV source)
    indexer = 128 * 32 + 4 * h
    owns_k = 32 * 512 + 32
    moe = 4 * h + 4 * (2 * 32 * h + h * 32) + (2 * 32 * h + h * 32)  # router, 4 + 1 shared
    hc = 2 * ((2 + 2) * 2 * (2 * h) + 8 + 3)  # hc_attn and hc_ffn: fn, base, scale
    base = attention + moe + 2 * h + hc
    layers = (
        base  # window only
        + base + compressor2 + indexer + owns_k  # ratio-2 source, owns keys
        + base + indexer  # consumer and index source reading layer 1's keys
        + base + compressor1 + indexer + owns_k  # ratio-1 source, owns keys
    )  # fmt: skip
    head = 1000 * h + h + 1000 * h  # embed, norm, lm_head (V4.1 has no learned hc_head)
    assert c.total == layers + head == 2_273_824
    assert c.mtp == 0  # the checkpoint's mtp.* (DSpark) weights are dropped by the mapper
    # a vision checkpoint adds bias_vl (n_routed_experts, fp32) to each MoE gate
    vision = count_params(parse({**SMALL, "vision_config": {"num_hidden_layers": 2}}))
    assert vision.total == 2_273_824 + 4 * 4


def test_weight_bytes_by_hand() -> None:
    w = weights_bytes(parse(SMALL), tp=1)
    # bf16, but fp32 for the sinks (4 layers x 2) and the mHC mappings (4 x 8,214); the
    # embedding and lm_head padded to 1,024 rows (vLLM's vocab padding of 64): 2 x 24 x 256
    fp32 = 4 * 2 + 4 * 8_214
    padding = 2 * 24 * 256
    assert w.total_bytes == (2_273_824 - fp32 + padding) * 2 + fp32 * 4 == 4_637_952


def test_engram_weights_are_refused() -> None:
    m = parse({**SMALL, "text_config": {**SMALL_TEXT, "engram_layer_ids": [1]}})
    with pytest.raises(ConfigError, match="Engram"):
        count_params(m)


def test_engines_and_modes_that_do_not_model_it_refuse(tmp_path: Path) -> None:
    target = folder(tmp_path, DEEPSEEK_V41)
    # kvbudget's own cache: tests/test_deepseek_v4_own_cache.py
    with pytest.raises(InvalidArgumentError, match="TensorRT-LLM"):
        plan(target, spec="none", engine="trtllm", kv_budget="8GiB", host_budget=0)
    # vLLM: "DeepSeek V4.1 has no classic-MTP draft ... Use speculative method 'dspark'"
    with pytest.raises(InvalidArgumentError, match="DSpark stages"):
        plan(target, spec="mtp", engine="vllm", kv_budget="8GiB", host_budget=0)
    # a draft beside the packed groups is not checked against vLLM
    with pytest.raises(InvalidArgumentError, match="--spec draft-target"):
        plan(target, spec="draft-target", draft="meta-llama/Llama-3.2-1B-Instruct",
             engine="vllm", kv_budget="8GiB", host_budget=0)  # fmt: skip
    # PP 4 puts layer 11 on stage 1 and its KV source, layer 10, on stage 0
    with pytest.raises(InvalidArgumentError, match=r"layer 11 .* layer 10, on stage 0"):
        plan(target, spec="none", engine="vllm", kv_budget="40GiB", host_budget=0, pp=4)
    # PP 2 splits at layer 22, a KV source: vLLM runs it (harness: agrees)
    ok = plan(target, spec="none", engine="vllm", kv_budget="40GiB", host_budget=0, pp=2)
    assert ok.engine is not None and ok.engine.detail["refused"] is None
    # PP 2 of the eight-layer config leaves stage 1 without indexer keys: the stages'
    # backends share no KV cache layout (resolve_kv_cache_layout asserts)
    rings = folder(tmp_path / "rings", DEEPSEEK_V41_RINGS)
    with pytest.raises(InvalidArgumentError, match="stage 1 holds no indexer key cache"):
        plan(rings, spec="none", engine="vllm", kv_budget="40GiB", host_budget=0, pp=2)
    # o_groups 8 does not split over 16 ranks (attention.py: n_groups // tp_size)
    with pytest.raises(InvalidArgumentError, match="output groups"):
        plan(target, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0, tp=16)
    keyless = folder(tmp_path / "keyless", with_text(index_source_layer_ids=[4]))
    with pytest.raises(ConfigError, match="layer 4 reads the indexer keys"):
        plan(keyless, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0)


def test_no_indexer_keys_is_not_modelled(tmp_path: Path) -> None:
    """Without a keyed layer vLLM's layout is not block-outermost (only the indexer backend
    needs it), so it unifies pages instead of packing them: refused, not guessed."""
    # no compressed layer, so no KV or index source: every layer keeps its window only
    plain = {k: v for k, v in TEXT.items() if k not in ("compress_ratios",)}
    cfg = {
        **DEEPSEEK_V41,
        "text_config": {**plain, "kv_source_layer_ids": [], "index_source_layer_ids": []},
    }
    with pytest.raises(InvalidArgumentError, match="without an indexer key cache"):
        plan(folder(tmp_path, cfg), spec="none", engine="vllm", kv_budget="8GiB", host_budget=0)


def spec(page: int, kind: str, block: int) -> LayerSpec:
    return LayerSpec(kind=kind, block_size=block, page_bytes=page, geometry=(page,),  # type: ignore[arg-type]
                     sliding_window=128 if kind == "sliding_window" else None)  # fmt: skip


@pytest.mark.parametrize(("rings", "groups"), [(1, 1), (4, 1), (5, 2), (9, 3)])
def test_state_buckets_are_capped_at_the_anchor_block(rings: int, groups: int) -> None:
    """A ring bucket splits into cdiv(rings, anchor // ring page) groups, the anchor being
    the widest other group: here an unbalanced MLA bucket (2 x 60,000 B + 40,000 B, no
    repeats set) of 160,000 B, which holds 160,000 // 32,768 = 4 rings."""
    specs = [spec(60_000, "mla", 64), spec(40_000, "mla", 64), spec(60_000, "mla", 64)]
    specs += [spec(32_768, "circular_buffer", 8)] * rings
    out = packed_groups(specs)
    ring_groups = [g for g in out if g.kind == "circular_buffer"]
    assert len(ring_groups) == groups
    assert sorted(i for g in out for i in g.layers) == list(range(len(specs)))
    assert [len(g.layers) for g in out if g.kind == "mla"] == [3]


def test_vllm_0_29_has_no_model_for_it(tmp_path: Path) -> None:
    # the 0.29.0 wheel's vllm/models/ holds deepseek_v4 and deepseek_v32, no deepseek_v41
    with pytest.raises(InvalidArgumentError, match=r"vLLM 0\.29\.0 has no model for"):
        plan(folder(tmp_path, DEEPSEEK_V41), spec="none", engine="vllm@0.29.0",
             kv_budget="8GiB", host_budget=0)  # fmt: skip


def test_quantized_weight_bytes_follow_the_expert_dtype() -> None:
    """An fp8-block checkpoint as vLLM's DeepseekV4FP8Config loads it
    (models/deepseek_v41/quant_config.py; the config class copies expert_dtype from
    quantization_config): fp4 experts are MXFP4 and the linears' block scales UE8M0."""

    def total(expert_dtype: str) -> int:
        qc = {"quant_method": "fp8", "weight_block_size": [128, 128], "expert_dtype": expert_dtype}
        return weights_bytes(parse({**SMALL, "quantization_config": qc}), tp=1).total_bytes

    def fp8(rows: int, cols: int, scale: int) -> int:  # a 128 x 128 block-scaled linear
        return rows * cols + scale * -(-rows // 128) * -(-cols // 128)

    def layer_bytes(scale: int, routed: int) -> int:
        # fp8 linears: attention wq_a, wkv, wq_b, wo_a, wo_b and the shared expert; bf16
        # norms (q, kv, two layer norms) and router; fp32 sinks and mHC mappings
        linears = fp8(32, 256, scale) + fp8(512, 256, scale) + fp8(1024, 32, scale)
        linears += fp8(32, 512, scale) + fp8(256, 32, scale)
        shared = 2 * fp8(32, 256, scale) + fp8(256, 32, scale)
        return linears + shared + routed + 2 * (32 + 512 + 2 * 256 + 4 * 256) + 4 * (2 + 8_214)

    # routed experts (4 a layer): MXFP4 rows x cdiv(cols, 32) x 17, or fp8 with fp32 scales
    mxfp4 = 4 * (2 * 32 * 8 * 17 + 256 * 1 * 17)
    fp8_experts = 4 * (2 * fp8(32, 256, 4) + fp8(256, 32, 4))
    # compressors, wk and weights_proj stay bf16 (quant_config=None); the indexer's wq_b
    # (128 x 32) is fp8
    bf16 = 2 * (2 * 512 * 256 + 512) + 2 * (512 * 256 + 512)  # ratio-2 and ratio-1 compressors
    bf16 += 3 * 2 * 4 * 256 + 2 * 2 * (32 * 512 + 32)  # 3 x weights_proj, 2 x wk + k_norm
    head = 2 * 1024 * 256 * 2 + 2 * 256  # padded embed and lm_head, final norm
    for dtype, scale, routed in (("fp4", 1, mxfp4), ("fp8", 4, fp8_experts)):
        expected = 4 * layer_bytes(scale, routed) + 3 * fp8(128, 32, scale) + bf16 + head
        assert total(dtype) == expected
    assert total("fp4") == 3_163_515 and total("fp8") == 3_348_588
    with pytest.raises(ConfigError, match="expert_dtype"):
        total("int4")
