"""EAGLE-1 / EAGLE-2 draft heads: decoder layers over the target's last hidden state.

An EAGLE head (Li et al., 2024; EAGLE-2 changes the draft tree, not the head) fuses the
token embedding with the target's last hidden state through ``fc`` (2H -> H), then runs
``num_hidden_layers`` (one, in the published heads) Llama decoder layers; it shares the
target's embeddings and lm_head. vLLM ``llama_eagle.py`` @ 00da9231 builds the layers
after the target's last index, replaces the first layer's ``input_layernorm`` by an
identity and ``fc`` without bias; the published checkpoints' ``fc`` bias follows their
config's ``bias`` (SafeAILab/EAGLE ``cnets.py``; default true, false for the LLaMA3
heads). Cache: one attention layer per decoder layer, with the head's own geometry.
"""

from __future__ import annotations

from kvbudget.architectures.decoder import AttentionStyle, attention_weights, dense_mlp
from kvbudget.inventory import Inventory, ModelFields


def weights(inv: Inventory, c: ModelFields, style: AttentionStyle) -> None:
    """The head's decoder layers and ``fc``, all on the last PP stage."""
    hidden = c.int("hidden_size")
    for i in range(c.int("num_hidden_layers", 1)):
        layer = inv.at(f"layers.{i}", "last", "norms")
        attention_weights(layer.sub("self_attn", "attention"), c, style, in_features=hidden)
        dense_mlp(layer, c, i)
        if i > 0:  # the first layer reads the fused input without a norm
            layer.norm("input_layernorm", hidden)
        layer.norm("post_attention_layernorm", hidden)
    fc = inv.at("", "last", "eagle3_fc")
    fc.linear("fc", hidden, 2 * hidden, shard="replicated", bias=c.flag("bias", True))
