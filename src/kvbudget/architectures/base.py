"""``Architecture``: what one family module registers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kvbudget.architectures.decoder import AttentionStyle
from kvbudget.config_fields import ConfigFields
from kvbudget.inventory import Inventory, ModelFields
from kvbudget.layers import Layer

LayersReader = Callable[[ConfigFields], list[Layer]]
MtpReader = Callable[[ConfigFields, int], tuple[Layer, ...]]
WeightsBuilder = Callable[[Inventory, ModelFields], None]


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """One model family (or one variant of it), registered by ``model_type``.

    * ``layers``: the decoder's cache layers, one per decoder layer, from the parsed
      (text) config fields;
    * ``mtp_layers``: MTP draft layers the checkpoint ships, indexed from the given
      start (None: the family has none, and a ``num_nextn_predict_layers`` > 0 is an
      error naming the field);
    * ``weights``: adds every checkpoint tensor to the inventory, from the same fields;
    * ``nested_types``: model types whose text model sits under ``text_config``;
      ``text_defaults``: transformers' defaults for fields the checkpoints leave out;
    * ``attention``: how its softmax attention stores weights (an EAGLE3 head of this
      family reuses it); ``draft_heads``: EAGLE and EAGLE3 heads of this family are modelled;
    * ``ties_embeddings``: ``tie_word_embeddings`` when the config leaves it out;
    * ``ssm_state_dtype``: the recurrent state's dtype when the config names none;
    * ``text_only_note``: a note for nested types whose vision weights are not counted;
    * ``unmodelled_engines``: engine models (``sglang``, ``trtllm``, ...) that do not
      model this family's pools and refuse it (:func:`kvbudget.engines.common.refuse_unmodelled`);
      ``unmodelled_reasons``: what each of them would have to model, said in the refusal;
    * ``checkpoint_names``: ``(pattern, replacement)`` regex rules, applied in order, that
      turn the names a checkpoint stores into the inventory's (DeepSeek-V4's own
      ``layers.N.ffn.experts.E.w1`` for ``model.layers.N.ffn.experts.E.gate_proj``), as
      the engines' weight mappers rename them on loading; empty when the checkpoint
      already uses the inventory's names (:mod:`kvbudget.weights.headers`).
    """

    family: str
    model_types: frozenset[str]
    layers: LayersReader
    weights: WeightsBuilder
    mtp_layers: MtpReader | None = None
    attention: AttentionStyle = field(default_factory=AttentionStyle)
    draft_heads: bool = False
    nested_types: frozenset[str] = frozenset()
    text_defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    ties_embeddings: bool = False
    ssm_state_dtype: str | None = None
    text_only_note: bool = False
    unmodelled_engines: frozenset[str] = frozenset()
    unmodelled_reasons: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    checkpoint_names: tuple[tuple[str, str], ...] = ()


__all__ = ["Architecture", "LayersReader", "MtpReader", "WeightsBuilder"]
