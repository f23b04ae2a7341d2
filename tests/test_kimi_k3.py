"""Kimi K3: KimiK3DeltaAttention state beside q-LoRA NoPE MLA latents, vLLM's hybrid pool,
its MTP layer, weights.

No verbatim Kimi K3 config is reachable from this project: the configs are Kimi-Linear's
geometry (transformers 5.20.2 ``KimiLinearConfig`` defaults) with Kimi K3's switches on
(tests/family_configs.py ``family/kimi-k3`` and ``family/kimi-k3-unbounded-gate``,
shared with the vLLM fidelity harness, which agrees with each vLLM figure here). Expected
figures are by hand from vLLM 0.33.0's code (the PyPI wheel):
``models/kimi_k3/nvidia/kda.py`` (``KimiK3DeltaAttention``: ``get_state_dtype``,
``get_kv_cache_spec``, ``resolve_kda_prefill_backend``, ``is_flashkda_supported``,
``__init__``'s weights), ``model_executor/layers/mamba/kda_checkpoint.py``
(``kda_prefill_checkpoint_alignment``: 16 for FlashKDA, else None),
``model_executor/layers/mamba/mamba_utils.py`` (``kda_state_shape``,
``kda_state_dtype``: ``auto`` float32, else float32 or bfloat16),
``models/kimi_k3/nvidia/mla.py`` (``MultiHeadLatentAttention``), ``model.py``
(``KimiDecoderLayer``, ``KimiMoE``, ``KimiLinearModel``), ``mtp.py``
(``KimiK3MultiTokenPredictorLayer``), ``model_executor/layers/linear.py``
(``KimiK3MergedQKVGateLinear``), ``platforms/interface.py`` (``_align_hybrid_block_size``)
and ``v1/kv_cache_interface.py`` (``MambaSpec.max_memory_usage_bytes``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from family_configs import KIMI_K3, KIMI_K3_UNBOUNDED, folder, vllm_plan

from kvbudget import count_params, plan, weights_bytes
from kvbudget.architectures.kimi_linear import vllm_expert_padding_bytes
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import KimiDeltaLayer, MLALayer
from kvbudget.model import parse_config

GIB = 1024**3
BF16, FP32 = parse_dtype("bf16"), parse_dtype("fp32")


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="kimi-k3-test")


def with_text(**fields: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(KIMI_K3)
    cfg["text_config"].update(fields)
    return cfg


def test_layers_and_mtp_follow_the_text_config() -> None:
    m = parse(KIMI_K3)
    assert m.model_type == "kimi_k3" and m.dtype == "bf16"
    # is_kda_layer(i): i + 1 in kda_layers; MLA on 0-indexed 4, 8, ..., 24
    assert [x.index for x in m.layers if isinstance(x, MLALayer)] == [4, 8, 12, 16, 20, 24]
    kda = [x for x in m.layers if isinstance(x, KimiDeltaLayer)]
    assert len(kda) == 21
    assert {(x.num_heads, x.head_dim, x.conv_kernel, x.full_rank_gate, x.bounded_gate)
            for x in kda} == {(32, 128, 4, True, True)}  # fmt: skip
    # KimiK3MultiTokenPredictor: one KimiDecoderLayer numbered num_hidden_layers (27),
    # MLA (28 is not in kda_layers)
    assert m.mtp_layers == (MLALayer(index=27, kv_lora_rank=512, qk_rope_head_dim=64),)
    # kda_state_dtype: mamba_ssm_cache_dtype "auto" is float32
    assert m.ssm_state_dtype == "fp32"
    assert any("vision tower keeps no KV cache" in a for a in m.assumed)
    unbounded = parse(KIMI_K3_UNBOUNDED)
    assert {x.bounded_gate for x in unbounded.layers if isinstance(x, KimiDeltaLayer)} == {False}


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        # vLLM would fill KimiLinearConfig's defaults: no kv_lora_rank, and
        # KimiDecoderLayer asserts one; it asserts mla_use_nope too
        ({"model_type": "kimi_k3"}, "text_config"),
        (with_text(mla_use_nope=False), "NoPE only"),
        # vLLM would build every layer as MLA (is_kda_layer False); kvbudget reads the
        # KDA layers' config and refuses a Kimi K3 without one
        (with_text(linear_attn_config=None), "linear_attn_config"),
    ],
)
def test_configs_refused_name_the_field(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse(cfg)


def test_a_kda_mtp_block_is_refused() -> None:
    # kda_layers naming 28 would make the MTP block (KimiDecoderLayer 27) a KDA layer,
    # a recurrent draft layer kvbudget does not model: refused as past the decoder's
    cfg = copy.deepcopy(KIMI_K3)
    cfg["text_config"]["linear_attn_config"]["kda_layers"].append(28)
    with pytest.raises(ConfigError, match=r"kda_layers must be layer numbers 1\.\.27"):
        parse(cfg)


def test_state_and_latent_bytes_by_hand() -> None:
    kda = KimiDeltaLayer(index=0, num_heads=32, head_dim=128, conv_kernel=4, full_rank_gate=True)
    # kda_state_shape: conv (3 x 32 x 128 / tp, 4 - 1 + K) in the conv dtype, recurrent
    # (32 / tp, 128, 128) in mamba_ssm_cache_dtype: auto float32, here bf16 when asked
    assert kda.state_bytes(BF16, 1, ssm_dtype=FP32) == 3 * 3 * 4096 * 2 + 32 * 128 * 128 * 4
    assert kda.state_bytes(BF16, 1, ssm_dtype=FP32) == 73_728 + 2_097_152 == 2_170_880
    assert kda.state_bytes(BF16, 1, ssm_dtype=BF16) == 73_728 + 1_048_576 == 1_122_304
    assert kda.state_bytes(BF16, 1) == 1_122_304  # no SSM dtype: the state dtype
    assert kda.state_bytes(BF16, 8, lookahead=3, ssm_dtype=FP32) == 6 * 3 * 512 * 2 + 262_144
    # Kimi-Linear's layer (no full-rank gate) stays float32 whatever is asked
    linear = KimiDeltaLayer(index=0, num_heads=32, head_dim=128, conv_kernel=4)
    assert linear.state_bytes(BF16, 1, ssm_dtype=BF16) == 2_170_880
    # MultiHeadLatentAttention.get_kv_cache_spec: 512 + 64 values, one head, replicated
    assert MLALayer(index=4, kv_lora_rank=512, qk_rope_head_dim=64).bytes_per_token(BF16, 8) == 1152


def _groups(e: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(g["kind"], g["layers"], g["padding_layers"], g["page_bytes"], g["block_size"],
             g["blocks_per_request"]) for g in e["kv_cache_groups"]]  # fmt: skip


def test_vllm_groups_with_the_flashkda_checkpoint_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, KIMI_K3)
    # _align_hybrid_block_size, use_mla: 128 x cdiv(2_170_880, 128 x 1152) = 1920 tokens
    # (KimiK3DeltaAttention declares no checkpoint alignment: no lcm with 16)
    assert e["block_size"] == 128 * 15 == 1920
    page = 1920 * 1152
    assert page == 2_211_840
    # resolve_kda_prefill_backend("auto") on SM90: FlashKDA (head_dim 128, bf16, a
    # gate_lower_bound), so get_kv_cache_spec sets num_prefill_checkpoint_blocks 1: a KDA
    # group holds 2 + K + 1 = 3 states a request in align mode; MLA cdiv(32768, 1920) = 18
    assert _groups(e) == [
        ("mamba", 6, 0, page, 1920, 3),
        ("mamba", 5, 1, page, 1920, 3),
        ("mamba", 5, 1, page, 1920, 3),
        ("mamba", 5, 1, page, 1920, 3),
        ("mla", 6, 0, page, 1920, 18),
    ]
    assert e["bytes_per_block"] == 6 * page == 13_271_040
    assert e["num_gpu_blocks"] == 40 * GIB // 13_271_040 == 3236
    assert e["blocks_per_request"] == 4 * 3 + 18 == 30
    assert e["gpu_kv_cache_tokens"] == int(3236 / 30 * 32768) == 3_534_574  # the harness's


def test_vllm_without_a_gate_bound_takes_triton_and_no_checkpoint(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, KIMI_K3_UNBOUNDED)
    # is_flashkda_supported needs lower_bound is not None: Triton, no checkpoint state,
    # 2 + K = 2 states a request; prefix caching off ("none" mode): 1 + K = 1
    assert [g[5] for g in _groups(e)] == [2, 2, 2, 2, 18]
    assert e["gpu_kv_cache_tokens"] == int(3236 / (4 * 2 + 18) * 32768) == 4_078_355
    off = vllm_plan(tmp_path / "off", KIMI_K3, enable_prefix_caching=False)
    assert [g[5] for g in _groups(off)][:4] == [1, 1, 1, 1]
    # the plan's note counts the checkpoint state only where the layers keep one
    for cfg, states in ((KIMI_K3, "2 + K + 1 states"), (KIMI_K3_UNBOUNDED, "2 + K states")):
        p = plan(folder(tmp_path / states, cfg), spec="none", engine="vllm",
                 kv_budget="40GiB", host_budget=0, max_seq_len=32768)  # fmt: skip
        (note,) = [n for n in p.engine.notes if "prefix caching on for this hybrid" in n]
        assert f"vLLM keeps {states} per request" in note
        flashkda = [n for n in p.engine.notes if "FlashKDA's prefill checkpoint" in n]
        assert len(flashkda) == (cfg is KIMI_K3)


def test_vllm_mtp_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, KIMI_K3, spec="mtp", max_draft_len=3)
    # K = 3: conv 6 rows x 3 x 4096 bf16 + 32 x 128 x 128 fp32 = 2,244,608 B a state;
    # 128 x cdiv(2_244_608, 147_456) = 2048 tokens, a 2,359,296 B page
    assert e["block_size"] == 128 * 16 == 2048
    page = 2048 * 1152
    assert page == 2_359_296
    # 21 KDA + 6 MLA + the MTP block's MLA layer (a draft layer in the MLA bucket):
    # group size 7 (21 >= 1.5 x 7): three KDA groups of 7, the MLA group of 7;
    # 2 + K + 1 = 6 states a request, MLA cdiv(32768, 2048) = 16 blocks
    assert _groups(e) == [
        ("mamba", 7, 0, page, 2048, 6),
        ("mamba", 7, 0, page, 2048, 6),
        ("mamba", 7, 0, page, 2048, 6),
        ("mla", 7, 0, page, 2048, 16),
    ]
    assert [g["draft_layers"] for g in e["kv_cache_groups"]] == [0, 0, 0, 1]
    assert e["bytes_per_block"] == 7 * page == 16_515_072
    assert e["num_gpu_blocks"] == 40 * GIB // 16_515_072 == 2600
    assert e["gpu_kv_cache_tokens"] == int(2600 / (3 * 6 + 16) * 32768) == 2_505_788
    assert e["settings"]["--speculative-config"] == {"method": "mtp", "num_speculative_tokens": 3}


def test_vllm_bf16_state_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, KIMI_K3, state_dtype="bf16")
    # --mamba-ssm-cache-dtype bfloat16: 73,728 + 1,048,576 = 1,122,304 B a state;
    # 128 x cdiv(1_122_304, 147_456) = 1024 tokens, 1,179,648 B pages
    assert e["block_size"] == 1024
    assert e["bytes_per_block"] == 6 * 1024 * 1152 == 7_077_888
    assert e["num_gpu_blocks"] == 40 * GIB // 7_077_888 == 6068
    assert e["gpu_kv_cache_tokens"] == int(6068 / (4 * 3 + 32) * 32768) == 4_519_005
    assert e["settings"]["--mamba-cache-dtype"] == "bfloat16"
    assert e["settings"]["--mamba-ssm-cache-dtype"] == "bfloat16"
    assert "--mamba-ssm-cache-dtype" not in vllm_plan(tmp_path / "auto", KIMI_K3)["settings"]
    # a config naming mamba_ssm_cache_dtype, which vLLM does not read for Kimi K3: the
    # plan keeps it and says so to vLLM (the conv state stays the model dtype, auto)
    named = vllm_plan(tmp_path / "named", with_text(mamba_ssm_cache_dtype="bfloat16"))
    assert named["block_size"] == 1024 and named["num_gpu_blocks"] == 6068
    assert named["settings"]["--mamba-ssm-cache-dtype"] == "bfloat16"
    assert "--mamba-cache-dtype" not in named["settings"]


def test_what_vllm_or_kvbudget_do_not_cover_is_refused(tmp_path: Path) -> None:
    target = folder(tmp_path, KIMI_K3)
    args: dict[str, Any] = {"spec": "none", "kv_budget": "8GiB", "host_budget": 0}
    # kda_state_dtype: "KDA recurrent state supports only auto, float32, and bfloat16"
    with pytest.raises(InvalidArgumentError, match="float32 or bfloat16 only"):
        plan(target, engine="vllm", state_dtype="fp16", **args)
    fp16 = folder(tmp_path / "fp16", with_text(mamba_ssm_cache_dtype="float16"))
    with pytest.raises(InvalidArgumentError, match="not fp16"):
        plan(fp16, engine="vllm", **args)
    # 0.29.0's KimiK3DeltaAttention.get_state_dtype passes no mamba_ssm_cache_dtype: its
    # recurrent state is float32 (kda.py:363-375), so a bf16 one is refused there
    with pytest.raises(InvalidArgumentError, match=r"or --engine vllm@0\.33\.0$"):
        plan(target, engine="vllm@0.29.0", state_dtype="bf16", **args)
    assert plan(target, engine="vllm@0.29.0", **args).engine.version == "0.29.0"
    # SGLang's pools: tests/test_sglang_kimi.py; kvbudget's own: tests/test_kimi_own_cache.py
    with pytest.raises(InvalidArgumentError, match="Kimi K3 \\(KDA\\) cache manager"):
        plan(target, engine="trtllm", **args)


def test_weights_by_hand() -> None:
    c = count_params(parse(KIMI_K3))
    # one KimiK3DeltaAttention: in_proj_qkvgfab q, k, v, g (4 x 4096) + b (32) + f_a
    # (128) rows of 2304; f_b_proj 4096 x 128; dt_bias 4096; conv1d 3 x 4096 x 4; A_log
    # 32; o_norm 128; o_proj 2304 x 4096 (no g_a_proj / g_b_proj: the gate is full rank)
    kda = (4 * 4096 + 32 + 128) * 2304 + 4096 * 128 + 4096 + 12288 * 4 + 32 + 128
    kda += 2304 * 4096
    assert kda == 48_132_256
    assert c.recurrent == 21 * kda
    # one MLA layer with the q LoRA and output gate (fused_qkv_a_g_proj: q_a 1536 and
    # kv_a 576 replicated, g 32 x 128 column; q_a_layernorm 1536; q_b_proj 32 x 192 rows
    # of 1536; kv_a_layernorm 512; kv_b_proj 32 x 256 rows of 512; o_proj 2304 x 4096)
    mla = (1536 + 576 + 4096) * 2304 + 1536 + 6144 * 1536 + 512 + 8192 * 512 + 2304 * 4096
    assert mla == 37_373_952
    assert c.attention == 6 * mla
    # KimiMoE on layers 1..26: router 256 x 2304 + fp32 bias 256 and (counted beside it)
    # the latent MoE's routed_expert_down_proj 1024 x 2304, its norm 1024,
    # routed_expert_up_proj 2304 x 1024; 256 experts of 3 x 1024 x 1024 on the latent
    # width; one shared expert 3 x 1024 x 2304
    latent = 2 * 1024 * 2304 + 1024
    assert c.routers == 26 * (256 * 2304 + 256 + latent)
    assert c.routed_experts == 26 * 256 * 3 * 1024 * 1024 == 20_937_965_568
    assert c.shared_experts == 26 * 3 * 1024 * 2304
    assert c.dense_mlp == 3 * 9216 * 2304
    assert c.embeddings == c.lm_head == 163_840 * 2304
    # per layer: two norms, the attention residuals' two norms and two 1 x 2304 projections;
    # the final norm, output_attn_res_norm and output_attn_res_proj
    assert c.norms == 27 * 6 * 2304 + 3 * 2304 == 380_160
    # the MTP layer: enorm, hnorm, eh_proj 2304 x 4608, an MLA block (no attention
    # residuals), its two norms, an MoE (27 >= 1), shared_head.norm
    moe = 256 * 2304 + 256 + 256 * 3 * 1024 * 1024 + latent + 3 * 1024 * 2304
    assert c.mtp == 2 * 2304 + 2304 * 4608 + mla + 2 * 2304 + moe + 2304 == 865_696_256


def test_weight_bytes_by_hand() -> None:
    model = parse(KIMI_K3)
    w = weights_bytes(model, tp=1)
    # conv1d (params_dtype float32), dt_bias and A_log float32, the rest bf16
    fp32 = 4096 + 12288 * 4 + 32
    assert w.recurrent_bytes == 21 * ((48_132_256 - fp32) * 2 + fp32 * 4) == 2_023_792_512
    assert w.routers_bytes == 26 * (256 * 2304 * 2 + 256 * 4 + (2 * 1024 * 2304 + 1024) * 2)
    # TP 8: q_a, kv_a replicated; g_proj, q_b_proj, kv_b_proj column; o_proj row
    tp8 = weights_bytes(model, tp=8)
    per_rank = (1536 + 576) * 2304 + 1536 + 512 + (4096 * 2304 + 6144 * 1536) // 8
    per_rank += (8192 * 512 + 2304 * 4096) // 8
    assert tp8.attention_bytes == 6 * per_rank * 2 == 107_175_936
    assert weights_bytes(model, tp=1, include_mtp=True).mtp_bytes > 0


def test_vllm_pads_the_latent_experts_at_tp8_and_the_plan_warns(tmp_path: Path) -> None:
    # KimiMoE (model.py): moe_intermediate_size 1024 / TP 8 = 128 < 256 rows a partition
    # without expert parallelism: each expert padded to 256 x 8 = 2,048 rows, on the
    # latent width. bf16 experts at TP 8: 26 x 256 x 3 x 1024 x 1024 x 2 B / 8 per rank
    routed = 26 * 256 * 3 * 1024 * 1024 * 2 // 8
    assert routed == 5_234_491_392
    model = parse(KIMI_K3)
    assert weights_bytes(model, tp=8).routed_experts_bytes == routed
    assert vllm_expert_padding_bytes(model, tp=8, ep=1) == routed * 2048 // 1024 - routed
    assert vllm_expert_padding_bytes(model, tp=4, ep=1) == 0  # 1024 / 4 = 256
    p = plan(folder(tmp_path, KIMI_K3), spec="none", engine="vllm", kv_budget="40GiB",
             host_budget=0, max_seq_len=32768, tp=8)  # fmt: skip
    (warned,) = [w for w in p.warnings if w.startswith("vLLM pads")]
    assert "(5,234,491,392 B) more weights per rank" in warned


def test_checkpoint_names_match_the_inventory() -> None:
    """Stored tensor names (the multimodal checkpoint's ``language_model.`` prefix, the
    packed projections by their parts, experts w1/w3/w2, the MTP block under its layer:
    KimiLinearModel.load_weights, KimiK3MTP.load_weights) find their inventory tensor,
    so header bytes are sharded as vLLM shards them."""
    from kvbudget.architectures import model_inventory
    from kvbudget.weights.headers import match

    names = {
        "language_model.model.layers.0.self_attn.q_proj.weight": ("column", "recurrent"),
        "language_model.model.layers.0.self_attn.f_a_proj.weight": ("replicated", "recurrent"),
        "language_model.model.layers.0.self_attn.q_conv1d.weight": ("column", "recurrent"),
        "language_model.model.layers.4.self_attn.q_a_proj.weight": ("replicated", "attention"),
        "language_model.model.layers.4.self_attn.g_proj.weight": ("column", "attention"),
        "language_model.model.layers.1.block_sparse_moe.experts.17.w2.weight": (
            "row",
            "routed_experts",
        ),
        "language_model.model.layers.1.block_sparse_moe.routed_expert_down_proj.weight": (
            "replicated",
            "routers",
        ),
        "language_model.model.layers.27.eh_proj.weight": ("replicated", "mtp"),
        "language_model.model.layers.27.self_attn.kv_b_proj.weight": ("column", "mtp"),
        "language_model.model.embed_tokens.weight": ("vocab", "embeddings"),
        "language_model.lm_head.weight": ("vocab", "lm_head"),
    }
    found = match(list(names), model_inventory(parse(KIMI_K3)))
    assert [(w.shard, w.component) if w else None for w in found] == list(names.values())


# A tiny Kimi K3 as a Hub repository: the text model's tensors under the names its
# loaders read (KimiLinearModel.load_weights' stacked mapping and expert mapping,
# KimiK3MTP.load_weights' ``language_model.`` prefix and MTP layer), shapes from the
# config; the float32 tensors vLLM holds (convolutions, dt_bias, A_log, the correction
# bias) stored float32; one vision-tower tensor no inventory tensor names.
_TINY_TEXT: dict[str, Any] = {
    "model_type": "kimi_linear",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "moe_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 16,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "mla_use_nope": True,
    "mla_use_output_gate": True,
    "num_experts": 4,
    "num_experts_per_token": 2,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "routed_expert_hidden_size": 32,
    "latent_moe_use_norm": True,
    "attn_res_block_size": 1,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 4096,
    "linear_attn_config": {
        "kda_layers": [1],
        "full_attn_layers": [2],
        "num_heads": 2,
        "head_dim": 32,
        "short_conv_kernel_size": 4,
        "use_full_rank_gate": True,
        "gate_lower_bound": -5.0,
    },
}
_TINY_K3 = {"model_type": "kimi_k3", "torch_dtype": "bfloat16", "text_config": _TINY_TEXT}
_B, _F = "BF16", "F32"


def _tiny_mla_moe(p: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    a, m = f"{p}.self_attn", f"{p}.block_sparse_moe"
    out: dict[str, tuple[str, tuple[int, ...]]] = {
        f"{a}.q_a_proj.weight": (_B, (32, 64)),
        f"{a}.q_a_layernorm.weight": (_B, (32,)),
        f"{a}.q_b_proj.weight": (_B, (64, 32)),  # 2 heads x (16 + 16)
        f"{a}.kv_a_proj_with_mqa.weight": (_B, (48, 64)),
        f"{a}.g_proj.weight": (_B, (32, 64)),  # 2 heads x v 16
        f"{a}.kv_a_layernorm.weight": (_B, (32,)),
        f"{a}.kv_b_proj.weight": (_B, (64, 32)),
        f"{a}.o_proj.weight": (_B, (64, 32)),
        f"{p}.input_layernorm.weight": (_B, (64,)),
        f"{p}.post_attention_layernorm.weight": (_B, (64,)),
        f"{m}.gate.weight": (_B, (4, 64)),
        f"{m}.gate.e_score_correction_bias": (_F, (4,)),
        f"{m}.routed_expert_down_proj.weight": (_B, (32, 64)),
        f"{m}.routed_expert_norm.weight": (_B, (32,)),
        f"{m}.routed_expert_up_proj.weight": (_B, (64, 32)),
        f"{m}.shared_experts.gate_proj.weight": (_B, (32, 64)),
        f"{m}.shared_experts.up_proj.weight": (_B, (32, 64)),
        f"{m}.shared_experts.down_proj.weight": (_B, (64, 32)),
    }
    for e in range(4):
        for w in ("w1", "w2", "w3"):
            out[f"{m}.experts.{e}.{w}.weight"] = (_B, (32, 32))
    return out


def _tiny_res(p: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {
        f"{p}.self_attention_res_norm.weight": (_B, (64,)),
        f"{p}.mlp_res_norm.weight": (_B, (64,)),
        f"{p}.self_attention_res_proj.weight": (_B, (1, 64)),
        f"{p}.mlp_res_proj.weight": (_B, (1, 64)),
    }


def _tiny_k3_tensors() -> dict[str, tuple[str, tuple[int, ...]]]:
    t, a = "language_model.model.layers.0", "language_model.model.layers.0.self_attn"
    out: dict[str, tuple[str, tuple[int, ...]]] = {
        "language_model.model.embed_tokens.weight": (_B, (256, 64)),
        **{f"{a}.{x}_proj.weight": (_B, (64, 64)) for x in "qkvg"},  # 2 heads x 32
        f"{a}.f_a_proj.weight": (_B, (32, 64)),
        f"{a}.b_proj.weight": (_B, (2, 64)),
        **{f"{a}.{x}_conv1d.weight": (_F, (64, 1, 4)) for x in "qkv"},
        f"{a}.f_b_proj.weight": (_B, (64, 32)),
        f"{a}.dt_bias": (_F, (64,)),
        f"{a}.A_log": (_F, (2,)),
        f"{a}.o_norm.weight": (_B, (32,)),
        f"{a}.o_proj.weight": (_B, (64, 64)),
        f"{t}.input_layernorm.weight": (_B, (64,)),
        f"{t}.post_attention_layernorm.weight": (_B, (64,)),
        **_tiny_res(t),
        f"{t}.mlp.gate_proj.weight": (_B, (128, 64)),
        f"{t}.mlp.up_proj.weight": (_B, (128, 64)),
        f"{t}.mlp.down_proj.weight": (_B, (64, 128)),
        **_tiny_mla_moe("language_model.model.layers.1"),
        **_tiny_res("language_model.model.layers.1"),
        "language_model.model.norm.weight": (_B, (64,)),
        "language_model.model.output_attn_res_norm.weight": (_B, (64,)),
        "language_model.model.output_attn_res_proj.weight": (_B, (1, 64)),
        "language_model.lm_head.weight": (_B, (256, 64)),
        # the MTP layer: enorm, hnorm, eh_proj, the block's tensors, shared_head.norm
        "language_model.model.layers.2.enorm.weight": (_B, (64,)),
        "language_model.model.layers.2.hnorm.weight": (_B, (64,)),
        "language_model.model.layers.2.eh_proj.weight": (_B, (64, 128)),
        **_tiny_mla_moe("language_model.model.layers.2"),
        "language_model.model.layers.2.shared_head.norm.weight": (_B, (64,)),
    }
    return out


VISION = {"vision_tower.patch_embed.proj.weight": (_B, (1024, 8))}  # 16,384 B


def test_a_hub_checkpoint_plans_from_its_headers(tmp_path: Path) -> None:
    """Every text tensor of the checkpoint finds its inventory tensor (sharded as vLLM
    shards it at TP 2): the header figure is the inventory's plus the vision tensor,
    held whole; with MTP, plus the MTP layer."""
    import json
    import os
    import subprocess
    import sys

    from hub_server import FakeHub, sharded

    tensors = _tiny_k3_tensors()
    files = {"config.json": json.dumps(_TINY_K3).encode(), **sharded({
        "model-00001-of-00002.safetensors": dict(list(tensors.items())[:40]),
        "model-00002-of-00002.safetensors": {**dict(list(tensors.items())[40:]), **VISION},
    })}  # fmt: skip
    model = parse(_TINY_K3)
    from kvbudget.architectures import model_inventory
    from kvbudget.weights.headers import match

    found = match([*tensors, *VISION], model_inventory(model))
    assert [w is None for w in found] == [False] * len(tensors) + [True]
    expected = {
        spec: weights_bytes(model, tp=2, include_mtp=spec == "mtp", source="inventory")
        for spec in ("none", "mtp")
    }
    hub = FakeHub().start()
    try:
        hub.add("acme/tiny-kimi-k3", files)
        environ = dict(os.environ)
        environ.update(
            HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "home"),
            HF_HUB_CACHE=str(tmp_path / "cache"), NO_COLOR="1",
        )  # fmt: skip
        for spec, want in expected.items():
            done = subprocess.run(
                [sys.executable, "-m", "kvbudget", "plan", "--json", "--target",
                 "acme/tiny-kimi-k3", "--engine", "vllm", "--spec", spec, "--tp", "2",
                 "--max-seq-len", "4096", "--max-batch-size", "4"],
                capture_output=True, text=True, env=environ, timeout=120, check=False,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            data = json.loads(done.stdout)
            assert data["weights_source"] == {"target": "safetensors headers"}
            assert data["budget"]["weights_bytes"] == want.total_bytes + 16_384
    finally:
        hub.stop()


@pytest.mark.parametrize(
    "field", ["q_lora_rank", "routed_expert_hidden_size", "attn_res_block_size"]
)
def test_a_kimi_linear_config_with_k3_parts_points_to_kimi_k3(field: str) -> None:
    """vLLM's KimiLinearForCausalLM builds them too; kvbudget reads them in the kimi_k3
    wrapper only, and says so."""
    cfg = {**copy.deepcopy(KIMI_K3["text_config"]), "num_nextn_predict_layers": 0}
    cfg["linear_attn_config"] = copy.deepcopy(
        KIMI_K3_UNBOUNDED["text_config"]["linear_attn_config"]
    )
    del cfg["linear_attn_config"]["use_full_rank_gate"]
    for other in {"q_lora_rank", "routed_expert_hidden_size", "attn_res_block_size"} - {field}:
        cfg[other] = None
    with pytest.raises(ConfigError, match=f"{field}.*model_type kimi_k3"):
        count_params(parse(cfg))
    cfg["linear_attn_config"]["use_full_rank_gate"] = True
    with pytest.raises(ConfigError, match="modelled for model_type kimi_k3"):
        parse(cfg)
