"""DFlash block drafts: their own decoder layers over the target's hidden states.

A DFlash draft (``--spec dflash``; vLLM's ``method: "dflash"``) proposes a block of tokens
in one pass from the target's hidden states. vLLM 0.33.0 builds it as
``DFlashQwen3ForCausalLM`` (``model_executor/models/qwen3_dflash.py``, the wheel's commit
``g4ba787ec9``) whatever the checkpoint's ``model_type``; a config is one when it has a
``dflash_config`` or a DFlash architecture name.

Cache: one attention layer per draft decoder layer, after the target's (``layers.{n +
i}``), each with the config's KV heads and head size; which slide follows
``_resolve_layer_attention``: with ``layer_types`` the listed ones (all of them when
``dflash_config.use_swa`` is set and none is listed), without it every layer when
``use_swa``, else none; the window is ``dflash_config.swa_window_size``, else
``sliding_window``. A Qwen-typed draft reads as transformers' ``Qwen3Config`` leaves it:
``sliding_window`` only with ``use_sliding_window``, and a ``layer_types`` list filled
in (sliding from ``max_window_layers`` on).

Weights (``DFlashQwen3Model``): Qwen3 decoder layers (q/k/v/o, per-head q/k norms, a
gated MLP, two norms), ``fc`` (target hidden x the fused target layers -> hidden,
replicated; the fused layers are ``dflash_config.target_layer_ids``, else one per draft
layer), ``hidden_norm``, ``norm``, the ``mask_embedding`` vector; its embeddings and lm_head
are the target's unless ``has_own_lm_head`` (then ``draft_vocab_size`` rows); the int64
``draft_id_to_target_id`` map when ``draft_vocab_size`` differs from the draft's
``vocab_size`` (vLLM compares it with the target's, which a draft config matches).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbudget.architectures.decoder import AttentionStyle, attention_weights, gated_mlp
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import Inventory, ModelFields
from kvbudget.layers import AttentionLayer, Layer

STYLE = AttentionStyle(qk_norm="head")
SLIDING = "sliding_attention"
QWEN_TYPES = frozenset({"qwen2", "qwen3", "qwen3_moe"})


def is_dflash(cfg: Mapping[str, Any], architectures: list[Any]) -> bool:
    """Whether ``cfg`` is a DFlash draft's config."""
    return isinstance(cfg.get("dflash_config"), Mapping) or any(
        "dflash" in str(a).lower() for a in architectures
    )


def _dflash_config(f: ConfigFields) -> ConfigFields:
    raw = f.get("dflash_config") or {}
    if not isinstance(raw, Mapping):
        raise f.error("dflash_config", f"expected a mapping, got {raw!r}")
    return ConfigFields(raw, f.source, f"{f.prefix}dflash_config.")


def _top_window(f: ConfigFields) -> int | None:
    """The top-level ``sliding_window`` as the config class leaves it: transformers'
    Qwen2/Qwen3 configs null it unless ``use_sliding_window`` (``__post_init__``)."""
    if f.get("model_type") in QWEN_TYPES and f.get("use_sliding_window") is not True:
        return None
    return f.int("sliding_window") if f.has("sliding_window") else None


def sliding_flags(f: ConfigFields, n: int) -> list[bool]:
    """Which draft layers slide (``_resolve_layer_attention``)."""
    use_swa = _dflash_config(f).flag("use_swa", False)
    if f.has("layer_types"):
        listed = [t == SLIDING for t in f.str_list("layer_types", n)]
    elif f.get("model_type") in QWEN_TYPES:
        # Qwen3Config fills layer_types: sliding from max_window_layers on, with a window
        first = f.int("max_window_layers", 28, minimum=0)
        listed = [_top_window(f) is not None and i >= first for i in range(n)]
    else:
        return [use_swa] * n
    return [True] * n if use_swa and not any(listed) else listed


def layers(f: ConfigFields) -> list[Layer]:
    """The draft's own attention layers, indexed from 0 (the engine puts them after the
    target's)."""
    n = f.int("num_hidden_layers")
    slides = sliding_flags(f, n)
    window = None
    if any(slides):
        d = _dflash_config(f)
        window = d.int("swa_window_size") if d.has("swa_window_size") else _top_window(f)
        if window is None:
            raise f.error(
                "sliding_window",
                "required for a sliding DFlash layer (or dflash_config.swa_window_size; a "
                "Qwen config keeps it only with use_sliding_window)",
            )
    kv = f.int("num_key_value_heads", f.int("num_attention_heads"))
    head_dim = f.head_dim()
    return [
        AttentionLayer(
            index=i, num_kv_heads=kv, head_dim=head_dim, sliding_window=window if s else None
        )
        for i, s in enumerate(slides)
    ]


def weights(inv: Inventory, c: ModelFields) -> None:
    """Every tensor of a DFlash draft, all on the last PP stage (module docstring)."""
    hidden = c.int("hidden_size")
    n = c.int("num_hidden_layers")
    for i in range(n):
        layer = inv.at(f"layers.{i}", "last", "norms")
        attention_weights(layer.sub("self_attn", "attention"), c, STYLE, in_features=hidden)
        gated_mlp(layer.sub("mlp", "dense_mlp"), hidden, c.int("intermediate_size"))
        layer.norm("input_layernorm", hidden)
        layer.norm("post_attention_layernorm", hidden)
    top = inv.at("", "last", "norms")
    ids = _dflash_config(c).get("target_layer_ids")
    fused = len(ids) if isinstance(ids, list) and ids else n
    fc_in = c.int("target_hidden_size", hidden) * fused
    top.sub("", "eagle3_fc").linear("fc", hidden, fc_in, shard="replicated")
    top.norm("hidden_norm", hidden)
    top.norm("norm", hidden)
    top.tensor("mask_embedding", hidden)
    head = top.sub("", "lm_head")
    rows = c.int("draft_vocab_size", c.int("vocab_size"))
    if c.flag("has_own_lm_head", False):
        head.vocab("lm_head", rows, hidden)
    if rows != c.int("vocab_size"):  # vLLM compares with the target's vocabulary
        head.tensor("d2t", rows, fixed="int64", is_param=False)


__all__ = ["is_dflash", "layers", "sliding_flags", "weights"]
