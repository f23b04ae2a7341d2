"""Gemma-4 under TensorRT-LLM: the V2 manager it always gets, and the layers it sizes.

Facts from ``NVIDIA/TensorRT-LLM`` (the sizing path as transcribed in
``shared/trtllm-src`` @ 38198e34, SOURCES.md; the model code read, not transcribed), run
by the fidelity harness (``benchmarks/fidelity/trtllm``, ``--match gemma4``):

* **Manager** (``_torch/pyexecutor/_util.py`` @ 38198e34): ``config_utils.is_gemma4_hybrid``
  is true when ``global_head_dim`` differs from ``head_dim`` (transformers'
  ``Gemma4TextConfig`` defaults: 512 and 256), and ``_non_hybrid_kv_cache_manager_cls``
  then returns ``KVCacheManagerV2`` whatever ``use_kv_cache_manager_v2`` says ("Models with
  per-layer head_dim (e.g., Gemma4 hybrid attention) require KVCacheManagerV2"). The
  refusal ``_validate_or_fallback_kv_cache_manager_v2`` keeps for it ("Gemma4 hybrid
  attention requires KVCacheManagerV2, which is not yet supported with ...") fires only
  for what ``kv_cache_manager_v2_incompatible_features`` lists, which is nothing at this
  commit. So no setting gives Gemma-4 a V1 manager: ``trtllm@v1`` refuses it
  (:func:`refuse_v1`), and ``trtllm`` / ``trtllm@v2`` plan the V2 manager.
* **Layers** (``_create_kv_cache_manager``): one entry per ``layer_types`` entry
  (``num_hidden_layers`` of them): a sliding layer keeps ``num_key_value_heads`` x
  ``head_dim``, a full one ``global_head_dim`` and, under ``attention_k_eq_v``,
  ``num_global_key_value_heads`` (else ``num_key_value_heads``); ``KVCacheManagerV2``
  takes both lists (``head_dim_per_layer``, per-layer kv heads ``ceil(kv / tp)``) and
  sizes every layer's K and V at them. The KV-shared layers (``num_kv_shared_layers``) are
  among them: ``modeling_gemma4.py`` (``Gemma4DecoderLayer``, ``Gemma4Attention``;
  commit 00e7d103, stored id 56851359983) points their attention's ``layer_idx`` at the
  last earlier layer of their type and builds a Q-only projection, but the manager is
  built for ``num_hidden_layers`` layers (``get_num_attention_layers`` is
  ``num_hidden_layers`` for Gemma-4: ``_torch/model_config.py``, stored id 54702305068,
  counts apart only the Nemotron-H and Qwen3 hybrids), so their slots are allocated and
  never written. The multimodal checkpoint (``Gemma4ForConditionalGeneration``,
  ``modeling_gemma4mm.py`` @ 001a6a01, stored id 56205020145) builds its language model
  as ``Gemma4ForCausalLM`` of its ``text_config``, which is what the manager reads.
* **Windows**: the emitted ``max_attention_window`` (the sliding window on sliding layers,
  full length on full ones) wins over the windows ``_derive_v2_layer_type_attention_windows``
  would derive from ``layer_types`` (it returns None for an explicit one).
* **Creator's price** (``KVCacheManagerV2._get_static_cache_size_layer_components``,
  ``kv_cache_manager_v2.py`` @ 38198e34): one size for every layer, the config's
  ``head_dim`` x ``num_key_value_heads``; it only splits a budget between managers, and
  Gemma-4 has no draft manager (below), so it moves no pool.

Refused (:func:`check`), each in TensorRT-LLM's terms:

* ``--pp`` > 1: ``Gemma4ForCausalLM.__init__`` asserts ``pp_size == 1`` ("Gemma4 does not
  support pipeline parallelism");
* ``--ep`` > 1 without ``enable_moe_block`` (its assertion: "moe_ep_size>1 requires a
  Gemma4 MoE variant");
* EAGLE3, MTP (the ``gemma4_assistant`` draft too) and draft-target: ``Gemma4ForCausalLM``
  is a ``DecoderModelForCausalLM``, not a ``SpecDecOneEngineForCausalLM`` (as
  ``LlamaForCausalLM`` is), so it builds no one-model draft; ngram needs none and plans;
* a config whose ``global_head_dim`` equals ``head_dim`` (no ``is_gemma4_hybrid``: then no
  per-layer lists, every layer at ``head_dim`` x ``num_key_value_heads``; not modelled).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvbudget.architectures import gemma4
from kvbudget.config_fields import ConfigFields
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import AttentionLayer, Layer

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

MODEL_TYPES = frozenset({"gemma4", "gemma4_text"})
DEFAULT_GLOBAL_HEAD_DIM = 512  # transformers 5.20.2 Gemma4TextConfig.__post_init__
DEFAULT_HEAD_DIM = 256  # Gemma4TextConfig.head_dim
PLANNED_SPECS = frozenset({"none", "ngram"})
MANAGER_REASON = (
    "Gemma-4's per-layer head_dim (is_gemma4_hybrid): _non_hybrid_kv_cache_manager_cls "
    "builds KVCacheManagerV2 whatever use_kv_cache_manager_v2 says"
)


def is_gemma4(d: Deployment) -> bool:
    """Whether the target is Gemma-4 (the multimodal checkpoint or a text config)."""
    return d.target.model_type in MODEL_TYPES


def _fields(d: Deployment) -> ConfigFields:
    return ConfigFields(d.target.config, d.target.source)


def is_hybrid(d: Deployment) -> bool:
    """``config_utils.is_gemma4_hybrid``: ``global_head_dim`` differs from ``head_dim``."""
    f = _fields(d)
    return f.int("global_head_dim", DEFAULT_GLOBAL_HEAD_DIM) != f.int("head_dim", DEFAULT_HEAD_DIM)


def cache_layers(d: Deployment) -> tuple[Layer, ...]:
    """The layers ``KVCacheManagerV2`` is built with for a Gemma-4 target, in
    ``_create_kv_cache_manager``'s terms: every ``layer_types`` entry, KV-shared layers
    too, sliding ones at ``(num_key_value_heads, head_dim)`` over the window, full ones
    at ``global_head_dim`` with ``num_global_key_value_heads`` under
    ``attention_k_eq_v`` (``getattr(...) or num_key_value_heads``)."""
    f = _fields(d)
    kv, head_dim = f.int("num_key_value_heads"), f.int("head_dim", DEFAULT_HEAD_DIM)
    global_dim = f.int("global_head_dim", DEFAULT_GLOBAL_HEAD_DIM)
    global_kv = kv
    if f.flag("attention_k_eq_v", False):
        global_kv = f.int("num_global_key_value_heads", 0, minimum=0) or kv
    slides = gemma4.sliding(f)
    window = gemma4.sliding_window(f) if any(slides) else None
    return tuple(
        AttentionLayer(index=i, num_kv_heads=kv, head_dim=head_dim, sliding_window=window)
        if s
        else AttentionLayer(index=i, num_kv_heads=global_kv, head_dim=global_dim)
        for i, s in enumerate(slides)
    )


def engine_view(d: Deployment) -> Deployment:
    """``d`` with a Gemma-4 target's layers as TensorRT-LLM's manager holds them
    (:func:`cache_layers`); any other deployment as it is."""
    if not is_gemma4(d):
        return d
    return replace(d, target=replace(d.target, layers=cache_layers(d)))


def static_price(d: Deployment) -> int:
    """The creator's bytes per token of one Gemma-4 layer
    (``_get_static_cache_size_layer_components``): ``2 x head_dim x num_key_value_heads //
    tp`` values of the config's (sliding) shape, whatever the layer's own."""
    f = _fields(d)
    values = f.int("head_dim", DEFAULT_HEAD_DIM) * f.int("num_key_value_heads")
    return 2 * d.kv_dtype_value.bytes_for(values // d.parallel.attention_tp)


def shared_layer_warnings(d: Deployment) -> list[str]:
    """What the KV-shared layers' slots cost a Gemma-4 target (none without sharing): their
    bytes per token of the manager's, which TensorRT-LLM allocates and never writes."""
    if not is_gemma4(d):
        return []
    layers = cache_layers(d)
    first = gemma4.first_kv_shared(_fields(d))
    if first >= len(layers):
        return []
    dtype, tp = d.kv_dtype_value, d.parallel.attention_tp
    shared = sum(x.bytes_per_token(dtype, tp) for x in layers[first:])
    total = sum(x.bytes_per_token(dtype, tp) for x in layers)
    return [
        f"TensorRT-LLM's KV cache holds all {len(layers)} of {d.target.name}'s layers: the "
        f"{len(layers) - first} KV-shared ones (which read an earlier layer's cache) keep "
        f"slots they never write, {shared} of the {total} B per token per rank"
    ]


