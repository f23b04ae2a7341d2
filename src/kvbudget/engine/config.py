"""The decoder geometry the engine builds, read from a Hugging Face ``config.json``.

:func:`read_decoder_config` accepts a Llama-family config (``model_type`` llama or
mistral, ``LlamaForCausalLM``-style fields) or an EAGLE3 head config (an ``Eagle3``
architecture name, ``draft_vocab_size`` or ``eagle_config``). It is pure Python (no
torch), so the CLI can validate paths before importing torch.

Fields are read with the planner's own reader (:class:`~kvbudget.config_fields.ConfigFields`)
and the sliding-window layers are the planner's (:mod:`kvbudget.architectures.llama`: a
``layer_types`` list, else a uniform ``sliding_window`` unless ``use_sliding_window`` is
false), so the engine builds the layers the plan priced. A layer's window ``W`` means a
query at position ``p`` attends to keys ``p - W + 1 .. p``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbudget.architectures.llama import LLAMA
from kvbudget.config_fields import ConfigFields
from kvbudget.dtypes import normalize_dtype_name
from kvbudget.errors import ConfigError, UnsupportedArchitectureError
from kvbudget.layers import AttentionLayer

SUPPORTED_MODEL_TYPES = tuple(sorted(LLAMA.model_types))
# the dtypes the engine builds (kvbudget.dtypes names), and the speculation it runs
BUILT_DTYPES = ("fp32", "bf16", "fp16")
SPECS = ("none", "draft-target", "eagle3")


@dataclass(frozen=True, kw_only=True)
class Llama3RopeScaling:
    """``rope_scaling`` of type ``llama3`` (Llama 3.1): frequency-dependent rescaling."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True, kw_only=True)
class DecoderConfig:
    """One decoder (a target, a draft model or an EAGLE3 head), as its config gives it.

    ``layer_windows[i]`` is layer ``i``'s sliding window in tokens, or None for full
    attention. For an EAGLE3 head, ``num_layers`` is the head's decoder layers (one) and
    ``target_hidden_size`` the width of the target's hidden states it fuses (three of
    them, concatenated).
    """

    source: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: Llama3RopeScaling | None
    tie_word_embeddings: bool
    layer_windows: tuple[int | None, ...]
    dtype: str  # "fp32", "bf16" or "fp16"
    is_eagle3: bool = False
    target_hidden_size: int = 0

    @property
    def sliding_layers(self) -> tuple[int, ...]:
        """Indices of the layers with a sliding window."""
        return tuple(i for i, w in enumerate(self.layer_windows) if w is not None)


