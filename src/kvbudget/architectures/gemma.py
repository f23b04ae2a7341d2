"""Gemma-2 and Gemma-3 (text, and the Gemma-3 vision-language checkpoint).

Cache: Gemma-2 alternates sliding and full attention (even layers slide); Gemma-3 has
``sliding_window_pattern`` (default 6: five local layers then one global); a
``layer_types`` list wins. The Gemma-3 checkpoint nests its text model under
``text_config`` (transformers' Gemma3TextConfig defaults fill what it leaves out).
Weights: four norms per layer, per-head q/k norms (Gemma-3), tied embeddings by default;
Gemma-3's SigLIP vision tower and projector on stage 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from types import MappingProxyType

from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import (
    AttentionStyle,
    alternating_window,
    attention_layers,
    decoder_weights,
)
from kvbudget.config_fields import ConfigFields
from kvbudget.errors import ConfigError, UnsupportedArchitectureError
from kvbudget.inventory import Inventory, ModelFields, Parts, Shard, top_config

EXTRA_NORMS = ("pre_feedforward_layernorm", "post_feedforward_layernorm")


def pattern_window(f: ConfigFields, n: int) -> list[bool]:
    """Gemma-3: every ``sliding_window_pattern``-th layer is global, the others slide."""
    pattern = f.int("sliding_window_pattern")
    return [(i + 1) % pattern != 0 for i in range(n)]


def gemma3_weights(inv: Inventory, c: ModelFields) -> None:
    """The text decoder, under ``language_model`` for the vision-language checkpoint,
    and its vision tower."""
    if c.model.model_type == "gemma3":
        decoder_weights(
            inv,
            c,
            GEMMA3_STYLE,
            prefix="language_model.model",
            extra_norms=EXTRA_NORMS,
            head="language_model.lm_head",
            tied_default=True,
        )
        siglip(inv, c)
    else:
        decoder_weights(inv, c, GEMMA3_STYLE, extra_norms=EXTRA_NORMS, tied_default=True)


def siglip(inv: Inventory, c: ModelFields) -> None:
    """SigLIP vision tower and the Gemma-3 multimodal projector, on stage 0.

    Patch embedding (a biased conv), learned position embedding, encoder layers (two
    LayerNorms with bias, biased q/k/v/out, biased fc1/fc2), a post LayerNorm; the
    projector is ``mm_input_projection_weight`` (vision_hidden x text_hidden) and an
    RMSNorm over the vision hidden size. Linears shard like the text model's; they are
    never quantized here.
    """
    vision = top_config(c.model).get("vision_config")
    if not isinstance(vision, Mapping):
        raise ConfigError(
            "required to count the vision tower but missing",
            source=c.model.source,
            field="vision_config",
        )
    v = ModelFields(c.model, vision, "vision_config.")
    if v.flag("vision_use_head", True):
        raise UnsupportedArchitectureError(
            f"{c.model.name}: a SigLIP pooling head (vision_use_head) is not modelled",
            source=c.model.source,
            field="vision_config.vision_use_head",
        )
    width, inter = v.int("hidden_size"), v.int("intermediate_size")
    heads, patch = v.int("num_attention_heads"), v.int("patch_size")
    tower = inv.at("vision_tower.vision_model", "first", "vision")
    tower.linear(
        "embeddings.patch_embedding",
        width,
        v.int("num_channels", 3) * patch * patch,
        shard="replicated",
        bias=True,
        quantizable=False,
    )
    positions = (v.int("image_size") // patch) ** 2
    tower.tensor("embeddings.position_embedding", positions, width)
    head: Parts = ((heads, width // heads),)
    linears: tuple[tuple[str, int | Parts, int | Parts, Shard], ...] = (
        ("self_attn.q_proj", head, width, "column"),
        ("self_attn.k_proj", head, width, "column"),
        ("self_attn.v_proj", head, width, "column"),
        ("self_attn.out_proj", width, head, "row"),
        ("mlp.fc1", inter, width, "column"),
        ("mlp.fc2", width, inter, "row"),
    )
    for i in range(v.int("num_hidden_layers")):
        layer = tower.sub(f"encoder.layers.{i}")
        for name, out, inp, shard in linears:
            layer.linear(name, out, inp, shard=shard, bias=True, quantizable=False)
        layer.norm("layer_norm1", width, bias=True)
        layer.norm("layer_norm2", width, bias=True)
    tower.norm("post_layernorm", width, bias=True)
    projector = inv.at("multi_modal_projector", "first", "vision")
    projector.tensor("mm_input_projection_weight", width, c.int("hidden_size"))
    projector.norm("mm_soft_emb_norm", width)


GEMMA2_STYLE = AttentionStyle()
GEMMA3_STYLE = AttentionStyle(qk_norm="head")

GEMMA2 = Architecture(
    family="gemma",
    model_types=frozenset({"gemma2"}),
    layers=partial(attention_layers, sliding_default=alternating_window),
    weights=partial(
        decoder_weights, style=GEMMA2_STYLE, extra_norms=EXTRA_NORMS, tied_default=True
    ),
    attention=GEMMA2_STYLE,
    ties_embeddings=True,
)
GEMMA3 = Architecture(
    family="gemma",
    model_types=frozenset({"gemma3", "gemma3_text"}),
    layers=partial(attention_layers, sliding_default=pattern_window),
    weights=gemma3_weights,
    attention=GEMMA3_STYLE,
    ties_embeddings=True,
    nested_types=frozenset({"gemma3"}),
    # transformers' Gemma3TextConfig defaults for fields the gemma-3 checkpoints leave
    # out (src/transformers/models/gemma3/configuration_gemma3.py)
    text_defaults=MappingProxyType(
        {"vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window_pattern": 6}
    ),
)

ARCHITECTURES = (GEMMA2, GEMMA3)
