"""Quantization formats of checkpoints: the bytes a quantized linear takes.

:func:`quantization` reads a model's ``quantization_config`` (native FP8, MXFP4, ModelOpt
NVFP4, AWQ, GPTQ, compressed-tensors) into a :class:`Quant`: which inventory tensors it
converts (:meth:`Quant.converts`) and their bytes (:meth:`Quant.bytes_for`). The table of
formats is in :mod:`kvbudget.weights`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from kvbudget.errors import ConfigError
from kvbudget.inventory import Weight, top_config
from kvbudget.model_spec import ModelSpec

EXCLUDE_KEYS = ("modules_to_not_convert", "ignored_layers", "ignore", "exclude_modules")
# DeepseekV4FP8Config (vLLM 0.33.0 models/deepseek_v4/quant_config.py and
# models/deepseek_v41/quant_config.py: override_quantization_method claims fp8 checkpoints
# of these model types)
DEEPSEEK_V4_TYPES = ("deepseek_v4", "deepseek_v41")


@dataclass(frozen=True, kw_only=True)
class Quant:
    """The checkpoint's storage format for quantized linears."""

    method: Literal["none", "fp8", "mxfp4", "nvfp4", "awq", "gptq", "int8"]
    block: tuple[int, int] | None = None  # fp8 weight_block_size
    excluded: tuple[str, ...] = ()
    group: int = 0  # int4 (awq, gptq): input values per scale; 0 = one group per row
    channel_scales: bool = False  # fp8 / int8: one scale per output row, else one
    scale_bytes: int = 4  # bytes of one fp8 / int8 scale as stored
    input_scale: bool = False  # a static activation scale per linear
    packed_shape: bool = False  # compressed-tensors pack-quantized: weight_shape int64 [2]
    zeros: bool = True  # int4 zero points stored (awq, gptq; not compressed-tensors')
    g_idx: bool = False  # gptq act-order: int32 [in]
    name: str = ""  # the label when it is not the method's (compressed-tensors schemes)
    block_scale_bytes: int = 4  # fp8 block scales: float32, or UE8M0 (1 byte)
    expert_method: Literal["mxfp4"] | None = None  # routed experts' own format, if any

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        if self.method == "fp8" and self.block is not None:
            experts = f"+{self.expert_method}-experts" if self.expert_method else ""
            return f"fp8-block{self.block[0]}x{self.block[1]}{experts}"
        if self.method in ("awq", "gptq"):
            return f"{self.method}-int4-g{self.group or 'row'}"
        return self.method

    def for_weight(self, w: Weight) -> Quant:
        """The format ``w`` is stored in: ``expert_method``'s for a routed expert, if set."""
        if self.expert_method is not None and w.expert:
            return Quant(method=self.expert_method, excluded=self.excluded)
        return self

    def converts(self, w: Weight) -> bool:
        """Whether this checkpoint stores ``w`` quantized."""
        if self.method == "none" or not w.linear:
            return False
        if self.method == "mxfp4" and not w.expert:
            return False
        return not excluded(w.name, self.excluded)

    def bytes_for(self, rows: int, cols: int) -> int:
        """Bytes of one quantized ``rows x cols`` weight (input dim = cols)."""
        if self.method in ("awq", "gptq"):
            # int4 values packed 8 per int32 (rows x cols / 2 bytes), fp16 scales per
            # group of inputs and output, int4 zero points packed alike (vLLM awq.py,
            # gptq.py; compressed-tensors' symmetric pack-quantized stores no zeros but an
            # int64 [2] weight_shape), gptq act-order's g_idx int32 per input
            groups = -(-cols // self.group) if self.group else 1
            packed = cols * -(-rows // 8) if self.method == "awq" else rows * -(-cols // 8)
            total = packed * 4 + groups * rows * 2
            if self.zeros:
                total += groups * -(-rows // 8) * 4
            if self.g_idx:
                total += 4 * cols
            if self.packed_shape:
                total += 16
            return total
        if self.method in ("fp8", "int8") and self.block is None:
            scales = rows if self.channel_scales else 1
            return rows * cols + self.scale_bytes * (scales + (1 if self.input_scale else 0))
        if self.method == "fp8":
            assert self.block is not None
            b0, b1 = self.block
            return rows * cols + self.block_scale_bytes * -(-rows // b0) * -(-cols // b1)
        if self.method == "mxfp4":
            return rows * -(-cols // 32) * (16 + 1)
        # nvfp4: packed nibbles + an fp8 scale per 16 values + weight_scale_2, input_scale
        return rows * (-(-cols // 2) + -(-cols // 16)) + 8


def excluded(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` or a dotted prefix of it matches a glob of ``patterns``.

    ``model.layers.*.self_attn`` matches ``model.layers.3.self_attn.q_proj``; a plain
    word (``lm_head``, ``gate``) matches any dotted component run equal to it.
    """
    parts = name.split(".")
    prefixes = [".".join(parts[:k]) for k in range(1, len(parts) + 1)]
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
            return True
        if "*" not in pattern and f".{pattern}." in f".{name}.":
            return True
    return False


def compressed_tensors(qc: Mapping[str, Any], excluded: tuple[str, ...], source: str) -> Quant:
    """A ``compressed-tensors`` checkpoint with one scheme for its Linear layers (the
    layouts of vLLM's compressed_tensors schemes and the compressed-tensors library:
    scales stored in the model dtype, 2 bytes, except NVFP4's fp8/fp32 ones)."""

    def refuse(why: str, field: str = "config_groups") -> ConfigError:
        return ConfigError(
            f"compressed-tensors {why}; pass the weight bytes explicitly instead",
            source=source,
            field=f"quantization_config.{field}",
        )

    groups = qc.get("config_groups")
    if not isinstance(groups, Mapping) or len(groups) != 1:
        raise refuse(f"with {0 if not isinstance(groups, Mapping) else len(groups)} schemes "
                     "is not modelled (one scheme for every Linear is)")  # fmt: skip
    (scheme,) = groups.values()
    weights = scheme.get("weights") if isinstance(scheme, Mapping) else None
    if not isinstance(weights, Mapping):
        raise refuse("scheme has no weights block")
    bits, kind = weights.get("num_bits"), weights.get("type")
    strategy = weights.get("strategy")
    fmt = str(qc.get("format", ""))
    acts = scheme.get("input_activations")
    static = isinstance(acts, Mapping) and acts.get("dynamic") is False
    if fmt == "nvfp4-pack-quantized" or (bits == 4 and kind == "float"):
        return Quant(method="nvfp4", excluded=excluded, name="compressed-tensors-nvfp4")
    if bits == 4 and kind == "int" and strategy in ("group", "channel"):
        if weights.get("symmetric") is False:
            raise refuse("asymmetric int4 (zero points) is not modelled", "config_groups.weights")
        group = weights.get("group_size") if strategy == "group" else 0
        if not isinstance(group, int) or isinstance(group, bool) or group < 0:
            raise refuse(f"group_size {group!r} is not a size", "config_groups.weights")
        return Quant(
            method="gptq" if weights.get("actorder") == "group" else "awq",
            excluded=excluded,
            group=group,
            zeros=False,
            packed_shape=True,
            g_idx=weights.get("actorder") == "group",
            name=f"compressed-tensors-w4a16-{f'g{group}' if group else 'channel'}",
        )
    if bits == 8 and kind in ("float", "int") and strategy in ("tensor", "channel"):
        return Quant(
            method="fp8" if kind == "float" else "int8",
            excluded=excluded,
            channel_scales=strategy == "channel",
            scale_bytes=2,
            input_scale=static,
            name=f"compressed-tensors-{'fp8' if kind == 'float' else 'int8'}-{strategy}",
        )
    raise refuse(f"{bits}-bit {kind} weights with strategy {strategy!r} are not modelled")


def quantization(model: ModelSpec) -> Quant:
    """Parse ``quantization_config``. Raises ConfigError for formats not modelled."""
    qc = top_config(model).get("quantization_config")
    if qc is None:
        return Quant(method="none")
    source = model.source
    if not isinstance(qc, Mapping):
        raise ConfigError(
            f"expected an object, got {qc!r}", source=source, field="quantization_config"
        )
    producer, inner = qc.get("producer"), qc.get("quantization")
    if "quant_method" not in qc and isinstance(producer, Mapping) and isinstance(inner, Mapping):
        # ModelOpt's hf_quant_config.json: {"producer": {"name": "modelopt"}, "quantization":
        # {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": [...]}}
        qc = {"quant_method": str(producer.get("name", "")), **inner}
    excluded: list[str] = []
    for key in EXCLUDE_KEYS:
        value = qc.get(key) or []
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise ConfigError(
                f"expected a list of module names, got {value!r}",
                source=source,
                field=f"quantization_config.{key}",
            )
        excluded += value
    method = str(qc.get("quant_method", "")).lower()
    algo = str(qc.get("quant_algo", "")).upper()
    if method in ("fp8", "deepseek_v4_fp8") or (method == "modelopt" and algo == "FP8"):
        block = qc.get("weight_block_size")
        if block is None:
            return Quant(method="fp8", excluded=tuple(excluded))
        if (
            not isinstance(block, list)
            or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
        ):
            raise ConfigError(
                f"expected two positive integers, got {block!r}",
                source=source,
                field="quantization_config.weight_block_size",
            )
        quant = Quant(method="fp8", block=(block[0], block[1]), excluded=tuple(excluded))
        return deepseek_v4_experts(model, qc, quant) if method != "modelopt" else quant
    if method == "mxfp4":
        return Quant(method="mxfp4", excluded=tuple(excluded))
    if method in ("awq", "gptq"):
        bits = qc.get("bits", qc.get("w_bit"))
        group = qc.get("group_size", qc.get("q_group_size", 128))
        if bits != 4 or not isinstance(group, int) or isinstance(group, bool) or group == 0:
            raise ConfigError(
                f"{method} is modelled for 4-bit weights in groups (or -1: per row), got bits "
                f"{bits!r}, group_size {group!r}; pass the weight bytes explicitly instead",
                source=source,
                field="quantization_config.bits",
            )
        return Quant(
            method=method,  # type: ignore[arg-type]
            excluded=tuple(excluded),
            group=max(0, group),
            g_idx=method == "gptq",  # AutoGPTQ writes g_idx for every linear
        )
    if method == "compressed-tensors":
        return compressed_tensors(qc, tuple(excluded), source)
    if (method == "modelopt" and algo == "NVFP4") or method == "nvfp4":
        group = qc.get("group_size", 16)
        if group != 16:
            raise ConfigError(
                f"NVFP4 uses groups of 16 values, got {group!r}",
                source=source,
                field="quantization_config.group_size",
            )
        return Quant(method="nvfp4", excluded=tuple(excluded))
    raise ConfigError(
        f"quantization {method or '?'}{'/' + algo if algo else ''} is not modelled "
        "(fp8, fp8 block-scaled, mxfp4, modelopt NVFP4, awq, gptq and compressed-tensors are); "
        "pass the weight bytes "
        "explicitly instead",
        source=source,
        field="quantization_config.quant_method",
    )


def deepseek_v4_experts(model: ModelSpec, qc: Mapping[str, Any], quant: Quant) -> Quant:
    """A DeepSeek-V4 / V4.1 fp8 checkpoint as ``DeepseekV4FP8Config`` loads it: by
    ``expert_dtype`` (the config's; V4.1's config class copies it from
    ``quantization_config``; default ``fp4``), ``fp4``: MXFP4 routed experts
    (``Mxfp4MoEMethod``) and UE8M0 linear scales (``is_scale_e8m0``: 1 byte), ``fp8``:
    fp8-block experts with float32 scales (``Fp8MoEMethod``). Other models: ``quant``."""
    if model.model_type not in DEEPSEEK_V4_TYPES:
        return quant
    given = model.config.get("expert_dtype", top_config(model).get("expert_dtype"))
    if given is None and model.model_type == "deepseek_v41":
        given = qc.get("expert_dtype")
    dtype = "fp4" if given is None else given
    if dtype == "fp8":
        return quant
    if dtype != "fp4":
        raise ConfigError(
            f"expected fp4 or fp8 (vLLM's DeepSeek-V4 expert dtypes), got {dtype!r}",
            source=model.source,
            field="quantization_config.expert_dtype",
        )
    return replace(quant, block_scale_bytes=1, expert_method="mxfp4")


def checkpoint_kv_dtype(model: ModelSpec) -> str | None:
    """The KV cache dtype a ModelOpt checkpoint asks for (``kv_cache_quant_algo`` FP8 or
    NVFP4, or a ``kv_cache_scheme`` of 8-bit floats), else None.

    vLLM resolves ``--kv-cache-dtype auto`` to it (``resolve_kv_cache_dtype_string``,
    vllm/utils/torch_utils.py, 0.33.0), as TensorRT-LLM does from the checkpoint's
    quantization config: the KV is stored at that width.
    """
    qc = top_config(model).get("quantization_config")
    if not isinstance(qc, Mapping):
        return None
    inner = qc.get("quantization")
    producer = qc.get("producer")
    method = str(qc.get("quant_method", "")).lower()
    if isinstance(producer, Mapping) and not method:
        method = str(producer.get("name", "")).lower()
    if not method.startswith("modelopt"):
        return None
    fields = inner if isinstance(inner, Mapping) else qc
    algo = fields.get("kv_cache_scheme") or fields.get("kv_cache_quant_algo")
    if isinstance(algo, Mapping):
        if algo.get("num_bits") == 8 and algo.get("type") == "float":
            return "fp8"
        if algo.get("num_bits") == 4 and algo.get("type") == "float":
            return "nvfp4"
        return None
    if isinstance(algo, str) and algo.lower() in ("fp8", "nvfp4"):
        return algo.lower()
    return None


__all__ = [
    "DEEPSEEK_V4_TYPES",
    "EXCLUDE_KEYS",
    "Quant",
    "checkpoint_kv_dtype",
    "deepseek_v4_experts",
    "quantization",
]
