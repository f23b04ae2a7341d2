"""Model architectures: one module per family, registered by ``model_type``.

Each family module (``llama``, ``llama4``, ``qwen``, ``gemma``, ``gemma4``, ``gpt_oss``,
``minimax_m2``, ``minimax_m3``, ``deepseek``, ``deepseek_v4``, ``deepseek_v41``, ``glm4_moe``,
``qwen3_next``, ``kimi_linear``, ``kimi_k3``, ``nemotron_h``, ``step3p5``) builds one or more
:class:`Architecture` values from the same parsed config fields
(:class:`~kvbudget.config_fields.ConfigFields`): its cache layers (read by
:mod:`kvbudget.model`) and its weight inventory (read by :mod:`kvbudget.weights`).
EAGLE3 heads (:mod:`~kvbudget.architectures.eagle3`) are read
as their family's layers with their own weights; DFlash block drafts
(:mod:`~kvbudget.architectures.dflash`) by their own module, whatever their ``model_type``.

Adding a family is one module here, listed in :data:`ARCHITECTURES`, plus its preset
config and tests (the README's "Adding a model" section shows one).
"""

from __future__ import annotations

from types import MappingProxyType

from kvbudget.architectures import (
    deepseek,
    deepseek_v4,
    deepseek_v41,
    dflash,
    eagle,
    eagle3,
    gemma,
    gemma4,
    glm4_moe,
    gpt_oss,
    kimi_k3,
    kimi_linear,
    llama,
    llama4,
    minimax_m2,
    minimax_m3,
    nemotron_h,
    qwen,
    qwen3_next,
    step3p5,
)
from kvbudget.architectures.base import Architecture
from kvbudget.architectures.decoder import AttentionStyle, decoder_weights
from kvbudget.errors import UnsupportedArchitectureError
from kvbudget.inventory import Inventory, ModelFields, Weight
from kvbudget.model_spec import ModelSpec

ARCHITECTURES: tuple[Architecture, ...] = (
    *llama.ARCHITECTURES,
    *llama4.ARCHITECTURES,
    *qwen.ARCHITECTURES,
    *gemma.ARCHITECTURES,
    *gemma4.ARCHITECTURES,
    *gpt_oss.ARCHITECTURES,
    *minimax_m2.ARCHITECTURES,
    *minimax_m3.ARCHITECTURES,
    *deepseek.ARCHITECTURES,
    *deepseek_v4.ARCHITECTURES,
    *deepseek_v41.ARCHITECTURES,
    *glm4_moe.ARCHITECTURES,
    *qwen3_next.ARCHITECTURES,
    *kimi_linear.ARCHITECTURES,
    *kimi_k3.ARCHITECTURES,
    *nemotron_h.ARCHITECTURES,
    *step3p5.ARCHITECTURES,
)

BY_MODEL_TYPE: MappingProxyType[str, Architecture] = MappingProxyType(
    {t: arch for arch in ARCHITECTURES for t in arch.model_types}
)
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(BY_MODEL_TYPE))

# routed-expert fields: a generic decoder with any of them is not a plain Llama
_EXPERT_FIELDS = ("num_experts", "n_routed_experts", "num_local_experts")


def architecture_for(model_type: str) -> Architecture | None:
    """The registered architecture of ``model_type``, or None."""
    return BY_MODEL_TYPE.get(model_type)


def model_inventory(model: ModelSpec) -> tuple[Weight, ...]:
    """Every weight tensor of ``model``. Raises on architectures not modelled."""
    c = ModelFields(model)
    inv = Inventory()
    arch = architecture_for(model.model_type)
    if model.is_dflash:  # vLLM builds every DFlash draft as DFlashQwen3ForCausalLM
        dflash.weights(inv, c)
    elif model.is_head:
        if arch is None or not arch.draft_heads:
            raise UnsupportedArchitectureError(
                f"{model.name}: EAGLE heads are modelled for Llama-style configs, not "
                f"{model.model_type!r}",
                source=model.source,
                field="model_type",
            )
        if model.is_eagle3:
            eagle3.weights(inv, c, arch.attention)
        else:
            eagle.weights(inv, c, arch.attention)
    elif arch is not None:
        arch.weights(inv, c)
    elif model.assumed and not any(k in model.config for k in _EXPERT_FIELDS):
        # an unknown model_type read as a generic decoder: Llama's tensors
        decoder_weights(inv, c, AttentionStyle())
    else:
        raise UnsupportedArchitectureError(
            f"cannot count the weights of {model.name}: model_type {model.model_type!r} is "
            "not modelled",
            source=model.source,
            field="model_type",
        )
    return tuple(inv.weights)


def ties_embeddings(model: ModelSpec) -> bool:
    """Whether the lm_head is the embedding (``tie_word_embeddings``, else the family's
    default: Gemma ties)."""
    arch = architecture_for(model.model_type)
    default = arch.ties_embeddings if arch is not None else False
    return ModelFields(model).flag("tie_word_embeddings", default)


__all__ = [
    "ARCHITECTURES",
    "BY_MODEL_TYPE",
    "SUPPORTED_MODEL_TYPES",
    "Architecture",
    "architecture_for",
    "model_inventory",
    "ties_embeddings",
]