def check(d: Deployment) -> None:
    """InvalidArgumentError for what TensorRT-LLM does not run, or kvbudget does not model,
    with a Gemma-4 target (module docstring)."""
    if not is_gemma4(d):
        return
    if not is_hybrid(d):
        raise InvalidArgumentError(
            f"{d.target.name}'s global_head_dim equals its head_dim: TensorRT-LLM then sizes "
            "every layer at head_dim x num_key_value_heads (no is_gemma4_hybrid), which "
            "--engine trtllm does not model; plan it with --engine vllm or --engine kvbudget"
        )
    if d.parallel.pp > 1:
        raise InvalidArgumentError(
            "TensorRT-LLM's Gemma4ForCausalLM asserts pp_size == 1 ('Gemma4 does not support "
            f"pipeline parallelism'): use --pp 1 (got --pp {d.parallel.pp}), with --tp or "
            "attention DP"
        )
    if d.parallel.ep > 1 and not _fields(d).flag("enable_moe_block", False):
        raise InvalidArgumentError(
            f"TensorRT-LLM's Gemma4ForCausalLM asserts enable_moe_block for moe_ep_size > 1 "
            f"('moe_ep_size>1 requires a Gemma4 MoE variant'); {d.target.name} sets none: "
            "use --ep 1"
        )
    if d.spec.name not in PLANNED_SPECS:
        raise InvalidArgumentError(
            f"TensorRT-LLM's Gemma4ForCausalLM is a DecoderModelForCausalLM, not a "
            f"SpecDecOneEngineForCausalLM, so it builds no one-model draft: --spec "
            f"{d.spec.name} does not run on it (EAGLE3, MTP and its gemma4_assistant, "
            "draft-target); use --spec none or --spec ngram, or plan the draft with "
            "--engine vllm"
        )


def refuse_v1(d: Deployment) -> None:
    """InvalidArgumentError for ``trtllm@v1`` with a Gemma-4 target: TensorRT-LLM builds
    it no V1 manager (module docstring), so a V1 plan would describe pools it never has."""
    if not is_gemma4(d):
        return
    if not is_hybrid(d):
        check(d)  # refuses it in the same words as for V2
    raise InvalidArgumentError(
        f"TensorRT-LLM builds no V1 KVCacheManager for {d.target.name}: "
        f"{MANAGER_REASON}, so use_kv_cache_manager_v2 false is ignored; plan it with "
        "--engine trtllm (its auto pick) or --engine trtllm@v2"
    )


__all__ = [
    "MANAGER_REASON",
    "cache_layers",
    "check",
    "engine_view",
    "is_gemma4",
    "is_hybrid",
    "refuse_v1",
    "shared_layer_warnings",
    "static_price",
]
