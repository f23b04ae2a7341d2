"""Model specs read from Hugging Face ``config.json`` files or built-in presets.

``load_model(name_or_path)`` returns an immutable :class:`ModelSpec`: the per-layer cache
geometry of a model, exactly as its config expresses it. It knows architectures, not
memory budgets (that is :mod:`kvbudget.cost`).

Supported families (``model_type``):

* Llama / Mistral / Qwen2 / Qwen3 / Qwen3-MoE: MHA, GQA, MQA; ``head_dim`` explicit or
  ``hidden_size / num_attention_heads``; a ``layer_types`` list where present, else the
  transformers default: a uniform ``sliding_window`` (Mistral) unless
  ``use_sliding_window`` is false; for Qwen2/Qwen3/Qwen3-MoE only when
  ``use_sliding_window`` is true (default false), and then only on layers
  ``i >= max_window_layers`` (default 28);
* Gemma-2 (alternating sliding/full by default) and Gemma-3 (``sliding_window_pattern``,
  default 6: five local layers then one global; config nested under ``text_config``);
* gpt-oss (``layer_types`` with ``sliding_attention`` / ``full_attention``; alternating,
  even layers sliding, when absent);
* DeepSeek-V2/V3 MLA, with ``num_nextn_predict_layers`` MTP layers kept apart as
  ``mtp_layers`` (draft layers, not part of the target's own cache);
* Qwen3-Next: Gated DeltaNet ``linear_attention`` layers, full attention every
  ``full_attention_interval`` layers;
* Nemotron-H: ``hybrid_override_pattern`` (``M`` Mamba2, ``*`` attention, ``-``/``E`` MLP);
* EAGLE3 draft heads: a one-layer Llama-style config (``draft_vocab_size``, an
  ``Eagle3`` architecture name or an ``eagle_config`` mark it).

A config that is malformed, incomplete or of an unknown architecture raises a
:class:`~kvbudget.errors.ConfigError` naming the file and the field.
"""

from __future__ import annotations

import builtins
import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

from kvbudget.dtypes import normalize_dtype_name
from kvbudget.errors import ConfigError, UnknownModelError, UnsupportedArchitectureError
from kvbudget.layers import (
    AttentionLayer,
    GatedDeltaNetLayer,
    Layer,
    Mamba2Layer,
    MLALayer,
    NoCacheLayer,
)

_QWEN = frozenset({"qwen2", "qwen3", "qwen3_moe"})
# MiniMax-M2: plain GQA on every layer (vLLM minimax_m2.py passes no window)
_LLAMA_LIKE = frozenset({"llama", "mistral", "gpt_oss", "minimax_m2"}) | _QWEN
_GEMMA = frozenset({"gemma2", "gemma3", "gemma3_text"})
# Kimi-K2 ships DeepseekV3ForCausalLM under its own model_type; DeepSeek-V3.2's MLA
# layers also keep a sparse-attention indexer key cache (not modelled: refused)
MLA_MODEL_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2"})
_MLA = MLA_MODEL_TYPES
# Qwen3.5: Qwen3-Next's hybrid text model inside a vision-language wrapper
# (``text_config``; vLLM qwen3_5.py builds its text layers as Qwen3-Next's)
QWEN35_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_moe", "qwen3_5_text", "qwen3_5_moe_text"})
_QWEN35 = QWEN35_MODEL_TYPES
_GATED_DELTANET = frozenset({"qwen3_next"}) | _QWEN35
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(
    sorted(_LLAMA_LIKE | _GEMMA | _MLA | _GATED_DELTANET | {"nemotron_h"})
)

# Recurrent (SSM) state dtype where the config names none (``mamba_ssm_cache_dtype``):
# Nemotron-H keeps its SSM state in float32 (vLLM's NemotronHForCausalLMConfig
# .DEFAULT_MAMBA_SSM_CACHE_DTYPE, vllm/model_executor/models/config.py, vllm 0.33.0);
# other models keep it in the model's dtype.
_SSM_STATE_DEFAULTS: Mapping[str, str] = MappingProxyType({"nemotron_h": "float32"})

