"""gpt-oss: alternating sliding/full attention with sinks, MoE on every layer.

Cache: ``layer_types`` (``sliding_attention`` / ``full_attention``), alternating with
even layers sliding when absent. Weights: attention with one sink per head, a biased
router and biased experts (fused ``gate_up_proj``, then ``down_proj``); MXFP4 experts in
the published checkpoints (:mod:`kvbudget.weights.quantization`). vLLM ``gpt_oss.py``.
"""

from __future__ import annotations

from functools import partial

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import (
    AttentionStyle,
    alternating_window,
    attention_layers,
    decoder_weights,
)
from kvbudget.inventory import At, ModelFields


def moe(layer: At, c: ModelFields, i: int) -> None:
    """gpt-oss: a biased router and biased experts (fused gate_up, then down)."""
    mlp = layer.sub("mlp")
    hidden = c.int("hidden_size")
    experts = c.int("num_local_experts")
    inter = c.int("intermediate_size")
    router = mlp.sub("", "routers")
    router.linear("router", experts, hidden, shard="replicated", bias=True, quantizable=False)
    at = mlp.sub("experts", "routed_experts")
    at.linear("gate_up_proj", ((inter, 2),), hidden, shard="column", bias=True, copies=experts)
    at.linear("down_proj", hidden, inter, shard="row", bias=True, copies=experts)


STYLE = AttentionStyle(sinks=True)

GPT_OSS = Architecture(
    family="gpt_oss",
    model_types=frozenset({"gpt_oss"}),
    layers=partial(attention_layers, sliding_default=alternating_window),
    weights=partial(decoder_weights, style=STYLE, mlp=moe),
    attention=STYLE,
)

ARCHITECTURES = (GPT_OSS,)
