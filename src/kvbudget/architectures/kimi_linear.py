"""Kimi-Linear: Kimi Delta Attention (KDA) layers beside NoPE MLA layers, MoE.

Config, as vLLM 0.33.0 reads it (``vllm/transformers_utils/configs/kimi_linear.py``
``KimiLinearConfig``): ``linear_attn_config`` names the KDA layers (``kda_layers``,
1-indexed: ``is_kda_layer(i)`` is ``i + 1 in kda_layers``), their ``num_heads``,
``head_dim`` and ``short_conv_kernel_size``; every other layer is MLA
(``kv_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``;
``q_lora_rank`` None: a full-rank ``q_proj``). The MoE fields are vLLM's names
(``num_experts``, ``num_experts_per_token``, ``moe_intermediate_size``,
``num_shared_experts``, ``first_k_dense_replace``, ``moe_layer_freq``).

Cache (vLLM 0.33.0, the PyPI wheel): a :class:`~kvbudget.layers.KimiDeltaLayer` per KDA
layer (``models/kimi_k3/nvidia/model.py`` ``KimiDecoderLayer``: without
``use_full_rank_gate`` the shared ``KimiGatedDeltaNetAttention``,
``model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py``), an
:class:`~kvbudget.layers.MLALayer` per other layer (``models/kimi_k3/nvidia/mla.py``
``MultiHeadLatentAttention``: one ``kv_lora_rank + qk_rope_head_dim`` latent a token,
``max_tp_shards=1``). vLLM builds MTP only for Kimi K3 (``config/speculative.py``:
``kimi_k3`` -> ``kimi_k3_mtp``), so a Kimi-Linear ``num_nextn_predict_layers`` > 0 is
an error.

Kimi K3 (``kimi_k3``) is read by :mod:`~kvbudget.architectures.kimi_k3`: its KDA layers
are ``KimiK3DeltaAttention`` (``models/kimi_k3/nvidia/kda.py``), with attention
residuals, a latent MoE and MTP layers of its own; a ``kimi_linear`` config with those
(``use_full_rank_gate``, ``attn_res_block_size``, ``routed_expert_hidden_size``, a q
LoRA) is refused here, naming the field.

Weights: vLLM's modules as it names them after its checkpoint mapper
(``KimiLinearModel.packed_modules_mapping``: ``in_proj_qkvgfab`` packs q, k, v, b and
f_a; ``conv1d`` packs the q, k and v convolutions), in vLLM's storage (``conv1d``,
``dt_bias``, ``A_log`` float32). With TP > 1 and no expert parallelism, vLLM's
``KimiMoE`` pads each routed expert to ``256 x TP`` intermediate rows when
``moe_intermediate_size / TP`` < 256 (``min_moe_intermediate_per_partition``); the
inventory holds the checkpoint's unpadded experts (what the weights figure counts), and a
vLLM plan warns with the padding's bytes per rank (:func:`vllm_expert_padding_bytes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import final, gated_mlp
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import KimiDeltaLayer, Layer, MLALayer

if TYPE_CHECKING:
    from kvbudget.model_spec import ModelSpec

LINEAR_FIELDS = ("kda_layers", "num_heads", "head_dim", "short_conv_kernel_size")


def linear_attn_config(f: ConfigFields, *, k3: bool = False) -> dict[str, Any]:
    """``linear_attn_config`` with the fields vLLM's KDA layer reads; its full-rank gate
    (Kimi K3's layer) is refused unless ``k3`` (:mod:`~kvbudget.architectures.kimi_k3`)."""
    cfg = f.get("linear_attn_config")
    if not isinstance(cfg, dict):
        raise f.error(
            "linear_attn_config", f"expected a mapping with {', '.join(LINEAR_FIELDS)}, got {cfg!r}"
        )
    missing = [k for k in LINEAR_FIELDS if k not in cfg]
    if missing:
        raise f.error("linear_attn_config", f"lacks {', '.join(missing)}")
    if cfg.get("use_full_rank_gate") and not k3:
        raise f.error(
            "linear_attn_config",
            "use_full_rank_gate is Kimi K3's KDA layer (KimiK3DeltaAttention), modelled for "
            "model_type kimi_k3: plan it as the text_config of a kimi_k3 config",
        )
    return cfg


def kda_flags(f: ConfigFields, *, k3: bool = False) -> list[bool]:
    """Whether each decoder layer is KDA (``KimiLinearConfig.is_kda_layer``)."""
    cfg = linear_attn_config(f, k3=k3)
    kda = cfg["kda_layers"]
    n = f.int("num_hidden_layers")
    if not isinstance(kda, list) or any(not isinstance(i, int) or not 1 <= i <= n for i in kda):
        raise f.error("linear_attn_config", f"kda_layers must be layer numbers 1..{n}, got {kda!r}")
    return [i + 1 in kda for i in range(n)]


def linear_int(f: ConfigFields, cfg: dict[str, Any], key: str) -> int:
    """``linear_attn_config[key]``, a positive integer (else a ConfigError naming it)."""
    value = cfg[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise f.error("linear_attn_config", f"{key} must be a positive integer, got {value!r}")
    return value


def layers(f: ConfigFields) -> list[Layer]:
    """A KDA layer where ``kda_layers`` says, else an MLA layer."""
    cfg = linear_attn_config(f)
    heads, head_dim = linear_int(f, cfg, "num_heads"), linear_int(f, cfg, "head_dim")
    conv = linear_int(f, cfg, "short_conv_kernel_size")
    flags = kda_flags(f)
    if not all(flags) and f.get("mla_use_nope") is not True:
        # KimiDecoderLayer: ``assert mla_use_nope, "Kimi-K3 MLA ... is NoPE-only"``
        raise f.error("mla_use_nope", "vLLM builds Kimi-Linear's MLA layers NoPE only: true")
    out: list[Layer] = []
    for i, kda in enumerate(flags):
        if kda:
            out.append(
                KimiDeltaLayer(index=i, num_heads=heads, head_dim=head_dim, conv_kernel=conv)
            )
        else:
            out.append(
                MLALayer(
                    index=i,
                    kv_lora_rank=f.int("kv_lora_rank"),
                    qk_rope_head_dim=f.int("qk_rope_head_dim"),
                )
            )
    return out


# --------------------------------------------------------------------------- weights


def kda(at: At, c: ModelFields) -> None:
    """``KimiGatedDeltaNetAttention`` (kimi_gdn_linear_attn.py) without the full-rank
    gate: ``in_proj_qkvgfab`` (q, k, v and b column-parallel, f_a replicated: the
    ``_KimiGDNMergedColumnParallelLinear`` shard 4), ``f_b_proj`` and ``g_b_proj``
    (column), ``g_a_proj`` (replicated), ``dt_bias`` (float32, one a projection value),
    ``conv1d`` (float32, unquantized, 3 x heads x head_dim by the kernel), ``A_log``
    (float32, one a head), ``o_norm`` (head_dim), ``o_proj`` (row)."""
    cfg = linear_attn_config(c)
    heads, dim = linear_int(c, cfg, "num_heads"), linear_int(c, cfg, "head_dim")
    conv = linear_int(c, cfg, "short_conv_kernel_size")
    hidden = c.int("hidden_size")
    proj = ((heads, dim),)
    at.linear("in_proj_qkvgfab", ((heads, dim),) * 3 + ((heads, 1),), hidden, shard="column")
    at.linear("in_proj_qkvgfab.f_a", dim, hidden, shard="replicated")
    at.linear("f_b_proj", proj, dim, shard="column")
    at.linear("g_a_proj", dim, hidden, shard="replicated")
    at.linear("g_b_proj", proj, dim, shard="column")
    at.tensor("dt_bias", proj, shard="column", fixed="fp32")
    at.tensor("conv1d", ((heads, dim),) * 3, conv, shard="column", fixed="fp32")
    at.tensor("A_log", ((heads, 1),), shard="column", fixed="fp32")
    at.norm("o_norm", dim)
    at.linear("o_proj", hidden, proj, shard="row")


def mla(at: At, c: ModelFields) -> None:
    """Kimi-Linear's ``MultiHeadLatentAttention``: :func:`latent_attention` without a q
    LoRA (a config with one is Kimi K3's)."""
    if c.get("q_lora_rank") is not None:
        raise c.error(
            "q_lora_rank",
            "Kimi-Linear's MLA has no q LoRA (Kimi K3's has: plan it as model_type kimi_k3)",
        )
    latent_attention(at, c)


def latent_attention(at: At, c: ModelFields) -> None:
    """``MultiHeadLatentAttention`` (mla.py ``__init__``). With ``q_lora_rank`` (Kimi
    K3): ``q_a_proj`` and ``kv_a_proj_with_mqa`` replicated (``fused_qkv_a_proj``, or
    ``fused_qkv_a_g_proj`` with the output gate, whose ``g_proj`` shard is
    column-parallel: ``KimiK3MergedQKVGateLinear``), ``q_a_layernorm``, ``q_b_proj``
    (column); without it a full-rank ``q_proj`` (column) and a standalone ``g_proj``.
    Then ``kv_a_layernorm``, ``kv_b_proj`` (column), ``o_proj`` (row)."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    rope, nope, v = c.int("qk_rope_head_dim"), c.int("qk_nope_head_dim"), c.int("v_head_dim")
    rank = c.int("kv_lora_rank")
    if c.get("q_lora_rank") is None:
        at.linear("q_proj", ((heads, nope + rope),), hidden, shard="column")
    else:
        q_rank = c.int("q_lora_rank")
        at.linear("q_a_proj", q_rank, hidden, shard="replicated")
        at.norm("q_a_layernorm", q_rank)
        at.linear("q_b_proj", ((heads, nope + rope),), q_rank, shard="column")
    at.linear("kv_a_proj_with_mqa", rank + rope, hidden, shard="replicated")
    if c.flag("mla_use_output_gate", False):
        at.linear("g_proj", ((heads, v),), hidden, shard="column")
    at.norm("kv_a_layernorm", rank)
    at.linear("kv_b_proj", ((heads, nope + v),), rank, shard="column")
    at.linear("o_proj", hidden, ((heads, v),), shard="row")


def mlp(layer: At, c: ModelFields, i: int) -> None:
    """``KimiDecoderLayer``'s MLP: ``KimiMoE`` when ``num_experts`` is set, ``i >=
    first_k_dense_replace`` and ``i % moe_layer_freq == 0`` (the router ``gate`` in the
    model dtype, unquantized; ``e_score_correction_bias`` float32; the experts; the
    shared experts of ``moe_intermediate_size x num_shared_experts``), else ``KimiMLP``."""
    hidden = c.int("hidden_size")
    experts = c.int("num_experts", 0, minimum=0)
    sparse = (
        experts > 0
        and i >= c.int("first_k_dense_replace", 0, minimum=0)
        and i % c.int("moe_layer_freq", 1) == 0
    )
    if not sparse:
        gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.int("intermediate_size"))
        return
    if c.get("routed_expert_hidden_size") is not None:
        raise c.error(
            "routed_expert_hidden_size", "a latent MoE is Kimi K3's: plan it as model_type kimi_k3"
        )
    moe = layer.sub("block_sparse_moe")
    gate = moe.sub("gate", "routers")
    gate.tensor("weight", experts, hidden)
    gate.tensor("e_score_correction_bias", experts, fixed="fp32")
    inter = c.int("moe_intermediate_size")
    gated_mlp(moe.sub("experts", "routed_experts"), hidden, inter, copies=experts)
    shared = c.int("num_shared_experts", 0, minimum=0)
    if shared:
        gated_mlp(moe.sub("shared_experts", "shared_experts"), hidden, inter * shared)


def weights(inv: Inventory, c: ModelFields) -> None:
    """Embeddings, decoder layers (KDA or MLA, MoE or dense, two norms), final norm,
    lm_head (``KimiLinearForCausalLM``, model.py)."""
    if c.get("attn_res_block_size") is not None:
        raise c.error(
            "attn_res_block_size",
            "attention residuals are Kimi K3's: plan it as model_type kimi_k3",
        )
    hidden = c.int("hidden_size")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", c.int("vocab_size"), hidden)
    for i, is_kda in enumerate(kda_flags(c)):
        layer = inv.at(f"model.layers.{i}", i, "norms")
        attn = layer.sub("self_attn", "recurrent" if is_kda else "attention")
        (kda if is_kda else mla)(attn, c)
        layer.norm("input_layernorm", hidden)
        layer.norm("post_attention_layernorm", hidden)
        mlp(layer, c, i)
    final(inv, c, "model.norm")


KIMI_LINEAR = Architecture(
    family="kimi_linear",
    model_types=frozenset({"kimi_linear"}),
    layers=layers,
    weights=weights,
    # the KDA recurrent state is float32 whatever the config says (KimiDeltaLayer)
    ssm_state_dtype="float32",
    # TensorRT-LLM has no model of KDA beside MLA here (the README's families section);
    # SGLang's: engines/sglang_kimi.py; kvbudget's own cache keeps the KDA states in its
    # recurrent-state slots like any recurrent layer (tests/test_kimi_own_cache.py)
    unmodelled_engines=frozenset({"trtllm"}),
)

ARCHITECTURES = (KIMI_LINEAR,)


MIN_MOE_INTERMEDIATE_PER_PARTITION = 256  # KimiMoE's getattr(config, ..., 256) default


def vllm_expert_padding_bytes(model: ModelSpec, *, tp: int, ep: int) -> int:
    """Bytes per rank that vLLM 0.33.0 allocates beyond the checkpoint's routed experts
    (``vllm/models/kimi_k3/nvidia/model.py`` ``KimiMoE.__init__``): with TP > 1 and no
    expert parallelism, an expert whose ``moe_intermediate_size / tp`` is below
    ``min_moe_intermediate_per_partition`` (256) is padded to ``256 x tp`` rows, so each
    rank's routed-expert bytes grow by ``padded / moe_intermediate_size`` (Kimi K3's
    latent MoE too: its experts are the same ``FusedMoE`` on the latent width). 0
    otherwise (or for another family)."""
    from kvbudget.weights.placement import weights_bytes

    if model.model_type not in ("kimi_linear", "kimi_k3") or tp <= 1 or ep > 1:
        return 0
    inter = model.config.get("moe_intermediate_size")
    floor = int(
        model.config.get("min_moe_intermediate_per_partition", MIN_MOE_INTERMEDIATE_PER_PARTITION)
    )
    if not isinstance(inter, int) or inter <= 0 or inter // tp >= floor:
        return 0
    routed = weights_bytes(model, tp=tp).routed_experts_bytes
    return routed * floor * tp // inter - routed
