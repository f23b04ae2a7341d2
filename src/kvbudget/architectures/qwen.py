"""Qwen2, Qwen3 and Qwen3-MoE.

Cache: attention on every layer; sliding only when ``use_sliding_window`` is true
(default false), and then only on layers ``i >= max_window_layers`` (default 28), as
transformers' Qwen2/Qwen3 configs define it (a ``layer_types`` list wins). Weights:
Qwen2 biases q/k/v (never o); Qwen3 adds per-head q/k RMSNorms; Qwen3-MoE layers are
sparse when not in ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``: a
router, ``num_experts`` experts of ``moe_intermediate_size``, an optional shared expert
with its gate. vLLM ``qwen2.py``, ``qwen3.py``, ``qwen3_moe.py``.
"""

from __future__ import annotations

from functools import partial

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import (
    AttentionStyle,
    attention_layers,
    decoder_weights,
    dense_mlp,
    gated_mlp,
)
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, ModelFields


def qwen_window(f: ConfigFields, n: int) -> list[bool]:
    """Sliding from layer ``max_window_layers`` on, only with ``use_sliding_window``."""
    if not (f.has("sliding_window") and f.get("use_sliding_window", False) is True):
        return [False] * n
    first = f.int("max_window_layers", 28, minimum=0)
    return [i >= first for i in range(n)]


def is_sparse(c: ModelFields, i: int) -> bool:
    """Qwen-MoE rule: sparse iff not in ``mlp_only_layers`` and ``(i+1) % step == 0``."""
    only = c.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(x, int) for x in only):
        raise c.error("mlp_only_layers", f"expected a list of layer indices, got {only!r}")
    step = c.int("decoder_sparse_step", 1)
    return c.int("num_experts", 0, minimum=0) > 0 and i not in only and (i + 1) % step == 0


def moe_block(mlp: At, c: ModelFields) -> None:
    """Qwen3-MoE / Qwen3-Next sparse block: router, experts, optional shared expert."""
    hidden = c.int("hidden_size")
    experts = c.int("num_experts")
    mlp.sub("", "routers").tensor("gate", experts, hidden)
    experts_at = mlp.sub("experts", "routed_experts")
    gated_mlp(experts_at, hidden, c.int("moe_intermediate_size"), copies=experts)
    shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
    if shared:
        gated_mlp(mlp.sub("shared_expert", "shared_experts"), hidden, shared)
        mlp.sub("", "routers").tensor("shared_expert_gate", 1, hidden)


def moe_or_dense(layer: At, c: ModelFields, i: int) -> None:
    """Layer ``i``'s MLP: the sparse block where :func:`is_sparse`, else dense."""
    if is_sparse(c, i):
        moe_block(layer.sub("mlp"), c)
    else:
        dense_mlp(layer, c, i)


QWEN2_STYLE = AttentionStyle(bias="qkv")
QWEN3_STYLE = AttentionStyle(qk_norm="head")

QWEN2 = Architecture(
    family="qwen",
    model_types=frozenset({"qwen2"}),
    layers=partial(attention_layers, sliding_default=qwen_window),
    weights=partial(decoder_weights, style=QWEN2_STYLE),
    attention=QWEN2_STYLE,
    draft_heads=True,
)
QWEN3 = Architecture(
    family="qwen",
    model_types=frozenset({"qwen3", "qwen3_moe"}),
    layers=partial(attention_layers, sliding_default=qwen_window),
    weights=partial(decoder_weights, style=QWEN3_STYLE, mlp=moe_or_dense),
    attention=QWEN3_STYLE,
    draft_heads=True,
)

ARCHITECTURES = (QWEN2, QWEN3)
