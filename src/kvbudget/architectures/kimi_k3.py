"""Kimi K3: Kimi-Linear's KDA beside NoPE MLA, with a full-rank KDA gate, a q LoRA, an
output gate, attention residuals, a latent MoE and MTP layers.

Config, as vLLM 0.33.0 reads it (the PyPI wheel): the checkpoint is the vision-language
``kimi_k3`` wrapper (``vllm/transformers_utils/configs/kimi_k3.py`` ``KimiK3Config``),
whose ``text_config`` is a ``KimiLinearConfig``
(``transformers_utils/configs/kimi_linear.py``); a field the text config leaves out takes
that class's default (:data:`TEXT_DEFAULTS`), as vLLM's does. No verbatim Kimi K3 config
is reachable from this project, and neither class's defaults describe a KDA, MLA or MoE
layer (``linear_attn_config``, ``kv_lora_rank`` and ``num_experts`` default to None), so
no preset ships; the tests' config (``tests/family_configs.py``) says where its values
come from. vLLM's KV cache is the text model's: the vision tower
(``KimiK3ForConditionalGeneration.vision_tower``, ``mm_projector``) keeps none and its
weights are not counted here.

Cache (``vllm/models/kimi_k3/nvidia/model.py`` ``KimiDecoderLayer``): where
``is_kda_layer(i)`` (``i + 1 in kda_layers``) a :class:`~kvbudget.layers.KimiDeltaLayer`,
else an :class:`~kvbudget.layers.MLALayer` (``mla.py`` ``MultiHeadLatentAttention``: one
``kv_lora_rank + qk_rope_head_dim`` latent a token, ``max_tp_shards=1``; NoPE only). A
KDA layer with ``linear_attn_config.use_full_rank_gate`` is ``KimiK3DeltaAttention``
(``kda.py``: its recurrent state in ``mamba_ssm_cache_dtype``, ``auto`` float32:
``mamba_utils.py`` ``kda_state_dtype``; with the FlashKDA prefill one prefill checkpoint
state more per request, ``get_kv_cache_spec``: the engine model decides, from
``gate_lower_bound``); without it the Kimi-Linear layer
(``KimiLinearGatedDeltaNetAttention``). Attention residuals and the latent MoE keep no
cache. MTP (``--spec mtp``; ``config/speculative.py`` maps ``kimi_k3`` to
``kimi_k3_mtp``, ``nvidia/mtp.py`` ``KimiK3MultiTokenPredictor``):
``num_nextn_predict_layers`` ``KimiDecoderLayer`` blocks numbered from
``num_hidden_layers``, each an MLA layer (``kda_layers`` naming one, a recurrent draft
layer, is refused with the layer numbers past the decoder's).

Weights: vLLM's modules under the checkpoint's names (``language_model.model.*``, the
prefix the MTP loader strips, ``KimiK3MTP.load_weights``; the packed projections by their
parts, ``KimiLinearModel.load_weights``' stacked mapping; experts ``w1``/``w3``/``w2``),
so that safetensors headers match them, in vLLM's storage (the convolutions, ``dt_bias``,
``A_log``, ``e_score_correction_bias`` float32). Not counted: ``in_proj_qkvgfab``'s
alignment rows (``in_proj_padding``: a TP rank's ``4 x P / tp + head_dim + heads / tp``
rows rounded up to 16) and the decode kernels' float32 copies of ``conv1d`` and
``o_norm`` (``decode_conv1d_weight``, ``decode_norm_weight``: buffers, not checkpoint
tensors).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import final, gated_mlp
from kvbudget.architectures.kimi_linear import kda as kimi_linear_kda
from kvbudget.architectures.kimi_linear import (
    kda_flags,
    latent_attention,
    linear_attn_config,
    linear_int,
)
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import KimiDeltaLayer, Layer, MLALayer

# KimiLinearConfig.__init__ defaults (vLLM 0.33.0), the fields read here that have one
TEXT_DEFAULTS: MappingProxyType[str, Any] = MappingProxyType(
    {
        "vocab_size": 163840,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "num_shared_experts": 0,
        "first_k_dense_replace": 0,
        "moe_layer_freq": 1,
        "mla_use_nope": False,
        "mla_use_output_gate": False,
        "num_nextn_predict_layers": 0,
        "latent_moe_use_norm": False,
    }
)


def _kda_layer(f: ConfigFields, index: int) -> KimiDeltaLayer:
    cfg = linear_attn_config(f, k3=True)
    return KimiDeltaLayer(
        index=index,
        num_heads=linear_int(f, cfg, "num_heads"),
        head_dim=linear_int(f, cfg, "head_dim"),
        conv_kernel=linear_int(f, cfg, "short_conv_kernel_size"),
        full_rank_gate=bool(cfg.get("use_full_rank_gate", False)),
        bounded_gate=cfg.get("gate_lower_bound") is not None,
    )


def _mla_layer(f: ConfigFields, index: int) -> MLALayer:
    if f.get("mla_use_nope") is not True:
        # KimiDecoderLayer: ``assert mla_use_nope, "Kimi-K3 MLA ... is NoPE-only"``
        raise f.error("mla_use_nope", "vLLM builds Kimi K3's MLA layers NoPE only: true")
    return MLALayer(
        index=index,
        kv_lora_rank=f.int("kv_lora_rank"),
        qk_rope_head_dim=f.int("qk_rope_head_dim"),
    )


def layers(f: ConfigFields) -> list[Layer]:
    """A KDA layer where ``kda_layers`` says, else an MLA layer."""
    return [
        _kda_layer(f, i) if is_kda else _mla_layer(f, i)
        for i, is_kda in enumerate(kda_flags(f, k3=True))
    ]


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """``num_nextn_predict_layers`` MLA layers from ``start`` (``num_hidden_layers``):
    ``KimiK3MultiTokenPredictorLayer.mtp_block``, a ``KimiDecoderLayer`` numbered
    ``start + j``: KDA only if ``kda_layers`` named ``start + j + 1``, which
    :func:`~kvbudget.architectures.kimi_linear.kda_flags` refuses (layer numbers
    ``1..num_hidden_layers``)."""
    count = f.int("num_nextn_predict_layers", 0, minimum=0)
    return tuple(_mla_layer(f, index) for index in range(start, start + count))


# --------------------------------------------------------------------------- weights


def kda(at: At, c: ModelFields) -> None:
    """``KimiK3DeltaAttention`` (kda.py ``__init__``) with the full-rank gate, else the
    Kimi-Linear layer, under the checkpoint's names (``KimiLinearModel.load_weights``'
    stacked mapping): ``in_proj_qkvgfab`` packs ``q_proj``, ``k_proj``, ``v_proj`` and
    ``g_proj`` (column-parallel, ``num_heads x head_dim`` each), ``f_a_proj``
    (``head_dim``, replicated: shard 4) and ``b_proj`` (one a head, column); ``conv1d``
    packs ``q_conv1d``, ``k_conv1d``, ``v_conv1d`` (float32, unquantized, heads x
    head_dim by the kernel each); ``f_b_proj`` (column, from ``head_dim``), ``dt_bias``
    (float32, one a projection value), ``A_log`` (float32, one a head), ``o_norm``
    (``head_dim``), ``o_proj`` (row)."""
    cfg = linear_attn_config(c, k3=True)
    if not cfg.get("use_full_rank_gate", False):
        kimi_linear_kda(at, c)
        return
    heads, dim = linear_int(c, cfg, "num_heads"), linear_int(c, cfg, "head_dim")
    conv = linear_int(c, cfg, "short_conv_kernel_size")
    hidden = c.int("hidden_size")
    proj = ((heads, dim),)
    for name in ("q_proj", "k_proj", "v_proj", "g_proj"):
        at.linear(name, proj, hidden, shard="column")
    at.linear("f_a_proj", dim, hidden, shard="replicated")
    at.linear("b_proj", ((heads, 1),), hidden, shard="column")
    for name in ("q_conv1d", "k_conv1d", "v_conv1d"):
        at.tensor(name, proj, conv, shard="column", fixed="fp32")
    at.linear("f_b_proj", proj, dim, shard="column")
    at.tensor("dt_bias", proj, shard="column", fixed="fp32")
    at.tensor("A_log", ((heads, 1),), shard="column", fixed="fp32")
    at.norm("o_norm", dim)
    at.linear("o_proj", hidden, proj, shard="row")


def moe(layer: At, c: ModelFields) -> None:
    """``KimiMoE`` (model.py ``__init__``): the router ``gate`` and its float32
    ``e_score_correction_bias``, the shared experts (``moe_intermediate_size x
    num_shared_experts``, on the full hidden size), and the routed experts, which with
    ``routed_expert_hidden_size`` (the latent MoE) run on that latent width between a
    replicated ``routed_expert_down_proj`` (hidden -> latent), an optional
    ``routed_expert_norm`` (``latent_moe_use_norm``) and a replicated
    ``routed_expert_up_proj`` (latent -> hidden), counted with the routers (the
    experts alone are ``routed_experts``, whose rows vLLM pads at high TP:
    :func:`~kvbudget.architectures.kimi_linear.vllm_expert_padding_bytes`)."""
    hidden = c.int("hidden_size")
    experts, inter = c.int("num_experts"), c.int("moe_intermediate_size")
    moe = layer.sub("block_sparse_moe")
    gate = moe.sub("gate", "routers")
    gate.tensor("weight", experts, hidden)
    gate.tensor("e_score_correction_bias", experts, fixed="fp32")
    width = hidden
    if c.get("routed_expert_hidden_size") is not None:
        width = c.int("routed_expert_hidden_size")
        latent = moe.sub("", "routers")  # beside the router: routed_experts is the experts
        latent.linear("routed_expert_down_proj", width, hidden, shard="replicated")
        if c.flag("latent_moe_use_norm", False):
            latent.norm("routed_expert_norm", width)
        latent.linear("routed_expert_up_proj", hidden, width, shard="replicated")
    # the checkpoint's expert names (fused_moe_make_expert_params_mapping: w1 gate, w3
    # up, w2 down)
    routed = moe.sub("experts", "routed_experts")
    for proj in ("w1", "w3"):
        routed.linear(proj, inter, width, shard="column", copies=experts)
    routed.linear("w2", width, inter, shard="row", copies=experts)
    shared = c.int("num_shared_experts", 0, minimum=0)
    if shared:
        gated_mlp(moe.sub("shared_experts", "shared_experts"), hidden, inter * shared)


def _is_moe_layer(c: ModelFields, i: int) -> bool:
    """``KimiDecoderLayer.is_moe_layer``."""
    return (
        c.get("num_experts") is not None
        and i >= c.int("first_k_dense_replace", 0, minimum=0)
        and i % c.int("moe_layer_freq", 1) == 0
    )


def attn_res(at: At, hidden: int) -> None:
    """A layer's attention residuals (``attn_res_block_size`` set): the two res norms
    and two one-output projections (``ReplicatedLinear(hidden, 1)``, unquantized)."""
    at.norm("self_attention_res_norm", hidden)
    at.norm("mlp_res_norm", hidden)
    for name in ("self_attention_res_proj", "mlp_res_proj"):
        at.linear(name, 1, hidden, shard="replicated", quantizable=False)


def decoder_layer(layer: At, c: ModelFields, i: int, *, is_kda: bool, res: bool) -> None:
    """``KimiDecoderLayer`` ``i``: KDA or MLA, the two norms, attention residuals when
    ``res``, an MoE or ``KimiMLP``."""
    hidden = c.int("hidden_size")
    attn = layer.sub("self_attn", "recurrent" if is_kda else "attention")
    (kda if is_kda else latent_attention)(attn, c)
    layer.norm("input_layernorm", hidden)
    layer.norm("post_attention_layernorm", hidden)
    if res:
        attn_res(layer, hidden)
    if _is_moe_layer(c, i):
        moe(layer, c)
    else:
        gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.int("intermediate_size"))


def mtp_weights(inv: Inventory, c: ModelFields, prefix: str) -> None:
    """``KimiK3MultiTokenPredictorLayer`` ``n + j``: ``enorm``, ``hnorm``, ``eh_proj``
    (2H -> H, replicated, unquantized), the ``mtp_block`` (an MLA ``KimiDecoderLayer``
    without attention residuals) and ``shared_head.norm``. Its ``embed_tokens`` and
    ``shared_head.head`` are not counted, as for DeepSeek's MTP (the proposer serves
    them from the target's)."""
    hidden, n = c.int("hidden_size"), c.int("num_hidden_layers")
    for j in range(c.int("num_nextn_predict_layers", 0, minimum=0)):
        mtp = Inventory()
        layer = mtp.at(f"{prefix}.layers.{n + j}", "mtp", "norms")
        layer.norm("enorm", hidden)
        layer.norm("hnorm", hidden)
        layer.linear("eh_proj", hidden, 2 * hidden, shard="replicated", quantizable=False)
        # the block's tensors under the layer itself, as the checkpoint stores them
        # (KimiK3MTP._rewrite_spec_layer_name inserts ``mtp_block``)
        decoder_layer(layer, c, n + j, is_kda=False, res=False)
        layer.norm("shared_head.norm", hidden)
        inv.extend_as_mtp(mtp)


