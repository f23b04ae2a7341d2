"""Exact parameter counts of a checkpoint, by component: :func:`count_params`."""

from __future__ import annotations

from dataclasses import dataclass, fields

from kvbudget._validate import require_model
from kvbudget.architectures import model_inventory
from kvbudget.model_spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class ParamCounts:
    """Parameters the checkpoint stores, by component; exact integers, immutable.

    Every learned tensor is counted once: ``lm_head`` is 0 when the embeddings are tied;
    an EAGLE3 head counts no embeddings (engines share the target's, see
    :func:`count_params`); MTP layers count their own parts only (their embeddings and
    head are the main model's). Index maps (EAGLE3 ``d2t``) are not parameters.

    ``attention`` includes q/k norms, MLA latent norms, biases and sinks; ``recurrent``
    the Mamba2 / Gated DeltaNet mixers (their gated norms included); ``routers`` the
    router weights and biases, DeepSeek's ``e_score_correction_bias``, Qwen3-Next's
    shared-expert gate and Kimi K3's latent-MoE projections; ``norms`` the per-layer and
    final norms; ``mtp`` whole MTP layers; ``vision`` the vision tower and multimodal
    projector.
    """

    embeddings: int = 0
    lm_head: int = 0
    attention: int = 0
    recurrent: int = 0
    dense_mlp: int = 0
    routed_experts: int = 0
    shared_experts: int = 0
    routers: int = 0
    norms: int = 0
    eagle3_fc: int = 0
    mtp: int = 0
    vision: int = 0

    @property
    def total(self) -> int:
        """Every parameter of the checkpoint, MTP layers and vision tower included."""
        return sum(getattr(self, f.name) for f in fields(self))

    @property
    def language_model(self) -> int:
        """The parameters of the model proper: ``total`` less MTP layers and vision tower."""
        return self.total - self.mtp - self.vision


def count_params(model: ModelSpec) -> ParamCounts:
    """Exact parameter counts of ``model``'s checkpoint, by component. Pure.

    Counts follow the Hugging Face checkpoint layout of each architecture. An EAGLE3
    head counts its decoder layer, ``fc``, norms and lm_head but no embeddings (engines
    use the target's); MTP layers are counted under ``mtp`` without the embedding and
    head they share (DeepSeek's ``num_nextn_predict_layers``; Qwen3-Next checkpoints
    ship one MTP layer their config does not declare); a Gemma-3 checkpoint's vision
    tower and projector under ``vision``. ``ParamCounts.total`` counts all of them;
    ``language_model`` leaves out MTP and vision.

    Raises:
        UnsupportedArchitectureError: ``model_type`` is not one this module models.
        ConfigError: a field needed for the count is missing or malformed.
    """
    require_model("model", model)
    totals: dict[str, int] = {}
    for w in model_inventory(model):
        totals[w.component] = totals.get(w.component, 0) + w.num_params
    return ParamCounts(**totals)


__all__ = ["ParamCounts", "count_params"]
