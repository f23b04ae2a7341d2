"""Building blocks shared by the decoder families: attention layers and their weights.

A family module composes these with its own options (:class:`AttentionStyle`, which
layers slide, which MLP each layer has); nothing here branches on ``model_type``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import At, Inventory, ModelFields
from kvbudget.layers import AttentionLayer, Layer

SlidingDefault = Callable[[ConfigFields, int], list[bool]]
"""Which of ``n`` layers slide when the config has no ``layer_types`` list."""

MlpBuilder = Callable[[At, ModelFields, int], None]
"""Adds decoder layer ``i``'s MLP (or MoE block) under the layer's scope."""


# --------------------------------------------------------------------------- cache layers


def uniform_window(f: ConfigFields, n: int) -> list[bool]:
    """Mistral's rule: every layer slides when ``sliding_window`` is set, unless
    ``use_sliding_window`` is false."""
    uses = f.has("sliding_window") and f.get("use_sliding_window", True) is not False
    return [uses] * n


def alternating_window(f: ConfigFields, n: int) -> list[bool]:
    """Even layers slide, odd layers are global (Gemma-2, gpt-oss defaults)."""
    return [(i + 1) % 2 == 1 for i in range(n)]


def attention_layers(f: ConfigFields, sliding_default: SlidingDefault) -> list[Layer]:
    """One softmax-attention layer per decoder layer; ``layer_types`` (entries
    ``full_attention`` / ``sliding_attention``) wins over ``sliding_default``."""
    flags = sliding_flags(f, f.int("num_hidden_layers"), sliding_default)
    return windowed_layers(f, flags)


def windowed_layers(
    f: ConfigFields, local: list[bool], *, window_key: str = "sliding_window", chunked: bool = False
) -> list[Layer]:
    """Attention layers, ``local[i]`` ones over the window ``window_key`` (chunked local
    attention with ``chunked``), the others full."""
    heads = f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f.error(
            "num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}"
        )
    head_dim = f.head_dim()
    window = f.int(window_key) if any(local) else None
    return [
        AttentionLayer(
            index=i,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            sliding_window=window if is_local else None,
            chunked=chunked and is_local,
        )
        for i, is_local in enumerate(local)
    ]


def sliding_flags(f: ConfigFields, num_layers: int, default: SlidingDefault) -> list[bool]:
    """Which layers use the sliding window, as the config (and transformers) defines it."""
    if f.has("layer_types"):
        types = f.str_list("layer_types", num_layers)
        known = {"full_attention", "sliding_attention"}
        for i, t in enumerate(types):
            if t not in known:
                raise f.error("layer_types", f"entry {i} is {t!r}; expected one of {sorted(known)}")
        return [t == "sliding_attention" for t in types]
    return default(f, num_layers)


# --------------------------------------------------------------------------- weights


@dataclass(frozen=True, kw_only=True)
class AttentionStyle:
    """How a family's softmax attention stores its weights.

    ``bias``: ``"config"`` biases q/k/v/o when ``attention_bias`` is true; ``"qkv"``
    always biases q/k/v and never o (Qwen2); ``"qkv_config"`` biases q/k/v when
    ``attention_bias`` is true, never o (GLM-4.5). ``qk_norm``: ``"head"`` one RMSNorm
    weight of ``head_dim`` each for q and k (Qwen3, Gemma-3); ``"projection"`` norms over
    the whole q and k projections, split with them (MiniMax-M2); ``qk_norm_flag`` names
    a config flag that must be true for them (GLM-4.5's ``use_qk_norm``).
    ``gated_query``: q_proj has twice the head size (Qwen3-Next's output gate).
    ``sinks``: one learned sink per head (gpt-oss). ``head_dim_key``: the config field
    holding the head size.
    """

    bias: Literal["config", "qkv", "qkv_config"] = "config"
    qk_norm: Literal["none", "head", "projection"] = "none"
    qk_norm_flag: str | None = None
    gated_query: bool = False
    sinks: bool = False
    head_dim_key: str = "head_dim"


def attention_weights(at: At, c: ModelFields, style: AttentionStyle, *, in_features: int) -> None:
    """Softmax attention: q/k/v (column-parallel by head), o (row-parallel), extras."""
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", heads)
    head_dim = c.head_dim(style.head_dim_key)
    flag = c.flag("attention_bias", False)
    bias_qkv = style.bias == "qkv" or flag
    bias_o = style.bias == "config" and flag
    qk_norm = style.qk_norm
    if style.qk_norm_flag is not None and not c.flag(style.qk_norm_flag, False):
        qk_norm = "none"
    q_size = 2 * head_dim if style.gated_query else head_dim
    at.linear("q_proj", ((heads, q_size),), in_features, shard="column", bias=bias_qkv)
    for proj in ("k_proj", "v_proj"):
        at.linear(proj, ((kv_heads, head_dim),), in_features, shard="column", bias=bias_qkv)
    at.linear("o_proj", c.int("hidden_size"), ((heads, head_dim),), shard="row", bias=bias_o)
    if qk_norm == "head":
        at.norm("q_norm", head_dim)
        at.norm("k_norm", head_dim)
    elif qk_norm == "projection":
        at.tensor("q_norm", ((heads, head_dim),), shard="column")
        at.tensor("k_norm", ((kv_heads, head_dim),), shard="column")
    if style.sinks:
        at.tensor("sinks", ((heads, 1),), shard="column")


def gated_mlp(at: At, hidden: int, inter: int, *, copies: int = 1, bias: bool = False) -> None:
    """gate_proj and up_proj (column-parallel), down_proj (row-parallel)."""
    for proj in ("gate_proj", "up_proj"):
        at.linear(proj, inter, hidden, shard="column", bias=bias, copies=copies)
    at.linear("down_proj", hidden, inter, shard="row", bias=bias, copies=copies)


def relu2_mlp(at: At, hidden: int, inter: int, *, bias: bool, copies: int = 1) -> None:
    """An ungated MLP (Nemotron): up_proj (column-parallel), down_proj (row-parallel)."""
    at.linear("up_proj", inter, hidden, shard="column", bias=bias, copies=copies)
    at.linear("down_proj", hidden, inter, shard="row", bias=bias, copies=copies)


def dense_mlp(layer: At, c: ModelFields, i: int) -> None:
    """The Llama MLP of every layer: ``mlp.{gate,up,down}_proj``."""
    mlp = layer.sub("mlp", "dense_mlp")
    gated_mlp(mlp, c.int("hidden_size"), c.int("intermediate_size"), bias=c.flag("mlp_bias", False))


def final(
    inv: Inventory, c: ModelFields, norm: str, head: str = "lm_head", *, tied_default: bool = False
) -> None:
    """The final norm and (unless ``tie_word_embeddings``) the lm_head, on the last stage."""
    inv.at(norm, "last", "norms").norm("", c.int("hidden_size"))
    if not c.flag("tie_word_embeddings", tied_default):
        inv.at(head, "last", "lm_head").vocab("", c.int("vocab_size"), c.int("hidden_size"))


def decoder_weights(
    inv: Inventory,
    c: ModelFields,
    style: AttentionStyle,
    mlp: MlpBuilder = dense_mlp,
    *,
    prefix: str = "model",
    extra_norms: tuple[str, ...] = (),
    head: str = "lm_head",
    tied_default: bool = False,
) -> None:
    """A Llama-style decoder: embeddings, layers of attention + norms + ``mlp``, final
    norm and lm_head, under ``prefix`` (``language_model.model`` for Gemma-3)."""
    hidden = c.int("hidden_size")
    inv.at(prefix, "first", "embeddings").vocab("embed_tokens", c.int("vocab_size"), hidden)
    norms = ("input_layernorm", "post_attention_layernorm", *extra_norms)
    for i in range(c.int("num_hidden_layers")):
        layer = inv.at(f"{prefix}.layers.{i}", i, "norms")
        attention_weights(layer.sub("self_attn", "attention"), c, style, in_features=hidden)
        for norm in norms:
            layer.norm(norm, hidden)
        mlp(layer, c, i)
    final(inv, c, f"{prefix}.norm", head, tied_default=tied_default)


__all__ = [
    "AttentionStyle",
    "MlpBuilder",
    "SlidingDefault",
    "alternating_window",
    "attention_layers",
    "attention_weights",
    "decoder_weights",
    "dense_mlp",
    "final",
    "gated_mlp",
    "relu2_mlp",
    "sliding_flags",
    "uniform_window",
    "windowed_layers",
]
