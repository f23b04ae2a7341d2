"""GLM-4.5 / GLM-4.5-Air / GLM-4.6 (``glm4_moe``): GQA attention, DeepSeek-style MoE, MTP.

Cache: full attention on every layer (8 KV heads x ``head_dim`` for K and V; the partial
rotary factor changes RoPE, not the cache), and ``num_nextn_predict_layers`` MTP layers
of the same geometry after them (vLLM ``glm4_moe.py`` @ 002d6073 and ``glm4_moe_mtp.py``
@ 028aedf6: each MTP layer wraps a full ``Glm4MoeDecoderLayer``; SGLang
``glm4_moe_nextn.py`` @ 008b79d2: one decoder layer in the draft's own pool).

Weights (transformers ``modeling_glm4_moe.py``): q/k/v biased when ``attention_bias``,
o never; per-head q/k RMSNorms when ``use_qk_norm``; the first ``first_k_dense_replace``
layers dense, the rest a router kept in fp32 with its ``e_score_correction_bias``
(``_keep_in_fp32_modules_strict``), ``n_routed_experts`` experts and a shared expert;
MTP layers as DeepSeek's (enorm, hnorm, eh_proj, a decoder layer, shared_head.norm).
"""

from __future__ import annotations

from functools import partial

from kvbudget.architectures import deepseek
from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import (
    AttentionStyle,
    attention_layers,
    attention_weights,
    decoder_weights,
    uniform_window,
)
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import AttentionLayer, Layer

STYLE = AttentionStyle(bias="qkv_config", qk_norm="head", qk_norm_flag="use_qk_norm")


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """``num_nextn_predict_layers`` full-attention layers of the target's geometry."""
    count = f.int("num_nextn_predict_layers", 0, minimum=0)
    heads = f.int("num_attention_heads")
    kv_heads, head_dim = f.int("num_key_value_heads", heads), f.head_dim()
    return tuple(
        AttentionLayer(index=start + i, num_kv_heads=kv_heads, head_dim=head_dim)
        for i in range(count)
    )


def mlp(layer: At, c: ModelFields, i: int) -> None:
    """Dense or MoE, as DeepSeek's layout, with the router in fp32."""
    deepseek.moe_mlp(layer, c, i, router_dtype="fp32")


def decoder_layer(layer: At, c: ModelFields, i: int) -> None:
    """One decoder layer (for the MTP layers): attention, two norms, the MLP."""
    hidden = c.int("hidden_size")
    attention_weights(layer.sub("self_attn", "attention"), c, STYLE, in_features=hidden)
    layer.norm("input_layernorm", hidden)
    layer.norm("post_attention_layernorm", hidden)
    mlp(layer, c, i)


def weights(inv: Inventory, c: ModelFields) -> None:
    """The decoder, then its MTP layers."""
    decoder_weights(inv, c, STYLE, mlp)
    deepseek.mtp_weights(inv, c, decoder_layer)


GLM4_MOE = Architecture(
    family="glm4_moe",
    model_types=frozenset({"glm4_moe"}),
    layers=partial(attention_layers, sliding_default=uniform_window),
    mtp_layers=mtp_layers,
    weights=weights,
    attention=STYLE,
)

ARCHITECTURES = (GLM4_MOE,)