def weights(inv: Inventory, c: ModelFields) -> None:
    """The text model (``KimiLinearForCausalLM`` under ``language_model``): embeddings,
    decoder layers, final norm (and the output attention residual's norm and projection),
    lm_head; then the MTP layers."""
    prefix = "language_model.model"
    hidden = c.int("hidden_size")
    res = c.get("attn_res_block_size") is not None
    inv.at(prefix, "first", "embeddings").vocab("embed_tokens", c.int("vocab_size"), hidden)
    for i, is_kda in enumerate(kda_flags(c, k3=True)):
        decoder_layer(inv.at(f"{prefix}.layers.{i}", i, "norms"), c, i, is_kda=is_kda, res=res)
    final(inv, c, f"{prefix}.norm", "language_model.lm_head")
    if res:
        out = inv.at(prefix, "last", "norms")
        out.norm("output_attn_res_norm", hidden)
        out.linear("output_attn_res_proj", 1, hidden, shard="replicated", quantizable=False)
    mtp_weights(inv, c, prefix)


KIMI_K3 = Architecture(
    family="kimi_k3",
    model_types=frozenset({"kimi_k3"}),
    layers=layers,
    mtp_layers=mtp_layers,
    weights=weights,
    nested_types=frozenset({"kimi_k3"}),
    text_defaults=TEXT_DEFAULTS,
    text_only_note=True,
    # vLLM's ``auto`` for the KDA recurrent state (kda_state_dtype): float32
    ssm_state_dtype="float32",
    # SGLang's pools: engines/sglang_kimi.py; kvbudget's own cache: the KDA states in its
    # recurrent-state slots, the MTP layer's latents as the draft in lockstep
    unmodelled_engines=frozenset({"trtllm"}),
    unmodelled_reasons=MappingProxyType(
        {
            "trtllm": "kvbudget's TensorRT-LLM models have not read a Kimi K3 (KDA) cache manager",
        }
    ),
)

ARCHITECTURES = (KIMI_K3,)
