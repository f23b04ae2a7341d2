"""Gemma-4 under SGLang 0.5.23: the full and sliding pools, and the assistant draft.

Facts from the SGLang 0.5.23 PyPI wheel (``python/sglang/srt/``; it records no commit),
run by the fidelity harness (``benchmarks/fidelity/sglang``, ``--match gemma4``):

* **Config** (``utils/hf_transformers/config.py``): for the multimodal checkpoint
  (``gemma4``, and the assistant's ``gemma4_assistant``)
  ``_apply_gemma4_attention_overrides`` flattens transformers 5.19.0's
  ``per_layer_config`` into one full-attention shape (``head_dim``,
  ``num_key_value_heads``: ``global_head_dim`` and, with ``attention_k_eq_v``,
  ``num_global_key_value_heads``) and one sliding shape (``swa_head_dim``,
  ``swa_num_key_value_heads``); ``_gemma4_attention_shapes`` refuses a layer type with
  more than one shape, or per-layer fields besides those two.
* **Hybrid pools**: ``Gemma4ForConditionalGeneration`` is on ``is_hybrid_swa_model``'s
  allow-list and ``is_hybrid_swa_compress`` (``configs/model_config.py``);
  ``get_hybrid_layer_ids`` splits *every* layer by ``layer_types``, so the KV-shared
  layers (``num_kv_shared_layers``, which read an earlier layer's cache:
  ``models/gemma4_causal.py`` ``save_kv_cache=not self.is_kv_shared_layer``) still get
  their rows in the pools. ``HybridSWAPoolConfigurator`` prices full layers at
  ``get_num_kv_heads(tp) x (head_dim + v_head_dim)`` and sliding ones at
  ``get_swa_num_kv_heads(tp) x (swa_head_dim x 2)``, and ``SWAKVPool`` allocates them so
  (``_build_hybrid_swa_kv_pool`` passes ``swa_head_num`` / ``swa_head_dim``); the window
  is the text config's ``sliding_window`` (``_get_sliding_window_size``). The split is
  the one :mod:`kvbudget.engines.sglang` plans for gpt-oss.
* **Assistant draft** (``gemma4_assistant``, ``Gemma4AssistantForCausalLM``):
  ``arg_groups/speculative_hook.py`` ``_resolve_speculative_algorithm_alias`` promotes
  NEXTN / EAGLE with it to ``FROZEN_KV_MTP``, which ``is_eagle()``; so the target's
  ``HybridSWAPoolConfigurator`` prices ``eagle_draft_num_layers`` (the assistant's
  ``num_hidden_layers``: ``spec_aux_hidden_state.py``) as full layers of the *target's*
  full shape (the assistant's model is no hybrid, so none in the sliding share). The
  draft reads the target's cache (``speculative/frozen_kv_mtp_worker_v2.py``) but its
  ``alloc_memory_pool`` still builds a pool of a dummy 64 tokens: an
  ``MHATokenToKVPool`` of ``64 + page`` rows over the assistant's layers at its own
  full-attention shape. With HiCache that pool gets no host pool (``speculative/
  base_spec_worker.py`` ``_draft_model_runners`` returns none for FROZEN_KV_MTP): the
  host pools are the target's alone.
* **EAGLE3 heads**: priced and pooled as for gpt-oss (the head's own pool of the full
  pool's rows, priced in the profile as one more target full layer);
  ``Gemma4ForConditionalGeneration`` has ``set_eagle3_layers_to_capture``.

Refused (:func:`check`), each in what SGLang would do:

* a text-only config (``gemma4_text``): transformers 5.19.0's ``Gemma4TextConfig``
  always carries a ``per_layer_config`` for its full-attention layers, and SGLang's HF
  parser (``parse``: ``hasattr(config, key)`` for every text field) then raises
  ``AmbiguousGlobalPerLayerAttributeError`` on ``head_dim``; the flattening above runs
  for the multimodal wrapper only;
* a layer type of two shapes, per-layer fields besides ``head_dim`` and
  ``num_key_value_heads`` (``_gemma4_attention_shapes``), no sliding layer
  (``HybridSWAPoolConfigurator`` asserts one);
* ``--spec`` other than none, ngram, eagle3 and mtp with the assistant (draft models,
  EAGLE heads: not checked against SGLang), a Gemma-4 assistant for another target,
  ``--pp`` > 1 (not checked), another SGLang release than 0.5.23.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kvbudget.architectures import gemma4
from kvbudget.config_fields import ConfigFields
from kvbudget.engines.common import refuse_unchecked_sglang
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

MODEL_TYPES = frozenset({"gemma4", "gemma4_text"})
ASSISTANT_TYPE = "gemma4_assistant"
CHECKED_VERSION = "0.5.23"
# FrozenKVMTPWorkerV2.alloc_memory_pool: MemoryPoolConfig(max_total_num_tokens=64)
FROZEN_DRAFT_TOKENS = 64
# the per-layer fields _gemma4_attention_shapes flattens
FLATTENED_FIELDS = frozenset({"head_dim", "num_key_value_heads"})
CHECKED_SPECS = frozenset({"none", "ngram", "mtp", "eagle3"})


def is_gemma4(d: Deployment) -> bool:
    """Whether the target is Gemma-4 (multimodal checkpoint or text config)."""
    return d.target.model_type in MODEL_TYPES


def has_assistant(d: Deployment) -> bool:
    """Whether the draft is a Gemma-4 MTP assistant (SGLang's FROZEN_KV_MTP)."""
    return d.draft is not None and d.draft.model_type == ASSISTANT_TYPE


def _shapes(f: ConfigFields) -> tuple[list[bool], list[tuple[int, int]]]:
    """Each layer's sliding flag and ``(num_kv_heads, head_dim)``, as transformers
    builds ``per_layer_config`` (:mod:`kvbudget.architectures.gemma4`)."""
    slides = gemma4.sliding(f)
    return slides, gemma4.geometry(f, slides)


def pool_layers(d: Deployment) -> list[Layer]:
    """The target's layers as SGLang's pools hold them: every layer, KV-shared ones too,
    an :class:`AttentionLayer` of its type's shape (sliding ones over the window)."""
    f = ConfigFields(d.target.config, d.target.source)
    slides, geo = _shapes(f)
    window = gemma4.sliding_window(f)
    return [
        AttentionLayer(
            index=i, num_kv_heads=kv, head_dim=head_dim, sliding_window=window if s else None
        )
        for i, (s, (kv, head_dim)) in enumerate(zip(slides, geo, strict=True))
    ]


def assistant_layers(d: Deployment) -> int:
    """The assistant's layers, which the target's configurator prices as full layers
    (``eagle_draft_num_layers``); 0 without an assistant draft."""
    if d.draft is None or not has_assistant(d):
        return 0
    return ConfigFields(d.draft.config, d.draft.source).int("num_hidden_layers")


def frozen_pool_bytes(d: Deployment, page: int) -> int:
    """The assistant's dummy pool (``FrozenKVMTPWorkerV2.alloc_memory_pool``): ``64 +
    page`` rows of every assistant layer at its full-attention shape (SGLang's flattened
    ``head_dim`` / ``num_key_value_heads``); 0 without an assistant draft."""
    if d.draft is None or not has_assistant(d):
        return 0
    f = ConfigFields(d.draft.config, d.draft.source)
    slides, geo = _shapes(f)
    kv, head_dim = next(g for s, g in zip(slides, geo, strict=True) if not s)
    layer = AttentionLayer(index=0, num_kv_heads=kv, head_dim=head_dim)
    per_token = layer.bytes_per_token(d.kv_dtype_value, d.parallel.attention_tp)
    return (FROZEN_DRAFT_TOKENS + page) * assistant_layers(d) * per_token


def _shape_refusal(f: ConfigFields) -> str | None:
    """What ``_gemma4_attention_shapes`` (or the hybrid configurator) raises on, or None."""
    given = f.get("per_layer_config")
    if isinstance(given, Mapping):
        extra = sorted(
            {str(k) for over in given.values() if isinstance(over, Mapping) for k in over}
            - FLATTENED_FIELDS
        )
        if extra:
            return (
                f"its per_layer_config declares per-layer {extra}, which SGLang 0.5.23 "
                "cannot express (_gemma4_attention_shapes flattens only head_dim and "
                "num_key_value_heads)"
            )
    slides, geo = _shapes(f)
    for kind, flag in (("full_attention", False), ("sliding_attention", True)):
        shapes = sorted({g for s, g in zip(slides, geo, strict=True) if s == flag})
        if len(shapes) > 1:
            return (
                f"its {kind!r} layers have more than one (num_key_value_heads, head_dim): "
                f"{shapes}, and SGLang 0.5.23 carries a single shape per layer type "
                "(_gemma4_attention_shapes)"
            )
    if not any(slides):
        return (
            "it has no sliding_attention layer, and SGLang 0.5.23's "
            'HybridSWAPoolConfigurator asserts "Hybrid SWA model must have at least one '
            'SWA layer"'
        )
    return None


def _config_refusal(d: Deployment) -> str | None:
    """Why SGLang 0.5.23 would not start on (or kvbudget not plan) the target, or None."""
    if d.target.model_type == "gemma4_text":
        return (
            "a text-only gemma4_text config fails SGLang 0.5.23's HF parser "
            "(utils/hf_transformers/config.py parse reads every field as a global "
            "attribute; transformers 5.19.0's Gemma4TextConfig carries a per_layer_config, "
            "so head_dim raises AmbiguousGlobalPerLayerAttributeError at start-up); plan "
            "the multimodal checkpoint (model_type gemma4, its text_config)"
        )
    return _shape_refusal(ConfigFields(d.target.config, d.target.source))


def _deployment_refusal(d: Deployment) -> str | None:
    """A deployment setting this model of SGLang does not plan for Gemma-4, or None."""
    if d.spec.name not in CHECKED_SPECS or (d.spec.name == "mtp" and not has_assistant(d)):
        return (
            f"--spec {d.spec.name} (checked against SGLang: none, ngram, eagle3, and mtp "
            "with a Gemma-4 assistant as --draft)"
        )
    if d.parallel.pp > 1:
        return "--pp > 1 (checked at --pp 1 only)"
    return None


def check(d: Deployment, version: str) -> None:
    """InvalidArgumentError for a Gemma-4 deployment this model of SGLang does not plan
    (the module docstring says why each is refused)."""
    if not is_gemma4(d):
        if d.draft is not None and has_assistant(d):
            raise InvalidArgumentError(
                f"--engine sglang models the Gemma-4 assistant {d.draft.name} for a Gemma-4 "
                f"target only (SGLang's FROZEN_KV_MTP reads the target's Gemma-4 pools); "
                f"{d.target.name} is {d.target.model_type!r}"
            )
        return
    name = d.target.name
    refuse_unchecked_sglang(version, CHECKED_VERSION, name, "Gemma-4")
    reason = _config_refusal(d) or _deployment_refusal(d)
    if reason is not None:
        raise InvalidArgumentError(
            f"--engine sglang is not modelled for {name}: {reason}; or plan it with --engine vllm"
        )


__all__ = [
    "CHECKED_VERSION",
    "FROZEN_DRAFT_TOKENS",
    "assistant_layers",
    "check",
    "frozen_pool_bytes",
    "has_assistant",
    "is_gemma4",
    "pool_layers",
]
