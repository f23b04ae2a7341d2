"""Step-3.5: sliding and full GQA layers with per-layer query heads, MoE, MTP layers.

No verbatim Step-3.5 config is reachable from this project: the configs are transformers
5.20.2 ``Step3p7TextConfig``'s defaults (the class vLLM 0.33.0 reads ``step3p5`` with,
``vllm/transformers_utils/config.py``) and a hybrid layout after the model card, written
in tests/family_configs.py and shared with the vLLM fidelity harness
(``family/step3p5-defaults``, ``-hybrid``, ``-upstream``). Expected figures are by hand
from vLLM 0.33.0's code (the PyPI wheel): ``model_executor/models/step3p5.py``
(``Step3p5Attention``, ``FusedMoEBlock``, ``Step3p5DecoderLayer``, ``_get_layer_type``,
``_get_num_attention_heads``, ``_is_moe_layer``), ``model_executor/models/step3p5_mtp.py``
(``Step3p5AMultiTokenPredictorLayer``), ``v1/kv_cache_interface.py`` (``FullAttentionSpec``,
``SlidingWindowSpec``) and ``v1/core/kv_cache_utils.py`` (groups, concurrency); the harness
runs that code on the same configs and agrees with each vLLM figure here.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from family_configs import (
    STEP3P5,
    STEP3P5_HYBRID,
    STEP3P5_UNIFORM,
    STEP3P5_UPSTREAM,
    folder,
    vllm_plan,
)
from hub_server import safetensors_bytes

from kvbudget import cache_cost, count_params, plan, weights_bytes
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import AttentionLayer
from kvbudget.model import load_model, parse_config

GIB = 1024**3
BF16, FP8 = parse_dtype("bf16"), parse_dtype("fp8")
FULL = list(range(0, 45, 4))  # the hybrid's full-attention layers: 0, 4, ..., 44


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="step3p5-test")


def attention(layers: Any) -> list[AttentionLayer]:
    out = [x for x in layers if isinstance(x, AttentionLayer)]
    assert len(out) == len(layers)
    return out


def test_defaults_are_45_full_layers_without_mtp() -> None:
    m = parse(STEP3P5)
    # Step3p7TextConfig: no layer_types -> every layer full_attention, no MTP layers
    assert [(x.num_kv_heads, x.head_dim, x.sliding_window) for x in attention(m.layers)] == [
        (8, 128, None)
    ] * 45
    assert m.mtp_layers == ()


def test_hybrid_layers_follow_layer_types() -> None:
    m = parse(STEP3P5_HYBRID)
    layers = attention(m.layers)
    assert [x.index for x in layers if x.sliding_window is None] == FULL
    assert {x.sliding_window for x in layers if x.index not in FULL} == {512}
    # every layer: the global num_attention_groups (8) x head_dim (128), also on sliding
    # layers (Step3p5DecoderLayer passes num_kv_heads=config.num_attention_groups)
    assert {(x.num_kv_heads, x.head_dim) for x in layers} == {(8, 128)}
    # layer_types' 3 trailing entries are the MTP layers' (45, 46, 47), sliding
    mtp = attention(m.mtp_layers)
    assert [(x.index, x.sliding_window) for x in mtp] == [(45, 512), (46, 512), (47, 512)]


def test_upstream_fields_read_as_the_legacy_ones() -> None:
    """transformers' own spelling (num_key_value_heads, n_routed_experts,
    num_sliding_attention_heads, unpadded lists beside mtp_*) of the hybrid geometry,
    with one MTP layer: the same decoder layers and weights, one MTP layer fewer x 2."""
    hybrid, upstream = parse(STEP3P5_HYBRID), parse(STEP3P5_UPSTREAM)
    assert upstream.layers == hybrid.layers
    assert upstream.mtp_layers == hybrid.mtp_layers[:1]
    h, u = count_params(hybrid), count_params(upstream)
    assert u.language_model == h.language_model
    assert u.mtp == h.mtp // 3


def test_mtp_lists_without_mtp_layers_are_not_read() -> None:
    # Step3p7TextConfig keeps an mtp_layer_types of a config without MTP layers, and vLLM
    # builds no MTP layer to read it (n_predict = num_nextn_predict_layers = 0)
    cfg = {**STEP3P5_UPSTREAM, "num_nextn_predict_layers": 0}
    m = parse({**cfg, "mtp_layer_types": ["full_attention"] * 2})
    assert m.mtp_layers == ()
    assert m.layers == parse(STEP3P5_UPSTREAM).layers


def test_bytes_per_token_by_hand() -> None:
    # FullAttentionSpec / SlidingWindowSpec page per token: 2 (K, V) x kv heads per rank
    # x head_size x dtype bytes: 2 x 8 x 128 x 2 = 4,096 B at TP 1; TP 8 leaves one KV
    # head a rank (8 // 8): 512 B; fp8 halves it
    (x, *_) = attention(parse(STEP3P5).layers)
    assert x.bytes_per_token(BF16, 1) == 2 * 8 * 128 * 2 == 4096
    assert x.bytes_per_token(BF16, 8) == 2 * 1 * 128 * 2 == 512
    assert x.bytes_per_token(FP8, 8) == 256
    # what grows with a sequence: every layer of the defaults, the 12 full layers of the
    # hybrid (its 33 sliding layers are held at their window: a fixed cost)
    assert cache_cost(parse(STEP3P5)).slope == 45 * 4096 == 184_320
    hybrid = cache_cost(parse(STEP3P5_HYBRID), tokens_per_block=16, max_seq_len=32768)
    assert hybrid.slope == 12 * 4096 == 49_152
    # a 512-token window at worst alignment spans cdiv(512 - 1, 16) + 1 = 33 blocks of
    # 16 x 4,096 B in each of the 33 sliding layers, for the one sequence reserved
    assert hybrid.intercept == 33 * (-(-511 // 16) + 1) * 16 * 4096 == 71_368_704


def test_weights_by_hand() -> None:
    c = count_params(parse(STEP3P5_HYBRID))

    # Step3p5Attention: q (heads x 128 rows), k and v (8 x 128 rows) of 4096, o back,
    # q_norm and k_norm (128 each), g_proj (heads x 4096, use_head_wise_attn_gate);
    # full layers 64 heads, sliding ones 96 (attention_other_setting.num_attention_heads)
    def attn(heads: int) -> int:
        return 2 * heads * 128 * 4096 + 2 * 8 * 128 * 4096 + 2 * 128 + heads * 4096

    assert attn(64) == 75_759_872
    assert attn(96) == 109_445_376
    assert c.attention == 12 * attn(64) + 33 * attn(96) == 4_520_815_872
    # moe_layers_enum 3..44: 42 FusedMoEBlocks of 288 experts (w13 2 x 1280 and w2 1280
    # of 4096), a share_expert of 1280, gate 288 x 4096 + router_bias 288; layers 0-2 a
    # Step3p5MLP of 11264
    assert c.routed_experts == 42 * 288 * 3 * 1280 * 4096 == 190_253_629_440
    assert c.shared_experts == 42 * 3 * 1280 * 4096
    assert c.routers == 42 * (288 * 4096 + 288) == 49_557_312
    assert c.dense_mlp == 3 * 3 * 11264 * 4096
    assert c.embeddings == c.lm_head == 128_815 * 4096
    assert c.norms == 45 * 2 * 4096 + 4096
    # an MTP layer: enorm, hnorm, eh_proj (8192 -> 4096), a sliding decoder layer with a
    # dense MLP (mtp layers get no moe_layers_enum entry), shared_head norm and its own
    # head (Step3p5MTP.has_own_lm_head); the embedding is the target's
    mtp = 2 * 4096 + 8192 * 4096 + attn(96) + 2 * 4096 + 3 * 11264 * 4096 + 4096
    assert c.mtp == 3 * (mtp + 128_815 * 4096) == 2_427_175_680
    # vLLM 0.33.0's own Step3p5ForCausalLM built on the meta device (its __init__ run on
    # CPU, one rank) holds 196,955,606,080 parameters: these plus the vocabulary rows its
    # embedding and lm_head pad to 64 (128,832 - 128,815 = 17 rows of 4096 each)
    assert c.language_model + 2 * 17 * 4096 == 196_955_606_080


def test_weight_bytes_by_hand() -> None:
    w = weights_bytes(parse(STEP3P5_HYBRID), tp=8)
    # GateLinear(params_dtype=torch.float32) and the float32 router_bias: 4 bytes each
    # whatever the model dtype; routers are replicated
    assert w.routers_bytes == 42 * (288 * 4096 + 288) * 4 == 198_229_248
    # the vocab-parallel embedding: 128,832 padded rows / 8 ranks x 4096 x 2 B
    assert w.embeddings_bytes == 128_832 // 8 * 4096 * 2


def test_vllm_groups_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, STEP3P5_HYBRID, tokens_per_block=16)
    page = 16 * 4096  # a 16-token block of one layer
    groups = [(g["kind"], g["layers"], g["padding_layers"], g["page_bytes"],
               g["blocks_per_request"]) for g in e["kv_cache_groups"]]  # fmt: skip
    # 12 full and 33 sliding layers, one page size: group size 12 (the fewest; 33 >=
    # 1.5 x 12), so the sliding layers fill 3 groups of 11 + 1 padding layer. A full
    # group holds cdiv(32768, 16) = 2048 blocks a request; a sliding one cdiv(512 - 1 +
    # 2 x 8192 in flight (async: 2 batches of 8,192 tokens), 16) + 1 = 1057
    assert groups == [
        ("full_attention", 12, 0, page, 2048),
        ("sliding_window", 11, 1, page, 1057),
        ("sliding_window", 11, 1, page, 1057),
        ("sliding_window", 11, 1, page, 1057),
    ]
    assert e["bytes_per_block"] == 12 * page == 786_432
    assert e["num_gpu_blocks"] == 40 * GIB // 786_432 == 54_613
    assert e["blocks_per_request"] == 2048 + 3 * 1057 == 5219
    assert e["gpu_kv_cache_tokens"] == int(54_613 / 5219 * 32768) == 342_893  # the harness's


def test_vllm_mtp_layers_join_the_sliding_groups(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, STEP3P5_HYBRID, spec="mtp", max_draft_len=3, tokens_per_block=16)
    # the 3 MTP layers (drafter.model.layers.45-47.mtp_block, sliding) fill the padding:
    # 3 sliding groups of 12, one draft layer each; K = 3 over 3 modules re-prefills
    # K - 1 = 2 tokens (extra_retained_tokens), so cdiv(511 + 2 + 16384, 16) + 1 = 1058
    sliding = [g for g in e["kv_cache_groups"] if g["kind"] == "sliding_window"]
    assert [(g["layers"], g["draft_layers"], g["padding_layers"]) for g in sliding] == [
        (12, 1, 0)
    ] * 3
    assert {g["blocks_per_request"] for g in sliding} == {1058}
    assert e["bytes_per_block"] == 786_432
    assert e["gpu_kv_cache_tokens"] == int(54_613 / (2048 + 3 * 1058) * 32768) == 342_696


def test_vllm_refuses_draft_tokens_not_a_multiple_of_the_mtp_layers(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="divisible by n_predict=3"):
        vllm_plan(tmp_path, STEP3P5_HYBRID, spec="mtp", max_draft_len=4)


def test_engines(tmp_path: Path) -> None:
    target = folder(tmp_path, STEP3P5_HYBRID)
    with pytest.raises(InvalidArgumentError, match=r"plan it with --engine vllm or"):
        plan(target, spec="none", engine="trtllm", kv_budget="8GiB", host_budget=0)
    # SGLang 0.5.23 does not start on the hybrid's 64 / 96 query heads (test_sglang_*)
    with pytest.raises(InvalidArgumentError, match=r"64 and 96 query heads"):
        plan(target, spec="none", engine="sglang", kv_budget="8GiB", host_budget=0)
    # Step3p5Attention asserts total_num_heads % tp_size == 0 on every layer: TP 64
    # splits the full layers' 64 heads, not the sliding layers' 96
    with pytest.raises(InvalidArgumentError, match=r"64 and 96 query heads .* divides 32$"):
        plan(target, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0, tp=64)
    # kvbudget's own cache: one manager over the 45 layers and the 3 MTP layers; what
    # grows is the 12 full layers (49,152 B a token); the 36 sliding layers hold
    # cdiv(512 + 3 lookahead - 1, 32) + 1 = 18 blocks of 32 x 4,096 B for each of 4
    # sequences: 36 x 18 x 131,072 x 4 = 339,738,624 B fixed
    p = plan(target, spec="mtp", engine="kvbudget", kv_budget="8GiB", host_budget=0,
             max_seq_len=32768, max_batch_size=4, max_draft_len=3)  # fmt: skip
    (manager,) = p.managers
    assert manager.num_layers == 48
    assert manager.fixed_bytes == 36 * 18 * 32 * 4096 * 4 == 339_738_624
    tokens = (8 * GIB - 339_738_624) // 49_152
    assert p.capacity.gpu_blocks == tokens // 32 == 5245
    assert p.capacity.tokens == 5245 * 32 == 167_840


def _with(**fields: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(STEP3P5_HYBRID)
    cfg.update(fields)
    return cfg


@pytest.mark.parametrize(
    ("cfg", "field", "match"),
    [
        (_with(att_impl_type="MFA"), "att_impl_type", "supports GQA"),
        (_with(num_attention_groups=1), "num_attention_groups", "GQA only"),
        (_with(num_key_value_heads=4), "num_attention_groups", "aliases disagree"),
        (_with(use_moe_router_bias=False), "use_moe_router_bias", "asserts it"),
        ({**STEP3P5, "need_fp32_gate": None}, "need_fp32_gate", "asserts it"),
        (_with(tie_word_embeddings=True), "tie_word_embeddings", "never ties"),
        (
            _with(attention_other_setting={"num_attention_heads": 96, "head_dim": 64}),
            "attention_other_setting.head_dim",
            "global num_attention_groups and head_dim",
        ),
        (_with(sliding_window=None), "sliding_window", "sliding_attention layers"),
        (
            _with(layer_types=STEP3P5_HYBRID["layer_types"][:45]),
            "layer_types",
            "no mtp_layer_types",
        ),
        (
            _with(layer_types=STEP3P5_HYBRID["layer_types"][:45] + ["full_attention"] * 3),
            "mtp_layer_types",
            "IndexError",
        ),
        (_with(layer_types=["linear_attention"] * 48), "layer_types", "entry 0"),
        (_with(layer_types=["full_attention"] * 40), "layer_types", "expected 45 or 48"),
        (_with(moe_layers_enum="3,x"), "moe_layers_enum", "layer indices"),
        (_with(moe_layers_enum=""), "moe_layers_enum", "names no MoE layer"),
        (
            {**STEP3P5_UPSTREAM, "mlp_layer_types": ["dense"] * 45},
            "mlp_layer_types",
            "names no MoE layer",
        ),
        (
            _with(per_layer_config={"1": {"head_dim": 64}}),
            "per_layer_config.1",
            "only num_attention_heads",
        ),
        (_with(num_attention_heads=60), "num_attention_groups", "does not divide layer 0"),
    ],
)
def test_configs_vllm_would_not_build_are_refused(
    cfg: dict[str, Any], field: str, match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        parse(cfg)
    assert info.value.field == field


# a two-layer Step-3.5 and one MTP layer, for a checkpoint with real safetensors headers:
# layer 0 full (4 heads) and dense, layer 1 sliding (8 heads) with 2 experts, the MTP
# layer 2 sliding and dense; 2 KV heads of 16, hidden 64
TINY: dict[str, Any] = {
    **STEP3P5,
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_attention_groups": 2,
    "head_dim": 16,
    "max_position_embeddings": 4096,
    "moe_num_experts": 2,
    "moe_top_k": 1,
    "moe_intermediate_size": 32,
    "share_expert_dim": 32,
    "sliding_window": 8,
    "layer_types": ["full_attention", "sliding_attention", "sliding_attention"],
    "attention_other_setting": {"attention_type": "sliding_attention", "num_attention_heads": 8},
    "use_head_wise_attn_gate": True,
    "moe_layers_enum": "1",
    "num_nextn_predict_layers": 1,
}


def _tiny_tensors() -> dict[str, tuple[str, tuple[int, ...]]]:
    """The checkpoint's names (vLLM step3p5.py load_weights: q/k/v and gate/up stacked
    on load, the packed 3D expert format ``moe.{gate,up,down}_proj``, ``share_expert``
    mapped under ``moe`` by hf_to_vllm_mapper; step3p5_mtp.py: the MTP layer's block
    weights directly under ``model.layers.2``, its ``shared_head.output``)."""
    out: dict[str, tuple[str, tuple[int, ...]]] = {"model.embed_tokens.weight": ("BF16", (256, 64))}
    for i, heads in ((0, 4), (1, 8), (2, 8)):
        p = f"model.layers.{i}"
        out |= {
            f"{p}.self_attn.q_proj.weight": ("BF16", (heads * 16, 64)),
            f"{p}.self_attn.k_proj.weight": ("BF16", (32, 64)),
            f"{p}.self_attn.v_proj.weight": ("BF16", (32, 64)),
            f"{p}.self_attn.o_proj.weight": ("BF16", (64, heads * 16)),
            f"{p}.self_attn.q_norm.weight": ("BF16", (16,)),
            f"{p}.self_attn.k_norm.weight": ("BF16", (16,)),
            f"{p}.self_attn.g_proj.weight": ("BF16", (heads, 64)),
            f"{p}.input_layernorm.weight": ("BF16", (64,)),
            f"{p}.post_attention_layernorm.weight": ("BF16", (64,)),
        }
        if i == 1:
            out |= {
                f"{p}.moe.gate.weight": ("F32", (2, 64)),
                f"{p}.moe.router_bias": ("F32", (2,)),
                f"{p}.moe.gate_proj.weight": ("BF16", (2, 32, 64)),
                f"{p}.moe.up_proj.weight": ("BF16", (2, 32, 64)),
                f"{p}.moe.down_proj.weight": ("BF16", (2, 64, 32)),
                f"{p}.share_expert.gate_proj.weight": ("BF16", (32, 64)),
                f"{p}.share_expert.up_proj.weight": ("BF16", (32, 64)),
                f"{p}.share_expert.down_proj.weight": ("BF16", (64, 32)),
            }
        else:
            out |= {
                f"{p}.mlp.gate_proj.weight": ("BF16", (128, 64)),
                f"{p}.mlp.up_proj.weight": ("BF16", (128, 64)),
                f"{p}.mlp.down_proj.weight": ("BF16", (64, 128)),
            }
    out |= {
        "model.layers.2.enorm.weight": ("BF16", (64,)),
        "model.layers.2.hnorm.weight": ("BF16", (64,)),
        "model.layers.2.eh_proj.weight": ("BF16", (64, 128)),
        "model.layers.2.shared_head.norm.weight": ("BF16", (64,)),
        "model.layers.2.shared_head.output.weight": ("BF16", (256, 64)),
        "model.norm.weight": ("BF16", (64,)),
        "lm_head.weight": ("BF16", (256, 64)),
    }
    return out


def test_checkpoint_headers_match_the_inventory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY), "utf-8")
    (tmp_path / "model.safetensors").write_bytes(safetensors_bytes(_tiny_tensors()))
    model = load_model(str(tmp_path))
    # embeddings and lm_head 32,768 each; layer 0: q 8,192, k and v 4,096, o 8,192, q/k
    # norms 64, g_proj 512, two norms 256, the MLP 3 x 16,384 = 74,560; layer 1: q 16,384,
    # k and v 4,096, o 16,384, 64, g_proj 1,024, 256, the fp32 router 512 + bias 8, experts
    # 3 x 8,192, the shared expert 3 x 4,096 = 79,688; the final norm 128
    w = weights_bytes(model)
    assert (w.source, w.other_bytes) == ("safetensors headers", 0)
    assert w.total_bytes == 2 * 32_768 + 74_560 + 79_688 + 128 == 219_912
    # the MTP layer on top: enorm, hnorm 256, eh_proj 16,384, layer-1-sized attention
    # 42,048, two norms 256, a dense MLP 49,152, shared_head norm 128 and head 32,768
    mtp = weights_bytes(model, include_mtp=True)
    assert mtp.total_bytes - w.total_bytes == 256 + 16_384 + 42_048 + 256 + 49_152 + 128 + 32_768
    # every stored tensor found its inventory tensor, so TP 2 splits each as vLLM does:
    # vocabulary rows, q/k/v/o and g_proj by head, MLP and expert rows; norms and the
    # router whole: 16,384 x 2 + layer 0 37,440 + layer 1 40,264 + 128
    assert weights_bytes(model, tp=2).total_bytes == 2 * 16_384 + 37_440 + 40_264 + 128


# ---------------------------------------------------------------------------- SGLang
# SGLang 0.5.23 (PyPI wheel, python/sglang/srt/): configs/model_config.py
# is_hybrid_swa_model allow-lists Step3p5ForCausalLM, get_hybrid_layer_ids takes the
# sliding / full entries of layer_types below num_hidden_layers (33 sliding, 12 full:
# the MTP layers' padded entries are cut); model_executor/pool_configurator.py
# HybridSWAPoolConfigurator prices a layer get_num_kv_heads(8) = max(1, 8 // 8) = 1
# head x (128 + 128) x 2 B = 512 B a token (get_swa_num_kv_heads reads
# attention_other_setting.num_attention_groups, 8 too); every pool has T + page rows.
# benchmarks/fidelity/sglang runs that code on the -uniform config (24 cases agree).
SGLANG_ARGS: dict[str, Any] = {
    "spec": "none",
    "engine": "sglang",
    "kv_budget": "40GiB",
    "max_seq_len": 32768,
    "max_batch_size": 256,
    "max_num_batched_tokens": 8192,
    "tp": 8,
}


def sglang_plan(tmp_path: Path, cfg: dict[str, Any], **kw: Any) -> Any:
    return plan(folder(tmp_path, cfg), **{**SGLANG_ARGS, "host_budget": 0, **kw})


def test_sglang_full_and_sliding_pools_by_hand(tmp_path: Path) -> None:
    p = sglang_plan(tmp_path, STEP3P5_UNIFORM)
    d, pools = p.engine.detail, {x.name: x for x in p.engine.pools}
    # sliding pool for 256 requests: (window 512 + 0 lookahead + 1 + 2 pages of 32) = 577
    # each, + an 8,192 chunk + a page: 256 x 577 + 8,192 + 32 = 155,936 (4,873 pages);
    # its fixed cost (155,936 + 32) x 33 x 512 = 2,635,235,328 B leaves 40 GiB -
    # that = 40,314,437,632 B, // (12 x 512 = 6,144) = 6,561,594, - 32, to the page:
    # 6,561,536; the ratio ceil3(155,936 / full) = 0.024 gives the sliding pool
    # int(full x 0.024) to the page, and the largest full whose pools fit 40 GiB
    # (42,949,672,960 B) is 6,557,600: (6,557,632 x 6,144 = 40,290,091,008) +
    # (157,376 + 32) x 16,896 = 2,659,565,568 -> 42,949,656,576 B; one page more
    # (6,557,632, sliding still 157,376) takes 196,608 B more: 42,949,853,184 > 40 GiB
    assert d["max_total_num_tokens"] == 6_557_600 == pools["full"].tokens
    assert d["swa_tokens"] == 157_376 == int(6_557_600 * 0.024) // 32 * 32
    assert d["swa_full_tokens_ratio"] == 0.024
    assert pools["full"].bytes == 6_557_632 * 12 * 512 == 40_290_091_008
    assert pools["swa"].bytes == 157_408 * 33 * 512 == 2_659_565_568
    assert pools["swa"].window_tokens == 512
    assert d["device_bytes"] == 42_949_656_576 <= 40 * GIB
    assert p.engine.settings["--swa-full-tokens-ratio"] == 0.024
    assert p.engine.settings["--page-size"] == 32
    # SGLang's own Step3p5Config (configs/step3p5.py) fills max_seq_len=128000, which
    # get_context_length reads before max_position_embeddings (262,144 here)
    assert d["derived_context_length"] == 128_000


def test_sglang_hicache_keeps_one_full_pool_by_hand(tmp_path: Path) -> None:
    # arg_groups/overrides.py _step3p_overrides: with --enable-hierarchical-cache SGLang
    # sets disable_hybrid_swa_memory, so all 45 layers are in the full pool at full
    # length: 45 x 512 = 23,040 B a token
    p = sglang_plan(tmp_path, STEP3P5_UNIFORM, host_budget="64GB")
    d, pools = p.engine.detail, {x.name: x for x in p.engine.pools}
    # 42,949,672,960 // 23,040 = 1,864,135, - 32, to the page: 1,864,096
    assert d["max_total_num_tokens"] == 1_864_096
    assert d["swa_tokens"] is None and "swa" not in pools
    assert pools["full"].bytes == 1_864_128 * 23_040 == 42_949_509_120
    # HostKVCache: (int(63e9 // 23,040) = 2,734,375 // 32 + 1) x 32 = 2,734,400 tokens;
    # 64 GB would pin 2,777,800 x 23,040 = 64,000,512,000 B > 64e9, so --hicache-size 63
    assert d["hicache_size_gb"] == 63
    assert d["host_tokens"] == 2_734_400
    assert d["host_bytes"] == 2_734_400 * 23_040 == 63_000_576_000
    assert "--swa-full-tokens-ratio" not in p.engine.settings


def test_sglang_ngram_has_no_draft_pool(tmp_path: Path) -> None:
    p = sglang_plan(tmp_path, STEP3P5_UNIFORM, spec="ngram")
    assert [x.role for x in p.engine.pools] == ["target", "target"]


@pytest.mark.parametrize(
    ("cfg", "kw", "match"),
    [
        # get_hybrid_layer_ids enumerates layer_types: None in Step3p5Config (TypeError)
        (STEP3P5, {}, r"no layer_types"),
        # transformers 5.19.0 Step3p7TextConfig is heterogeneous; parse() fails
        (STEP3P5_HYBRID, {}, r"64 and 96 query heads"),
        (STEP3P5_UPSTREAM, {}, r"64 and 96 query heads"),
        # HybridSWAPoolConfigurator asserts a sliding layer
        (
            {**STEP3P5_UNIFORM, "layer_types": ["full_attention"] * 48},
            {},
            r"no sliding_attention layer below num_hidden_layers",
        ),
        # get_swa_num_kv_heads divides attention_other_setting["num_attention_groups"]
        (
            {**STEP3P5_UNIFORM, "attention_other_setting": {"num_attention_heads": 64}},
            {},
            r"attention_other_setting has no num_attention_groups",
        ),
        # the MTP draft is planned (test_sglang_step3p5_mtp.py); other drafts are not
        (
            STEP3P5_UNIFORM,
            {"spec": "draft-target", "draft": "meta-llama/Llama-3.2-1B-Instruct"},
            r"with --spec draft-target: SGLang 0.5.23 prices such a draft",
        ),
        # checked against the 0.5.23 wheel only
        (STEP3P5_UNIFORM, {"engine": "sglang@main@003fca80"}, r"checked against SGLang 0.5.23"),
        # 1 GB of host leaves --hicache-size 0, but the pools were laid out for HiCache
        (STEP3P5_UNIFORM, {"host_budget": "1GB"}, r"leaves --hicache-size 0"),
    ],
)
def test_sglang_refusals(
    tmp_path: Path, cfg: dict[str, Any], kw: dict[str, Any], match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        sglang_plan(tmp_path, cfg, **kw)
