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

import difflib
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kvbudget.architectures import SUPPORTED_MODEL_TYPES, architecture_for
from kvbudget.architectures.decoder import attention_layers, uniform_window
from kvbudget.architectures.dflash import is_dflash
from kvbudget.architectures.dflash import layers as dflash_layers
from kvbudget.architectures.unmodelled import MARKER_FIELDS, UNMODELLED
from kvbudget.config_fields import MAX_CONFIG_COUNT, ConfigFields
from kvbudget.dtypes import normalize_dtype_name
from kvbudget.errors import (
    ConfigError,
    InvalidArgumentError,
    UnknownModelError,
    UnsupportedArchitectureError,
)
from kvbudget.layers import AttentionLayer, Layer
from kvbudget.model_spec import ModelSpec

if TYPE_CHECKING:
    from kvbudget.architectures.base import Architecture
    from kvbudget.checkpoint import Checkpoint

# a multimodal checkpoint's note on its vision weights, with and without headers
VISION_UNCOUNTED = (
    "its vision weights are not counted: add them with --weights-bytes for an exact budget"
)
VISION_FROM_HEADERS = "its vision weights are counted from its safetensors headers"

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


def load_model(name_or_path: str | Path, *, from_hub: bool = False) -> ModelSpec:
    """Load a model spec from a ``config.json``, a directory holding one, a preset id or a
    Hugging Face Hub id.

    Preset ids are Hugging Face ids, case-insensitive (``meta-llama/Llama-3.1-8B-Instruct``);
    the part after the slash also works when it is unique. A preset id wins over a folder
    of the same name in the working directory; write the path as ``./name`` (or absolute)
    to load the folder. Any other ``org/name`` (or ``org/name@revision``) that is no local
    path is read from the Hub (:mod:`kvbudget.hub`: its config files and safetensors
    headers, cached); ``from_hub=True`` reads an id from the Hub even when it is a preset.
    A local folder's safetensors headers are read too (``ModelSpec.checkpoint``).

    Raises:
        UnknownModelError: no such file, preset or Hub repository.
        HubAccessError: the Hub would not serve the repository (gated, private,
            rate-limited, unreachable) and no cached copy holds it.
        ConfigError: the file is not valid JSON, or a field is missing or bad.
        UnsupportedArchitectureError: the ``model_type`` is not one kvbudget models.
    """
    text = str(name_or_path)
    if not text.strip():
        raise UnknownModelError(
            "the model name is empty; pass a preset id (`kvbudget models`), a Hugging Face "
            "id (org/name) or a config path"
        )
    if not isinstance(from_hub, bool):
        raise InvalidArgumentError(f"from_hub must be True or False, got {from_hub!r}")
    if from_hub:
        return _from_hub(text, from_hub=True)
    explicit = isinstance(name_or_path, Path) or text.startswith(("/", "./", "../", "~"))
    # a preset id wins over a same-named folder of the working directory unless the path
    # is written as one (./name, /abs/name, ~/name)
    preset = None if explicit else _find_preset(text)
    path = Path(text).expanduser()
    if preset is None and path.is_dir():
        path = path / "config.json"
        if not path.is_file():
            raise UnknownModelError(f"directory {text!r} holds no config.json")
    if preset is None and path.is_file():
        spec = load_config_file(path, name=None)
        # an engine loads the checkpoint from the config's folder: its full path (the
        # folder's, not a symlinked config's target: a Hub snapshot links to its blobs)
        from kvbudget.checkpoint import local_checkpoint  # a folder's headers: on first use

        folder = path.parent.resolve()
        checkpoint = local_checkpoint(folder) if path.name == "config.json" else None
        return with_checkpoint(replace(spec, location=str(folder)), checkpoint)
    if preset is None and not explicit:
        from kvbudget import hub  # only a Hub id imports it (and huggingface_hub)

        if hub.is_hub_id(text):
            return _from_hub(text, from_hub=False)
    if preset is None:
        raise UnknownModelError(
            f"no config file and no built-in preset named {text!r}{_close_presets(text)} "
            "(`kvbudget models` lists the presets; a Hugging Face id is org/name)"
        )
    file_name = preset.replace("/", "--", 1) + ".json"
    raw = (_preset_dir() / file_name).read_text(encoding="utf-8")
    source = f"preset {preset}"
    return parse_config(_parse_json(raw, source), source=source, name=preset)


