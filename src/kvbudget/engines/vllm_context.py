"""vLLM's longest ``--max-model-len`` for a model, and the variable that lifts it.

vLLM derives a maximum from the (text) config and refuses a longer ``--max-model-len``
at start-up unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` ("User-specified max_model_len
(...) is greater than the derived max_model_len (...)"). The rule, in both releases
kvbudget models (``vllm-project/vllm`` PyPI wheels 0.33.0 and 0.29.0,
``vllm/config/model.py`` ``_get_and_verify_max_len`` and
``vllm/transformers_utils/model_arch_config_convertor.py``
``ModelArchConfigConvertorBase.derive_max_model_len_and_key``):

* the smallest of the length keys the config holds (:data:`LENGTH_KEYS`, in vLLM's
  order; the first key holding that value names it), or 2048 when it holds none; a
  ``model_max_length`` replaces it outright (the Command-R rule);
* times the rope ``factor`` of the last rope parameters whose type scales the length
  (every type but :attr:`LengthRule.unscaled_rope_types`); none for a ``gemma3`` model
  type, whose length is already scaled; in 0.29.0 a ``yarn`` rope first resets the
  length to its ``original_max_position_embeddings`` (0.33.0 leaves yarn unscaled);
* a requested length above it (and above ``model_max_length`` when set) is refused.

The tokenizer's ``model_max_length`` counts only for pooling models with absolute
position embeddings (``ModelConfig.get_and_verify_max_len``), which kvbudget does not plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
# derive_max_model_len_and_key's possible_keys, in its order
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
DEFAULT_MAX_LEN = 2048  # _get_and_verify_max_len: a config with none of the keys


@dataclass(frozen=True, kw_only=True)
class LengthRule:
    """What differs between vLLM releases in deriving the maximum.

    ``unscaled_rope_types``: rope types whose ``factor`` is not applied (0.33.0 adds the
    yarn family to 0.29.0's su / longrope / llama3). ``yarn_from_original``: a yarn rope
    resets the length to its ``original_max_position_embeddings`` before the factor
    (0.29.0). ``config_defaults``: length keys a release's own config class sets when the
    checkpoint's config lacks them, by model type (0.29.0's ``Step3p5Config``,
    ``vllm/transformers_utils/configs/step3p5.py``: ``max_seq_len=4096``).
    """

    unscaled_rope_types: frozenset[str]
    yarn_from_original: bool = False
    config_defaults: Mapping[str, Mapping[str, int]] = field(
        default_factory=lambda: MappingProxyType({})
    )


@dataclass(frozen=True)
class DerivedLength:
    """vLLM's derived maximum for one model: ``tokens`` (a float, as vLLM keeps it: a
    rope factor may scale it), the key it came from, and ``model_max_length`` when the
    config sets one (a request up to it is allowed)."""

    tokens: float
    key: str | None
    model_max_length: int | None = None

    def refuses(self, max_model_len: int) -> bool:
        """Whether vLLM refuses ``max_model_len`` without :data:`ALLOW_LONG_ENV`."""
        if max_model_len <= self.tokens:
            return False
        return self.model_max_length is None or max_model_len > self.model_max_length

    def text(self) -> str:
        """The maximum and the key it came from (``max_seq_len=4096``)."""
        tokens = float(self.tokens)
        return f"{self.key}={int(tokens) if tokens.is_integer() else tokens}"


def derived_length(config: Mapping[str, Any], model_type: str, rule: LengthRule) -> DerivedLength:
    """vLLM's derived maximum of the text config ``config`` (see the module docstring)."""
    values = {**rule.config_defaults.get(model_type, {}), **config}
    tokens: float = math.inf
    key: str | None = None
    for name in LENGTH_KEYS:
        value = values.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < tokens:
                key = name
            tokens = min(tokens, value)
    model_max = values.get("model_max_length")
    if model_max:
        tokens, key = model_max, "model_max_length"
    if tokens == math.inf:
        tokens = DEFAULT_MAX_LEN
    if "gemma3" not in model_type:
        tokens = _scaled(tokens, values, rule)
    return DerivedLength(tokens, key, int(model_max) if model_max else None)


def _scaled(tokens: float, config: Mapping[str, Any], rule: LengthRule) -> float:
    factor: float = 1.0
    for params in _rope_parameters(config):
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type in rule.unscaled_rope_types:
            continue
        factor = params.get("factor", factor)
        if rule.yarn_from_original and rope_type == "yarn":
            tokens = _yarn_original(params, config)
    return tokens * (1.0 if factor is None else factor)


def _yarn_original(params: Mapping[str, Any], config: Mapping[str, Any]) -> float:
    """A yarn rope's pretraining length as transformers 5 fills it in
    (``RotaryEmbeddingConfigMixin.standardize_rope_params``: the config's own
    ``original_max_position_embeddings`` first, then the rope's, then
    ``max_position_embeddings``)."""
    for value in (
        config.get("original_max_position_embeddings"),
        params.get("original_max_position_embeddings"),
        config.get("max_position_embeddings"),
    ):
        if value is not None:
            return float(value)
    return float(DEFAULT_MAX_LEN)


def _rope_parameters(config: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The config's rope parameters, one mapping per layer type when nested
    (``iter_rope_parameters``: ``rope_parameters``, which transformers 5 fills from
    ``rope_scaling``)."""
    params = config.get("rope_parameters") or config.get("rope_scaling")
    if not isinstance(params, Mapping) or not params:
        return
    nested = [p for p in params.values() if isinstance(p, Mapping)]
    if nested and len(nested) == len(params):
        yield from (p for p in nested if p)
    else:
        yield params


def long_length_warning(length: DerivedLength, max_model_len: int) -> str:
    """The plan's warning when vLLM would refuse ``max_model_len`` for ``length``."""
    return (
        f"vLLM refuses --max-model-len {max_model_len:,} above the model's derived maximum "
        f"({length.text()} in its config.json) unless {ALLOW_LONG_ENV}=1, which the "
        "command sets; positions past the maximum give NaN with RoPE (vLLM's caution): "
        f"lower --max-seq-len to {int(length.tokens):,} to stay inside it"
    )


__all__ = [
    "ALLOW_LONG_ENV",
    "DEFAULT_MAX_LEN",
    "LENGTH_KEYS",
    "DerivedLength",
    "LengthRule",
    "derived_length",
    "long_length_warning",
]