def config_file(path: str | Path) -> Path:
    """The ``config.json`` of ``path`` (a file, or a directory holding one).

    Raises ConfigError when there is none."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(
            "no config.json here; give a checkpoint directory or a config.json path",
            source=str(path),
        )
    return p


def read_decoder_config(path: str | Path) -> DecoderConfig:
    """Read the config at ``path`` (a ``config.json`` or a directory holding one).

    Raises:
        ConfigError: unreadable JSON or a missing / malformed field (names the field).
        UnsupportedArchitectureError: not a Llama-family decoder or EAGLE3 head, or a
            feature the engine does not build (biases, another rope type, a draft
            vocabulary different from the target's).
    """
    file = config_file(path)
    source = str(file)
    try:
        cfg = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the config: {exc}", source=source) from None
    if not isinstance(cfg, dict):
        raise ConfigError("the config is not a JSON object", source=source)
    return parse_decoder_config(cfg, source=source)


def _int(cfg: Mapping[str, Any], key: str, source: str, default: int | None = None) -> int:
    """A positive integer field (the planner's reader and its messages)."""
    return ConfigFields(cfg, source).int(key, default)


def _float(cfg: Mapping[str, Any], key: str, source: str, default: float) -> float:
    value = cfg.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"must be a positive number, got {value!r}", source=source, field=key)
    return float(value)


def parse_decoder_config(cfg: Mapping[str, Any], *, source: str) -> DecoderConfig:
    """:func:`read_decoder_config` on an already parsed JSON object. Pure."""
    arch = " ".join(str(a) for a in cfg.get("architectures") or []).lower()
    is_eagle3 = (
        "eagle3" in arch or "draft_vocab_size" in cfg or isinstance(cfg.get("eagle_config"), dict)
    )
    _refuse_unbuilt(cfg, source)
    hidden = _int(cfg, "hidden_size", source)
    heads = _int(cfg, "num_attention_heads", source)
    kv_heads = _int(cfg, "num_key_value_heads", source, heads)
    if heads % kv_heads:
        raise ConfigError(
            f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}",
            source=source,
            field="num_key_value_heads",
        )
    head_dim = cfg.get("head_dim") or hidden // heads
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim % 2:
        raise ConfigError(
            f"head_dim must be an even integer, got {head_dim!r}", source=source, field="head_dim"
        )
    num_layers = _int(cfg, "num_hidden_layers", source)
    vocab = _int(cfg, "vocab_size", source)
    if is_eagle3:
        draft_vocab = cfg.get("draft_vocab_size", vocab)
        if draft_vocab != vocab:
            raise UnsupportedArchitectureError(
                f"a draft vocabulary of {draft_vocab} tokens (the target's is {vocab}) needs "
                "the d2t token map, which the reference engine does not build",
                source=source,
                field="draft_vocab_size",
            )
    theta, scaling = _rope(cfg, source)
    target_hidden = cfg.get("target_hidden_size") or hidden
    if isinstance(cfg.get("eagle_config"), dict):
        target_hidden = cfg["eagle_config"].get("target_hidden_size") or target_hidden
    return DecoderConfig(
        source=source,
        hidden_size=hidden,
        intermediate_size=_int(cfg, "intermediate_size", source),
        num_layers=num_layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        max_position_embeddings=_int(cfg, "max_position_embeddings", source, 2048),
        rms_norm_eps=_float(cfg, "rms_norm_eps", source, 1e-6),
        rope_theta=theta,
        rope_scaling=scaling,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        layer_windows=_layer_windows(cfg, num_layers, source),
        dtype=_built_dtype(cfg, source),
        is_eagle3=is_eagle3,
        target_hidden_size=int(target_hidden) if is_eagle3 else 0,
    )


def _refuse_unbuilt(cfg: Mapping[str, Any], source: str) -> None:
    """UnsupportedArchitectureError for what the reference engine does not build: a
    model type outside the Llama family, biases, an activation other than silu."""
    model_type = cfg.get("model_type", "llama")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedArchitectureError(
            f"the reference engine builds Llama-family decoders "
            f"({', '.join(SUPPORTED_MODEL_TYPES)}), not {model_type!r}",
            source=source,
            field="model_type",
        )
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key, False):
            raise UnsupportedArchitectureError(
                "biases are not built by the reference engine", source=source, field=key
            )
    if cfg.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitectureError(
            f"only silu (SwiGLU) is built, got {cfg.get('hidden_act')!r}",
            source=source,
            field="hidden_act",
        )


def _rope(cfg: Mapping[str, Any], source: str) -> tuple[float, Llama3RopeScaling | None]:
    """RoPE's theta and its llama3 scaling (None: default RoPE); other types refused."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(params, dict):
        raise ConfigError("must be an object", source=source, field="rope_scaling")
    theta = _float({**cfg, **params}, "rope_theta", source, 10000.0)
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise UnsupportedArchitectureError(
            f"rope type {rope_type!r} is not built (default and llama3 are)",
            source=source,
            field="rope_scaling",
        )
    return theta, Llama3RopeScaling(
        factor=_float(params, "factor", source, 8.0),
        low_freq_factor=_float(params, "low_freq_factor", source, 1.0),
        high_freq_factor=_float(params, "high_freq_factor", source, 4.0),
        original_max_position_embeddings=_int(
            params, "original_max_position_embeddings", source, 8192
        ),
    )


def _built_dtype(cfg: Mapping[str, Any], source: str) -> str:
    """The config's dtype, normalised; refused unless float32, bfloat16 or float16."""
    dtype_name = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
    dtype = normalize_dtype_name(str(dtype_name))
    if dtype not in BUILT_DTYPES:
        raise UnsupportedArchitectureError(
            f"dtype {dtype_name!r} is not built (float32, bfloat16, float16 are)",
            source=source,
            field="torch_dtype",
        )
    return dtype


def _layer_windows(cfg: Mapping[str, Any], num_layers: int, source: str) -> tuple[int | None, ...]:
    """Each layer's sliding window (None: full attention), as the planner reads them."""
    layers = LLAMA.layers(ConfigFields(cfg, source))
    assert len(layers) == num_layers
    return tuple(x.sliding_window if isinstance(x, AttentionLayer) else None for x in layers)