# transformers' Gemma3TextConfig defaults for fields the gemma-3 checkpoints leave out
# (src/transformers/models/gemma3/configuration_gemma3.py).
_GEMMA3_TEXT_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {"vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window_pattern": 6}
)


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
    fields (weights).
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
    ssm_state_dtype: str | None = None
    location: str | None = None  # absolute folder of a local config; None for a preset
    assumed: tuple[str, ...] = ()  # what was assumed to read an unknown model_type
    config: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )
    raw_config: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), compare=False, repr=False
    )

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
                key = f"sliding({layer.sliding_window})"
            counts[key] = counts.get(key, 0) + 1
        parts = ", ".join(f"{n} {k}" for k, n in counts.items())
        extra = f", {len(self.mtp_layers)} mtp" if self.mtp_layers else ""
        tag = " [eagle3 head]" if self.is_eagle3 else ""
        return f"{self.name}: {parts}{extra}{tag}"


# --------------------------------------------------------------------------- presets


def _preset_dir() -> Path:
    # the package's own data folder (a plain path: importlib.resources costs 15 ms of
    # start-up, and the package is always installed as files)
    return Path(__file__).resolve().parent / "data" / "models"


def list_presets() -> tuple[str, ...]:
    """Hugging Face ids of the built-in model presets, sorted."""
    names = [
        p.name[: -len(".json")].replace("--", "/", 1)
        for p in _preset_dir().iterdir()
        if p.name.endswith(".json")
    ]
    return tuple(sorted(names))


def _find_preset(name: str) -> str | None:
    """The preset id matching ``name`` (case-insensitive; the part after '/' if unique)."""
    wanted = name.strip().lower()
    presets = list_presets()
    for preset in presets:
        if preset.lower() == wanted:
            return preset
    short = [p for p in presets if p.split("/", 1)[1].lower() == wanted]
    return short[0] if len(short) == 1 else None


