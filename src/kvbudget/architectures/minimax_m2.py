"""MiniMax-M2: plain GQA on every layer (vLLM ``minimax_m2.py`` passes no window).

Weights: q/k norms over the whole projections (split with them under TP), a sparse
block on every layer: a router with a score-correction bias and ``num_local_experts``
experts (``w1``/``w3`` gate and up, ``w2`` down), no shared expert.
"""

from __future__ import annotations

from functools import partial

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import (
    AttentionStyle,
    attention_layers,
    decoder_weights,
    gated_mlp,
    uniform_window,
)
from kvbudget.inventory import At, ModelFields


def moe(layer: At, c: ModelFields, i: int) -> None:
    """MiniMax-M2's sparse block (vLLM minimax_m2.py)."""
    block = layer.sub("block_sparse_moe")
    hidden, experts = c.int("hidden_size"), c.int("num_local_experts")
    router = block.sub("", "routers")
    router.linear("gate", experts, hidden, shard="replicated", quantizable=False)
    router.tensor("e_score_correction_bias", experts, fixed="fp32")
    inter = c.int("intermediate_size")
    gated_mlp(block.sub("experts", "routed_experts"), hidden, inter, copies=experts)


STYLE = AttentionStyle(qk_norm="projection")

MINIMAX_M2 = Architecture(
    family="minimax_m2",
    model_types=frozenset({"minimax_m2"}),
    layers=partial(attention_layers, sliding_default=uniform_window),
    weights=partial(decoder_weights, style=STYLE, mlp=moe),
    attention=STYLE,
    draft_heads=True,
)

ARCHITECTURES = (MINIMAX_M2,)
