"""Qwen3-Next and Qwen3.5: Gated DeltaNet layers, gated full attention, MoE, MTP.

Cache: ``linear_attention`` layers keep a recurrent state (conv + SSM), full attention
every ``full_attention_interval`` layers (or per ``layer_types``). The checkpoints ship
MTP layers (full attention): Qwen3.5 names their count (``mtp_num_hidden_layers``),
Qwen3-Next does not (``num_nextn_predict_layers`` defaults to 1, as vLLM's
``qwen3_next_mtp.py``). Qwen3.5's vision-language checkpoints nest the text model under
``text_config`` (vLLM ``qwen3_5.py`` builds its text layers as Qwen3-Next's); their
vision tower keeps no KV cache and its weights are not counted.
"""

from __future__ import annotations

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import AttentionStyle, attention_weights, final
from kvbudget.architectures.qwen import moe_or_dense
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import AttentionLayer, GatedDeltaNetLayer, Layer

STYLE = AttentionStyle(qk_norm="head", gated_query=True)
QWEN35_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"})


def layer_types(f: ConfigFields) -> list[str]:
    """``full_attention`` / ``linear_attention`` per layer, from ``layer_types`` or
    ``full_attention_interval``."""
    num_layers = f.int("num_hidden_layers")
    if f.has("layer_types"):
        types = f.str_list("layer_types", num_layers)
    else:
        interval = f.int("full_attention_interval")
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(num_layers)
        ]
    for i, t in enumerate(types):
        if t not in ("full_attention", "linear_attention"):
            raise f.error(
                "layer_types", f"entry {i} is {t!r}; expected full_attention or linear_attention"
            )
    return types


def layers(f: ConfigFields) -> list[Layer]:
    """Gated DeltaNet and full-attention layers in the config's order."""
    kv_heads = f.int("num_key_value_heads")
    head_dim = f.head_dim()
    out: list[Layer] = []
    for i, t in enumerate(layer_types(f)):
        if t == "full_attention":
            out.append(AttentionLayer(index=i, num_kv_heads=kv_heads, head_dim=head_dim))
        else:
            out.append(
                GatedDeltaNetLayer(
                    index=i,
                    num_k_heads=f.int("linear_num_key_heads"),
                    num_v_heads=f.int("linear_num_value_heads"),
                    k_head_dim=f.int("linear_key_head_dim"),
                    v_head_dim=f.int("linear_value_head_dim"),
                    conv_kernel=f.int("linear_conv_kernel_dim"),
                )
            )
    return out


def mtp_layers(f: ConfigFields, start: int) -> tuple[Layer, ...]:
    """The full-attention MTP layers the checkpoint ships."""
    key = "mtp_num_hidden_layers" if f.has("mtp_num_hidden_layers") else "num_nextn_predict_layers"
    count = f.int(key, 1, minimum=0)
    kv_heads, head_dim = f.int("num_key_value_heads"), f.head_dim()
    return tuple(
        AttentionLayer(index=start + i, num_kv_heads=kv_heads, head_dim=head_dim)
        for i in range(count)
    )


def gated_deltanet(at: At, c: ModelFields) -> None:
    """A Qwen3-Next ``linear_attention`` mixer, split by key / value heads under TP."""
    nk, dk = c.int("linear_num_key_heads"), c.int("linear_key_head_dim")
    nv, dv = c.int("linear_num_value_heads"), c.int("linear_value_head_dim")
    hidden = c.int("hidden_size")
    at.linear("in_proj_qkvz", ((nk, dk), (nk, dk), (nv, dv), (nv, dv)), hidden, shard="column")
    at.linear("in_proj_ba", ((nv, 1), (nv, 1)), hidden, shard="column")
    conv = ((nk, dk), (nk, dk), (nv, dv))
    at.tensor("conv1d", conv, c.int("linear_conv_kernel_dim"), shard="column")
    at.tensor("dt_bias", ((nv, 1),), shard="column")
    at.tensor("A_log", ((nv, 1),), shard="column")
    at.norm("norm", dv)
    at.linear("out_proj", hidden, ((nv, dv),), shard="row")


def decoder_layer(layer: At, c: ModelFields, i: int, kind: str) -> None:
    hidden = c.int("hidden_size")
    if kind == "full_attention":
        attention_weights(layer.sub("self_attn", "attention"), c, STYLE, in_features=hidden)
    else:
        gated_deltanet(layer.sub("linear_attn", "recurrent"), c)
    layer.norm("input_layernorm", hidden)
    layer.norm("post_attention_layernorm", hidden)
    moe_or_dense(layer, c, i)


def weights(inv: Inventory, c: ModelFields) -> None:
    """The decoder, then the MTP layers the checkpoint ships (under ``mtp.*``)."""
    hidden = c.int("hidden_size")
    num_layers = c.int("num_hidden_layers")
    inv.at("model", "first", "embeddings").vocab("embed_tokens", c.int("vocab_size"), hidden)
    types = layer_types(c)
    for i in range(num_layers):
        decoder_layer(inv.at(f"model.layers.{i}", i, "norms"), c, i, types[i])
    final(inv, c, "model.norm")
    # The checkpoints ship MTP layers under ``mtp.*`` that the config does not declare:
    # vLLM's qwen3_next_mtp.py reads ``num_nextn_predict_layers`` (default 1) and builds
    # a column-parallel ``fc`` (2H -> H), two pre-fc norms, full-attention MoE decoder
    # layers and a final norm; embeddings and lm_head are the main model's.
    mtp = Inventory()
    at = mtp.at("mtp", "mtp", "norms")
    at.norm("pre_fc_norm_embedding", hidden)
    at.norm("pre_fc_norm_hidden", hidden)
    at.linear("fc", hidden, 2 * hidden, shard="column")
    for j in range(len(c.model.mtp_layers)):  # the count the model reader found
        decoder_layer(at.sub(f"layers.{j}"), c, num_layers + j, "full_attention")
    at.norm("norm", hidden)
    inv.extend_as_mtp(mtp)


QWEN3_NEXT = Architecture(
    family="qwen3_next",
    model_types=frozenset({"qwen3_next"}) | QWEN35_MODEL_TYPES,
    layers=layers,
    mtp_layers=mtp_layers,
    weights=weights,
    attention=STYLE,
    nested_types=frozenset({"qwen3_5", "qwen3_5_moe"}),
    text_only_note=True,
)

ARCHITECTURES = (QWEN3_NEXT,)
