"""Llama-4 (Scout, Maverick): chunked local attention with global NoPE layers, MoE.

Cache: the layers that use RoPE attend within chunks of ``attention_chunk_size`` tokens
(chunked local attention, cached as a window of that size: :class:`AttentionLayer`
``chunked``); the NoPE layers are global. ``no_rope_layers`` (1: RoPE) defaults, when
absent or empty as in the published checkpoints, to ``int((i + 1) % 4 != 0)``: 36
chunked + 12 global layers of 48 (transformers ``configuration_llama4.py`` @ 008e5743,
``__post_init__``; vLLM ``llama4.py``: ``ChunkedLocalAttention`` unless the layer is
NoPE). A ``layer_types`` list (``chunked_attention`` / ``full_attention``) wins. The
checkpoint nests the text model under ``text_config``; the vision tower keeps no KV and
its weights are not counted.

Weights (transformers ``modeling_llama4.py``): q/k/v/o without bias (the q/k L2 norm has
no weights), MoE layers every ``interleave_moe_layer_step`` (a router, experts stored
fused as ``gate_up_proj`` [E, H, 2I] and ``down_proj`` [E, I, H], one shared expert of
``intermediate_size``), dense layers of ``intermediate_size_mlp``.
"""

from __future__ import annotations

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import (
    AttentionStyle,
    decoder_weights,
    gated_mlp,
    windowed_layers,
)
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import Layer

STYLE = AttentionStyle()


def uses_rope(f: ConfigFields, num_layers: int) -> list[bool]:
    """Per layer: RoPE (chunked when a chunk size is set) or NoPE (global)."""
    raw = f.get("no_rope_layers")
    if not raw:
        interval = f.int("no_rope_layer_interval", 4)
        return [(i + 1) % interval != 0 for i in range(num_layers)]
    if not isinstance(raw, list) or any(v not in (0, 1) or isinstance(v, bool) for v in raw):
        raise f.error("no_rope_layers", f"expected a list of 0/1 per layer, got {raw!r}")
    if len(raw) != num_layers:
        raise f.error(
            "no_rope_layers", f"has {len(raw)} entries but the model has {num_layers} layers"
        )
    return [v == 1 for v in raw]


def chunked_flags(f: ConfigFields) -> list[bool]:
    """Which layers are chunked local attention."""
    num_layers = f.int("num_hidden_layers")
    if f.has("layer_types"):
        types = f.str_list("layer_types", num_layers)
        for i, t in enumerate(types):
            if t not in ("chunked_attention", "full_attention"):
                raise f.error(
                    "layer_types",
                    f"entry {i} is {t!r}; expected chunked_attention or full_attention",
                )
        return [t == "chunked_attention" for t in types]
    if not f.has("attention_chunk_size"):
        return [False] * num_layers
    return uses_rope(f, num_layers)


def layers(f: ConfigFields) -> list[Layer]:
    """One attention layer per decoder layer, chunked or global."""
    return windowed_layers(f, chunked_flags(f), window_key="attention_chunk_size", chunked=True)


def is_moe(c: ModelFields, i: int) -> bool:
    """MoE every ``interleave_moe_layer_step`` layers (the last of each step)."""
    step = c.int("interleave_moe_layer_step", 1)
    return (i + 1) % step == 0


def feed_forward(layer: At, c: ModelFields, i: int) -> None:
    """Layer ``i``'s ``feed_forward``: the MoE block or a dense MLP."""
    hidden = c.int("hidden_size")
    ff = layer.sub("feed_forward", "dense_mlp")
    if not is_moe(c, i):
        gated_mlp(ff, hidden, c.int("intermediate_size_mlp"))
        return
    experts, inter = c.int("num_local_experts"), c.int("intermediate_size")
    ff.sub("router", "routers").linear("", experts, hidden, shard="replicated", quantizable=False)
    at = ff.sub("experts", "routed_experts")
    at.linear("gate_up_proj", ((inter, 2),), hidden, shard="column", copies=experts)
    at.linear("down_proj", hidden, inter, shard="row", copies=experts)
    gated_mlp(ff.sub("shared_expert", "shared_experts"), hidden, inter)


def weights(inv: Inventory, c: ModelFields) -> None:
    """The text decoder under ``language_model`` (vision weights not counted)."""
    decoder_weights(
        inv, c, STYLE, feed_forward, prefix="language_model.model", head="language_model.lm_head"
    )


LLAMA4 = Architecture(
    family="llama4",
    model_types=frozenset({"llama4", "llama4_text"}),
    layers=layers,
    weights=weights,
    attention=STYLE,
    nested_types=frozenset({"llama4"}),
    text_only_note=True,
)

ARCHITECTURES = (LLAMA4,)