def _close_presets(text: str) -> str:
    """``"; did you mean A, B?"`` for presets close to ``text``, else ``""``."""
    close = difflib.get_close_matches(text, list_presets(), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _from_hub(text: str, *, from_hub: bool) -> ModelSpec:
    from kvbudget import hub

    try:
        return hub.load_hub_model(text)
    except UnknownModelError as exc:
        if from_hub or not _close_presets(text):
            raise
        raise UnknownModelError(f"{exc}{_close_presets(text)}") from None


def with_checkpoint(spec: ModelSpec, checkpoint: Checkpoint | None) -> ModelSpec:
    """``spec`` with the tensors of its safetensors headers (its notes saying so)."""
    if checkpoint is None:
        return spec
    notes = tuple(n.replace(VISION_UNCOUNTED, VISION_FROM_HEADERS) for n in spec.assumed)
    return replace(spec, checkpoint=checkpoint, assumed=notes)


def load_config_file(path: Path, *, name: str | None) -> ModelSpec:
    """The spec of a local ``config.json`` (or other config file) at ``path``, with the
    ``hf_quant_config.json`` beside it; named ``name``, else after its folder."""
    source = str(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"not UTF-8 text (byte {exc.start}); expected a JSON config", source=source
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot be read: {exc.strerror or exc}", source=source) from None
    if name is None:
        name = path.parent.name if path.name == "config.json" else path.stem
    cfg = _parse_json(raw, source)
    quant = path.parent / "hf_quant_config.json"
    if quant.is_file() and isinstance(cfg, Mapping) and "quantization_config" not in cfg:
        # ModelOpt checkpoints keep their quantization beside config.json (vLLM reads
        # it from there too): taken as the config's quantization_config
        cfg = {**cfg, "quantization_config": _parse_json(quant.read_text("utf-8"), str(quant))}
    return parse_config(cfg, source=source, name=name)


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

# --------------------------------------------------------------------------- parsing


def parse_config(cfg: Mapping[str, Any], *, source: str, name: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config mapping (already parsed JSON).

    The ``model_type`` picks the family module (:mod:`kvbudget.architectures`) that reads
    the cache layers; an unknown one is read as a generic decoder when its fields allow.
    Raises ConfigError / UnsupportedArchitectureError as :func:`load_model` does.
    """
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"expected a JSON object at the top level, got {cfg!r}", source=source)
    outer = ConfigFields(cfg, source)
    model_type = cfg.get("model_type")
    if model_type is None:
        raise outer.error("model_type", "required but missing (cannot tell the architecture)")
    if not isinstance(model_type, str):
        raise outer.error("model_type", f"expected a string, got {model_type!r}")
    _refuse_unmodelled(cfg, model_type, source)
    architectures = cfg.get("architectures") or []
    if not isinstance(architectures, list):
        raise outer.error("architectures", f"expected a list, got {architectures!r}")
    dtype_raw = cfg.get("torch_dtype", cfg.get("dtype"))
    arch = architecture_for(model_type)
    inner_cfg = cfg.get("text_config")
    if (
        arch is None
        and isinstance(inner_cfg, Mapping)
        and isinstance(inner_cfg.get("model_type"), str)
        and architecture_for(inner_cfg["model_type"]) is not None
    ):
        return _wrapped(cfg, inner_cfg, model_type, source=source, name=name)
    if arch is not None and model_type in arch.nested_types and not isinstance(inner_cfg, dict):
        raise outer.error("text_config", f"required for {model_type} but missing")
    text_cfg, prefix, dtype_raw, assumed = _text_config(cfg, arch, model_type, dtype_raw, name)
    f = ConfigFields(text_cfg, source, prefix)

    dflash_draft = is_dflash(cfg, architectures)
    if dflash_draft:
        layers = dflash_layers(f)
    elif arch is not None:
        layers = arch.layers(f)
    else:
        layers, assumed = _generic_layers(f, model_type, source)
    mtp_layers = () if dflash_draft else _mtp_layers(arch, f, len(layers), model_type)
    is_eagle3, is_eagle_head = (
        (False, False) if dflash_draft else _eagle_kind(cfg, architectures, name)
    )
    dtype = normalize_dtype_name(dtype_raw) if isinstance(dtype_raw, str) else None
    if isinstance(dtype_raw, str) and dtype is None:
        raise outer.error("torch_dtype", f"unknown dtype {dtype_raw!r}")
    hidden = f.int("hidden_size")
    ssm_raw = text_cfg.get(
        "mamba_ssm_cache_dtype",
        text_cfg.get("mamba_ssm_dtype", arch.ssm_state_dtype if arch else None),  # Qwen3.5's key
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
        is_eagle_head=is_eagle_head,
        is_dflash=dflash_draft,
        ssm_state_dtype=ssm_dtype,
        assumed=assumed,
        config=MappingProxyType(dict(text_cfg)),
        raw_config=MappingProxyType(dict(cfg)),
    )


def _text_config(
    cfg: Mapping[str, Any],
    arch: Architecture | None,
    model_type: str,
    dtype_raw: object,
    name: str,
) -> tuple[Mapping[str, Any], str, object, tuple[str, ...]]:
    """The mapping the cache layers are read from, its field prefix for messages, the
    dtype field (the text model's when the outer config has none) and the notes on what
    was assumed. A nested type reads ``text_config`` (the caller checks it is present)
    over the family's text defaults; a known family reads the config over its defaults.
    """
    inner_cfg = cfg.get("text_config")
    if arch is not None and model_type in arch.nested_types and isinstance(inner_cfg, dict):
        assumed: tuple[str, ...] = ()
        if arch.text_only_note:
            assumed = (
                f"{name}: the text model of a vision-language checkpoint; the vision "
                f"tower keeps no KV cache and {VISION_UNCOUNTED}",
            )
        dtype_raw = dtype_raw or inner_cfg.get("torch_dtype", inner_cfg.get("dtype"))
        return {**arch.text_defaults, **inner_cfg}, "text_config.", dtype_raw, assumed
    if arch is not None:
        return {**arch.text_defaults, **cfg}, "", dtype_raw, ()
    return cfg, "", dtype_raw, ()


def _mtp_layers(
    arch: Architecture | None, f: ConfigFields, start: int, model_type: str
) -> tuple[Layer, ...]:
    """The checkpoint's MTP layers, indexed from ``start``; a ``num_nextn_predict_layers``
    of a family whose MTP layers are not modelled is a ConfigError."""
    if arch is not None and arch.mtp_layers is not None:
        return arch.mtp_layers(f, start)
    if f.int("num_nextn_predict_layers", 0, minimum=0):
        raise f.error(
            "num_nextn_predict_layers",
            "MTP layers are modelled for DeepSeek, GLM, Qwen3-Next and Step-3.5 configs, "
            f"not {model_type!r}",
        )
    return ()


def _eagle_kind(cfg: Mapping[str, Any], architectures: list[Any], name: str) -> tuple[bool, bool]:
    """``(is_eagle3, is_eagle_head)`` of a config.

    EAGLE-1/2 heads: an Eagle architecture name (SGLang's LlamaForCausalLMEagle, vLLM's
    EagleLlamaForCausalLM) or, as vLLM's SpeculativeConfig detects them, "eagle-" in
    the model's name (yuhuili/EAGLE-LLaMA3-Instruct-8B ships LlamaForCausalLM).
    """
    arch_text = " ".join(str(a) for a in architectures).lower()
    is_eagle3 = (
        "eagle3" in arch_text
        or "draft_vocab_size" in cfg
        or isinstance(cfg.get("eagle_config"), dict)
    )
    return is_eagle3, not is_eagle3 and ("eagle" in arch_text or "eagle-" in name.lower())


def _refuse_unmodelled(cfg: Mapping[str, Any], model_type: str, source: str) -> None:
    """UnsupportedArchitectureError for a family kvbudget knows but does not model
    (:mod:`kvbudget.architectures.unmodelled`), at the top or in ``text_config``."""
    inner = cfg.get("text_config")
    inner_type = inner.get("model_type") if isinstance(inner, Mapping) else None
    for key, t in (("model_type", model_type), ("text_config.model_type", inner_type)):
        if isinstance(t, str) and t in UNMODELLED:
            raise UnsupportedArchitectureError(
                f"model_type {t!r} ({UNMODELLED[t]}) is not modelled yet; supported: "
                f"{', '.join(SUPPORTED_MODEL_TYPES)}",
                source=source,
                field=key,
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
        f"text_config (the vision tower keeps no KV cache); {VISION_UNCOUNTED}"
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
    *MARKER_FIELDS,
)


def _generic_layers(
    f: ConfigFields, model_type: str, source: str
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
    layers = attention_layers(f, uniform_window)
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


__all__ = [
    "MAX_CONFIG_COUNT",
    "SUPPORTED_MODEL_TYPES",
    "ModelSpec",
    "list_presets",
    "load_config_file",
    "load_model",
    "parse_config",
    "with_checkpoint",
]