def load_model(name_or_path: str | Path) -> ModelSpec:
    """Load a model spec from a ``config.json``, a directory holding one, or a preset id.

    Preset ids are Hugging Face ids, case-insensitive (``meta-llama/Llama-3.1-8B-Instruct``);
    the part after the slash also works when it is unique. A preset id wins over a folder
    of the same name in the working directory; write the path as ``./name`` (or absolute)
    to load the folder.

    Raises:
        UnknownModelError: no such file and no such preset.
        ConfigError: the file is not valid JSON, or a field is missing or bad.
        UnsupportedArchitectureError: the ``model_type`` is not one kvbudget models.
    """
    text = str(name_or_path)
    if not text.strip():
        raise UnknownModelError(
            "the model name is empty; pass a preset id (`kvbudget models`) or a config path"
        )
    explicit = isinstance(name_or_path, Path) or text.startswith(("/", "./", "../", "~"))
    # a preset id wins over a same-named folder of the working directory unless the path
    # is written as one (./name, /abs/name, ~/name)
    preset_first = None if explicit else _find_preset(text)
    path = Path(text).expanduser()
    if preset_first is None and path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise UnknownModelError(f"directory {text!r} holds no config.json")
    if preset_first is None and path.is_file():
        source = str(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"not UTF-8 text (byte {exc.start}); expected a JSON config", source=source
            ) from None
        except OSError as exc:
            raise ConfigError(f"cannot be read: {exc.strerror or exc}", source=source) from None
        name = path.parent.name if path.name == "config.json" else path.stem
        spec = parse_config(_parse_json(raw, source), source=source, name=name)
        # an engine loads the checkpoint from the config's folder: its full path
        return replace(spec, location=str(path.resolve().parent))
    preset = _find_preset(text)
    if preset is None:
        close = difflib.get_close_matches(text, list_presets(), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownModelError(
            f"no config file and no built-in preset named {text!r}{hint} "
            "(`kvbudget models` lists the presets)"
        )
    file_name = preset.replace("/", "--", 1) + ".json"
    raw = (_preset_dir() / file_name).read_text(encoding="utf-8")
    source = f"preset {preset}"
    return parse_config(_parse_json(raw, source), source=source, name=preset)


def _parse_json(raw: str, source: str) -> Mapping[str, Any]:
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ConfigError("nested too deeply to be a model config", source=source) from None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
            source=source,
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("expected a JSON object at the top level", source=source)
    return data


# --------------------------------------------------------------------------- field access

# No count in a real config comes near this (vocabularies are ~10^5-10^6, hidden sizes
# ~10^4, layers ~10^2); a larger one is a mistake that would otherwise make the planner
# build billions of layer objects.
MAX_CONFIG_COUNT = 10_000_000


class _Fields:
    """Typed access to a config's fields; every failure names the source and field."""

    def __init__(self, cfg: Mapping[str, Any], source: str, prefix: str = "") -> None:
        self.cfg = cfg
        self.source = source
        self.prefix = prefix

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, source=self.source, field=self.prefix + key)

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def int(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.cfg.get(key)
        if value is None:
            if default is None:
                raise self.error(key, "required but missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        if value > MAX_CONFIG_COUNT:
            raise self.error(
                key,
                f"{value} is more than any real model has (kvbudget reads counts up to "
                f"{MAX_CONFIG_COUNT:,})",
            )
        return value

    def str_list(self, key: str, length: builtins.int) -> list[str]:
        value = self.cfg.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings, got {value!r}")
        if len(value) != length:
            raise self.error(key, f"has {len(value)} entries but the model has {length} layers")
        return value


# --------------------------------------------------------------------------- parsing


def parse_config(cfg: Mapping[str, Any], *, source: str, name: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config mapping (already parsed JSON).

    Raises ConfigError / UnsupportedArchitectureError as :func:`load_model` does.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"expected a JSON object at the top level, got {cfg!r}", source=source)
    outer = _Fields(cfg, source)
    model_type = cfg.get("model_type")
    if model_type is None:
        raise outer.error("model_type", "required but missing (cannot tell the architecture)")
    if not isinstance(model_type, str):
        raise outer.error("model_type", f"expected a string, got {model_type!r}")
    architectures = cfg.get("architectures") or []
    if not isinstance(architectures, list):
        raise outer.error("architectures", f"expected a list, got {architectures!r}")
    dtype_raw = cfg.get("torch_dtype", cfg.get("dtype"))
    inner_cfg = cfg.get("text_config")
    if (
        model_type not in SUPPORTED_MODEL_TYPES
        and isinstance(inner_cfg, Mapping)
        and inner_cfg.get("model_type") in SUPPORTED_MODEL_TYPES
    ):
        return _wrapped(cfg, inner_cfg, model_type, source=source, name=name)
    text_cfg: Mapping[str, Any] = cfg
    prefix = ""
    if model_type == "gemma3":
        inner = cfg.get("text_config")
        if not isinstance(inner, dict):
            raise outer.error("text_config", "required for gemma3 but missing")
        text_cfg = {**_GEMMA3_TEXT_DEFAULTS, **inner}
        prefix = "text_config."
        dtype_raw = dtype_raw or inner.get("torch_dtype")
    elif model_type == "gemma3_text":
        text_cfg = {**_GEMMA3_TEXT_DEFAULTS, **cfg}
    elif model_type in ("qwen3_5", "qwen3_5_moe"):
        inner = cfg.get("text_config")
        if not isinstance(inner, dict):
            raise outer.error("text_config", f"required for {model_type} but missing")
        text_cfg = inner
        prefix = "text_config."
        dtype_raw = dtype_raw or inner.get("torch_dtype", inner.get("dtype"))
    f = _Fields(text_cfg, source, prefix)

    assumed: tuple[str, ...] = ()
    if model_type in _LLAMA_LIKE or model_type in _GEMMA:
        layers = _attention_layers(f, model_type)
    elif model_type in _MLA:
        layers = _mla_layers(f, f.int("num_hidden_layers"))
    elif model_type in _GATED_DELTANET:
        layers = _qwen3_next_layers(f)
        if model_type in ("qwen3_5", "qwen3_5_moe"):
            assumed = (
                f"{name}: the text model of a vision-language checkpoint; the vision "
                "tower keeps no KV cache and its weights are not counted (add them with "
                "--weights-bytes for an exact budget)",
            )
    elif model_type == "nemotron_h":
        layers = _nemotron_h_layers(f)
    else:
        layers, assumed = _generic_layers(f, model_type, source)

    mtp_layers = _mtp_layers(f, model_type, len(layers))

    arch_text = " ".join(str(a) for a in architectures).lower()
    is_eagle3 = (
        "eagle3" in arch_text
        or "draft_vocab_size" in cfg
        or isinstance(cfg.get("eagle_config"), dict)
    )
    dtype = normalize_dtype_name(dtype_raw) if isinstance(dtype_raw, str) else None
    if isinstance(dtype_raw, str) and dtype is None:
        raise outer.error("torch_dtype", f"unknown dtype {dtype_raw!r}")
    hidden = f.int("hidden_size")
    ssm_raw = text_cfg.get(
        "mamba_ssm_cache_dtype",
        text_cfg.get("mamba_ssm_dtype", _SSM_STATE_DEFAULTS.get(model_type)),  # Qwen3.5's key
    )
    ssm_dtype = normalize_dtype_name(ssm_raw) if isinstance(ssm_raw, str) else None
    if isinstance(ssm_raw, str) and ssm_dtype is None:
        raise outer.error("mamba_ssm_cache_dtype", f"unknown dtype {ssm_raw!r}")
    return ModelSpec(
        name=name,
        source=source,
        model_type=model_type,
        architectures=tuple(str(a) for a in architectures),
        dtype=dtype,
        max_position_embeddings=f.int("max_position_embeddings"),
        vocab_size=f.int("vocab_size"),
        hidden_size=hidden,
        num_attention_heads=f.int("num_attention_heads"),
        layers=tuple(layers),
        mtp_layers=mtp_layers,
        is_eagle3=is_eagle3,
        ssm_state_dtype=ssm_dtype,
        assumed=assumed,
        config=MappingProxyType(dict(text_cfg)),
        raw_config=MappingProxyType(dict(cfg)),
    )


def _wrapped(
    cfg: Mapping[str, Any], inner: Mapping[str, Any], model_type: str, *, source: str, name: str
) -> ModelSpec:
    """A multimodal wrapper (``llava``, ``mistral3``, ...) whose ``text_config`` is a
    model kvbudget reads: its text model, with a note. Vision towers and projectors keep
    no KV cache; their weights are not counted."""
    text = dict(inner)
    for key in ("torch_dtype", "dtype", "quantization_config"):
        if key not in text and key in cfg:
            text[key] = cfg[key]
    spec = parse_config(text, source=f"{source} (text_config)", name=name)
    note = (
        f"model_type {model_type!r} wraps a {inner['model_type']} text model: planned from "
        "text_config (the vision tower keeps no KV cache); its vision weights are not "
        "counted: add them with --weights-bytes for an exact budget"
    )
    # the text model's type stays: layers, weights and engines follow it
    return replace(spec, source=source, assumed=(*spec.assumed, note))


# fields that say a decoder is not plain attention: the generic reader refuses them
_NON_STANDARD_FIELDS = (
    ("kv_lora_rank", "multi-head latent attention (MLA)"),
    ("linear_num_value_heads", "gated delta-net (linear attention) layers"),
    ("mamba_num_heads", "Mamba layers"),
    ("ssm_state_size", "state-space (Mamba) layers"),
    ("hybrid_override_pattern", "a hybrid layer pattern"),
    ("attention_chunk_size", "chunked local attention"),
    ("text_config", "a nested text model (a multimodal wrapper)"),
)


def _generic_layers(
    f: _Fields, model_type: str, source: str
) -> tuple[list[Layer], tuple[str, ...]]:
    """An unknown ``model_type`` read as a plain decoder from the standard fields, with
    what was assumed; a field the standard reading cannot honour is an error naming it."""
    for key, what in _NON_STANDARD_FIELDS:
        if f.has(key):
            raise UnsupportedArchitectureError(
                f"model_type {model_type!r} is not one kvbudget models, and its config has "
                f"{key!r} ({what}), which a generic decoder cannot read; supported: "
                f"{', '.join(SUPPORTED_MODEL_TYPES)}",
                source=source,
                field=key,
            )
    if not f.has("num_hidden_layers") or not f.has("num_attention_heads"):
        missing = "num_hidden_layers" if not f.has("num_hidden_layers") else "num_attention_heads"
        raise UnsupportedArchitectureError(
            f"model_type {model_type!r} is not supported (supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}), and without {missing!r} it cannot be read "
            "as a generic decoder",
            source=source,
            field=missing,
        )
    layers = _attention_layers(f, model_type)
    first = layers[0]
    assert isinstance(first, AttentionLayer)
    kv_note = (
        f"num_key_value_heads {first.num_kv_heads}"
        if f.has("num_key_value_heads")
        else f"num_key_value_heads missing: {first.num_kv_heads} (= num_attention_heads)"
    )
    head_note = (
        f"head_dim {first.head_dim}"
        if f.has("head_dim")
        else f"head_dim missing: {first.head_dim} (= hidden_size / num_attention_heads)"
    )
    windows = sum(1 for x in layers if isinstance(x, AttentionLayer) and x.sliding_window)
    window_note = f"{windows} sliding-window layers" if windows else "no sliding window"
    return layers, (
        f"model_type {model_type!r} is not one kvbudget models: read as a generic decoder, "
        f"{len(layers)} attention layers ({kv_note}, {head_note}, {window_note}); check "
        "them against the model's code",
    )


def _mtp_layers(f: _Fields, model_type: str, start: int) -> tuple[Layer, ...]:
    """MTP draft layers shipped with the checkpoint, indexed after the model's layers.

    DeepSeek: ``num_nextn_predict_layers`` MLA layers. Qwen3-Next: its checkpoint ships
    one full-attention MTP layer (``mtp.*`` tensors) and its config names no count, so
    ``num_nextn_predict_layers`` defaults to 1 there, as in vLLM's Qwen3-Next MTP model.
    """
    if model_type in _GATED_DELTANET:
        # Qwen3.5 names the count (mtp_num_hidden_layers); Qwen3-Next does not
        key = (
            "mtp_num_hidden_layers"
            if f.has("mtp_num_hidden_layers")
            else "num_nextn_predict_layers"
        )
        count = f.int(key, 1, minimum=0)
        kv_heads, head_dim = f.int("num_key_value_heads"), _head_dim(f)
        return tuple(
            AttentionLayer(index=start + i, num_kv_heads=kv_heads, head_dim=head_dim)
            for i in range(count)
        )
    count = f.int("num_nextn_predict_layers", 0, minimum=0)
    if count and model_type not in _MLA:
        raise f.error(
            "num_nextn_predict_layers",
            f"MTP layers are modelled for DeepSeek and Qwen3-Next configs, not {model_type!r}",
        )
    return tuple(_mla_layers(f, count, start)) if count else ()


def _head_dim(f: _Fields, key: str = "head_dim") -> int:
    if f.has(key):
        return f.int(key)
    hidden = f.int("hidden_size")
    heads = f.int("num_attention_heads")
    if hidden % heads:
        raise f.error(
            key,
            f"missing, and hidden_size {hidden} is not divisible by num_attention_heads {heads}",
        )
    return hidden // heads


def _sliding_flags(f: _Fields, model_type: str, num_layers: int) -> list[bool]:
    """Which layers use the sliding window, as the config (and transformers) defines it."""
    if f.has("layer_types"):
        types = f.str_list("layer_types", num_layers)
        known = {"full_attention", "sliding_attention"}
        for i, t in enumerate(types):
            if t not in known:
                raise f.error("layer_types", f"entry {i} is {t!r}; expected one of {sorted(known)}")
        return [t == "sliding_attention" for t in types]
    if model_type in ("gemma2", "gpt_oss"):
        return [(i + 1) % 2 == 1 for i in range(num_layers)]
    if model_type in ("gemma3", "gemma3_text"):
        pattern = f.int("sliding_window_pattern")
        return [(i + 1) % pattern != 0 for i in range(num_layers)]
    if model_type in _QWEN:
        if not (f.has("sliding_window") and f.cfg.get("use_sliding_window", False) is True):
            return [False] * num_layers
        first = f.int("max_window_layers", 28, minimum=0)
        return [i >= first for i in range(num_layers)]
    uses_window = f.has("sliding_window") and f.cfg.get("use_sliding_window", True) is not False
    return [uses_window] * num_layers


def _attention_layers(f: _Fields, model_type: str) -> list[Layer]:
    num_layers = f.int("num_hidden_layers")
    heads = f.int("num_attention_heads")
    kv_heads = f.int("num_key_value_heads", heads)
    if heads % kv_heads:
        raise f.error(
            "num_key_value_heads", f"{kv_heads} does not divide num_attention_heads {heads}"
        )
    head_dim = _head_dim(f)
    flags = _sliding_flags(f, model_type, num_layers)
    window = f.int("sliding_window") if any(flags) else None
    return [
        AttentionLayer(
            index=i,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            sliding_window=window if sliding else None,
        )
        for i, sliding in enumerate(flags)
    ]


def _mla_layers(f: _Fields, num_layers: int, start: int = 0) -> list[Layer]:
    rank = f.int("kv_lora_rank")
    rope = f.int("qk_rope_head_dim")
    indexer = f.int("index_head_dim", 0, minimum=0)  # DeepSeek-V3.2's sparse attention
    return [
        MLALayer(index=start + i, kv_lora_rank=rank, qk_rope_head_dim=rope, index_head_dim=indexer)
        for i in range(num_layers)
    ]


def _qwen3_next_layers(f: _Fields) -> list[Layer]:
    num_layers = f.int("num_hidden_layers")
    if f.has("layer_types"):
        types = f.str_list("layer_types", num_layers)
    else:
        interval = f.int("full_attention_interval")
        types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(num_layers)
        ]
    kv_heads = f.int("num_key_value_heads")
    head_dim = _head_dim(f)
    layers: list[Layer] = []
    for i, t in enumerate(types):
        if t == "full_attention":
            layers.append(AttentionLayer(index=i, num_kv_heads=kv_heads, head_dim=head_dim))
        elif t == "linear_attention":
            layers.append(
                GatedDeltaNetLayer(
                    index=i,
                    num_k_heads=f.int("linear_num_key_heads"),
                    num_v_heads=f.int("linear_num_value_heads"),
                    k_head_dim=f.int("linear_key_head_dim"),
                    v_head_dim=f.int("linear_value_head_dim"),
                    conv_kernel=f.int("linear_conv_kernel_dim"),
                )
            )
        else:
            raise f.error(
                "layer_types", f"entry {i} is {t!r}; expected full_attention or linear_attention"
            )
    return layers


def _nemotron_h_layers(f: _Fields) -> list[Layer]:
    num_layers = f.int("num_hidden_layers")
    pattern = f.cfg.get("hybrid_override_pattern")
    if not isinstance(pattern, str):
        raise f.error("hybrid_override_pattern", "required but missing")
    if len(pattern) != num_layers:
        raise f.error(
            "hybrid_override_pattern",
            f"has {len(pattern)} characters but num_hidden_layers is {num_layers}",
        )
    layers: list[Layer] = []
    for i, ch in enumerate(pattern):
        if ch == "M":
            layers.append(
                Mamba2Layer(
                    index=i,
                    num_heads=f.int("mamba_num_heads"),
                    head_dim=f.int("mamba_head_dim"),
                    n_groups=f.int("n_groups"),
                    ssm_state_size=f.int("ssm_state_size"),
                    conv_kernel=f.int("conv_kernel"),
                )
            )
        elif ch == "*":
            head_dim = f.int("attention_head_dim") if f.has("attention_head_dim") else _head_dim(f)
            layers.append(
                AttentionLayer(
                    index=i, num_kv_heads=f.int("num_key_value_heads"), head_dim=head_dim
                )
            )
        elif ch in "-E":
            layers.append(NoCacheLayer(index=i))
        else:
            raise f.error(
                "hybrid_override_pattern",
                f"character {i} is {ch!r}; expected M (Mamba2), * (attention), - (MLP) or E (MoE)",
            )
    return layers
