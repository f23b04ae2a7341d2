"""SGLang's longest ``--context-length`` for a model, and the variable that lifts it.

SGLang derives a context length from each model's (text) config and refuses a longer
``--context-length`` unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``: for the
target ("User-specified context_length (...) is greater than the derived
context_length (...)") and for a draft with its own config ("Target model's
context_length ..."). SGLang 0.5.23's PyPI wheel, ``srt/configs/model_config.py``
``ModelConfig._derive_context_length`` and ``srt/utils/hf_transformers/common.py``
``get_context_length``:

* the first of :data:`CONTEXT_LENGTH_KEYS` the config holds (2048 when none),
* times the rope ``factor`` unless the rope parameters hold
  ``original_max_position_embeddings`` or are ``llama3``. SGLang runs on transformers 5,
  whose ``rope_scaling`` is the standardized ``rope_parameters``: ``standardize_rope_params``
  gives every llama3, yarn and longrope rope an ``original_max_position_embeddings``,
  so those keep their length; per-layer (nested) parameters have no top-level factor,
  and the config classes of :data:`NESTED_ROPE_MODEL_TYPES` nest even a flat
  ``rope_scaling`` (Gemma-3's linear factor 8 is not applied: 131,072).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment

ALLOW_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)
DEFAULT_CONTEXT_LENGTH = 2048
# fields SGLang's own config classes fill in when a checkpoint's config leaves them out,
# by model_type: configs/step3p5.py Step3p5Config.__init__ (max_seq_len=128000, read
# before max_position_embeddings)
CONFIG_DEFAULTS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {"step3p5": MappingProxyType({"max_seq_len": 128_000})}
)
# ropes transformers 5 gives an original_max_position_embeddings (no factor in SGLang)
_UNSCALED_ROPES = frozenset({"llama3", "yarn", "longrope"})
# model types whose transformers 5.19 config class keeps rope parameters per layer type
# (``convert_rope_params_to_dict``: a flat ``rope_scaling`` goes into
# ``rope_parameters["full_attention"]``), so SGLang's ``rope_scaling.get("factor", 1)``
# finds no factor: models/gemma3, gemma3n, gemma4, olmo3, mimo_v2_flash, laguna
NESTED_ROPE_MODEL_TYPES = frozenset(
    {
        "gemma3",
        "gemma3_text",
        "gemma3n",
        "gemma3n_text",
        "gemma4",
        "gemma4_text",
        "olmo3",
        "mimo_v2_flash",
        "laguna",
    }
)


def derived_context_length(config: Mapping[str, Any], model_type: str = "") -> int:
    """SGLang's derived context length of the text config ``config`` of ``model_type``
    (with SGLang's own config-class defaults, :data:`CONFIG_DEFAULTS`, where it lacks them)."""
    config = {**CONFIG_DEFAULTS.get(model_type, {}), **config}
    factor: float = 1
    rope = config.get("rope_parameters") or config.get("rope_scaling")
    if isinstance(rope, Mapping) and rope and model_type not in NESTED_ROPE_MODEL_TYPES:
        rope_type = rope.get("rope_type", rope.get("type"))
        if "original_max_position_embeddings" not in rope and rope_type not in _UNSCALED_ROPES:
            factor = rope.get("factor", 1)
    for key in CONTEXT_LENGTH_KEYS:
        value = config.get(key)
        if value is not None:
            return int(factor * value)
    return DEFAULT_CONTEXT_LENGTH


@dataclass(frozen=True)
class ContextCheck:
    """The target's derived context length, and the environment (``env.NAME``
    settings) and warnings a plan needs when its ``--context-length`` exceeds it or a
    sidecar draft's."""

    target_tokens: int
    environment: Mapping[str, str]
    warnings: tuple[str, ...]


def context_check(d: Deployment) -> ContextCheck:
    """SGLang's context checks for ``d`` (see :class:`ContextCheck`)."""
    warnings = []
    target = derived_context_length(d.target.config, d.target.model_type)
    if d.max_seq_len > target:
        warnings.append(
            f"SGLang refuses --context-length {d.max_seq_len:,} above {d.target.name}'s "
            f"derived context length {target:,} unless {ALLOW_LONGER_CONTEXT_ENV}=1, which "
            "the command sets (configs/model_config.py _derive_context_length); outputs past "
            f"it may be wrong: lower --max-seq-len to {target:,} to stay inside it"
        )
    # an MTP draft is the target's own config
    if d.draft is not None and d.spec.name != "mtp":
        draft = derived_context_length(d.draft.config, d.draft.model_type)
        if d.max_seq_len > draft:
            warnings.append(
                f"SGLang refuses --context-length {d.max_seq_len:,} for a draft trained on "
                f"{draft:,} positions unless {ALLOW_LONGER_CONTEXT_ENV}=1, which the "
                "command sets (configs/model_config.py _derive_context_length)"
            )
    environment = {f"env.{ALLOW_LONGER_CONTEXT_ENV}": "1"} if warnings else {}
    return ContextCheck(target, MappingProxyType(environment), tuple(warnings))


__all__ = [
    "ALLOW_LONGER_CONTEXT_ENV",
    "CONTEXT_LENGTH_KEYS",
    "DEFAULT_CONTEXT_LENGTH",
    "NESTED_ROPE_MODEL_TYPES",
    "ContextCheck",
    "context_check",
    "derived_context_length",
]
