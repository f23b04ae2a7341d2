"""``ModelSpec``: the cache-relevant facts of one model, as :mod:`kvbudget.model` reads them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kvbudget.layers import AttentionLayer, Layer

if TYPE_CHECKING:
    from kvbudget.checkpoint import Checkpoint


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """The cache-relevant facts of one model, immutable.

    ``layers`` are the model's own decoder layers in order (one entry per layer, including
    layers that cache nothing, so indices match the checkpoint and PP stages split them
    as engines do). ``mtp_layers`` are multi-token-prediction layers shipped with the
    model: draft layers, never part of the target's own cache. ``ssm_state_dtype`` is the
    dtype of recurrent layers' SSM/recurrent state when it differs from ``dtype``
    (``mamba_ssm_cache_dtype``; float32 for Nemotron-H), else None. ``config`` is the raw
    (text) config with architecture defaults applied, ``raw_config`` the whole file as
    read (e.g. Gemma-3's ``vision_config``); both read-only, for consumers that need more
    fields (weights). ``revision`` is the commit a Hugging Face Hub id resolved to (None
    for a preset or a local folder); ``checkpoint`` the tensors its safetensors headers
    list (None when none were read: presets, folders without safetensors files), from
    which :func:`kvbudget.weights_bytes` takes the weight bytes.
    """

    name: str
    source: str
    model_type: str
    architectures: tuple[str, ...]
    dtype: str | None
    max_position_embeddings: int
    vocab_size: int
    hidden_size: int
    num_attention_heads: int
    layers: tuple[Layer, ...]
    mtp_layers: tuple[Layer, ...] = ()
    is_eagle3: bool = False
    is_eagle_head: bool = False  # an EAGLE-1/EAGLE-2 draft head
    is_dflash: bool = False  # a DFlash block draft (kvbudget.architectures.dflash)
    ssm_state_dtype: str | None = None
    location: str | None = None  # absolute folder of a local config; None for a preset
    assumed: tuple[str, ...] = ()  # notes on how it was read (an unknown model_type, ...)
    revision: str | None = None  # the Hub commit sha of a Hub model
    checkpoint: Checkpoint | None = field(default=None, compare=False, repr=False)
    config: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )
    raw_config: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

    @property
    def is_head(self) -> bool:
        """An EAGLE, EAGLE3 or DFlash draft head: it runs on the target's hidden states, shares
        its embeddings (and lm_head unless it has its own), and sits on the last stage."""
        return self.is_eagle3 or self.is_eagle_head or self.is_dflash

    @property
    def num_layers(self) -> int:
        """Number of decoder layers (MTP layers excluded)."""
        return len(self.layers)

    def describe(self) -> str:
        """One line: name, layer kinds and their counts."""
        counts: dict[str, int] = {}
        for layer in self.layers:
            key: str = layer.kind
            if isinstance(layer, AttentionLayer) and layer.sliding_window is not None:
                local = "chunked" if layer.chunked else "sliding"
                key = f"{local}({layer.sliding_window})"
            counts[key] = counts.get(key, 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in counts.items())
        extra = f", {len(self.mtp_layers)} mtp" if self.mtp_layers else ""
        tag = (
            " [dflash draft]"
            if self.is_dflash
            else " [eagle3 head]"
            if self.is_eagle3
            else " [eagle head]"
            if self.is_eagle_head
            else ""
        )
        return f"{self.name}: {parts}{extra}{tag}"


__all__ = ["ModelSpec"]
