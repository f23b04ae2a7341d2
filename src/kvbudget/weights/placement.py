"""The weight bytes one rank holds: :func:`weights_bytes` (sharding in :mod:`kvbudget.weights`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Literal

from kvbudget._validate import require_int, require_model
from kvbudget.architectures import architecture_for, model_inventory, ties_embeddings
from kvbudget.cost import pp_stage_layers
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import InvalidArgumentError
from kvbudget.inventory import Place, Weight
from kvbudget.model_spec import ModelSpec
from kvbudget.weights.headers import main_model_copy, match, renamed, share, unmatched_place
from kvbudget.weights.quantization import Quant, quantization

FIXED_BYTES = {"fp32": 4, "int32": 4, "int64": 8}


@dataclass(frozen=True, kw_only=True)
class WeightsBytes:
    """Bytes of weights held by one rank of one pipeline stage, by component; immutable.

    Components are those of :class:`ParamCounts` (``lm_head_bytes`` also holds an
    EAGLE3 head's int64 ``draft_id_to_target_id`` map). ``total_bytes`` is their sum.
    ``weights_dtype`` is the storage of every tensor the checkpoint does not quantize;
    ``quantization`` names the checkpoint format (``"none"``, ``"fp8"``,
    ``"fp8-block128x128"``, ``"mxfp4"``, ``"nvfp4"``). ``source`` says where the bytes
    come from: ``"safetensors headers"`` (each stored tensor's own bytes, placed by its
    inventory tensor: :mod:`kvbudget.weights.headers`) or ``"inventory"`` (computed from
    the config); ``other_bytes`` holds stored tensors the inventory does not name.
    """

    tp: int
    pp: int
    pp_stage: int
    include_mtp: bool
    weights_dtype: str
    quantization: str
    embeddings_bytes: int = 0
    lm_head_bytes: int = 0
    attention_bytes: int = 0
    recurrent_bytes: int = 0
    dense_mlp_bytes: int = 0
    routed_experts_bytes: int = 0
    shared_experts_bytes: int = 0
    routers_bytes: int = 0
    norms_bytes: int = 0
    eagle3_fc_bytes: int = 0
    mtp_bytes: int = 0
    vision_bytes: int = 0
    other_bytes: int = 0
    source: str = "inventory"

    @property
    def total_bytes(self) -> int:
        """All weight bytes on this rank."""
        return sum(getattr(self, f.name) for f in fields(self) if f.name.endswith("_bytes"))


_WEIGHTS_DTYPES = ("auto", "fp32", "bf16", "fp16")
WeightsSource = Literal["auto", "inventory"]


def _resolve_weights_dtype(model: ModelSpec, weights_dtype: str, quant: Quant) -> str:
    """The storage of unquantized tensors; see :func:`weights_bytes`."""
    auto = model.dtype
    if auto is None and quant.method == "mxfp4" and model.model_type == "gpt_oss":
        # openai/gpt-oss README, "Precision format": MXFP4 for the MoE linear weights,
        # "All other tensors will be in BF16." The config carries no torch_dtype.
        auto = "bf16"
    if auto is None and quant.method != "none":
        # a quantized checkpoint whose config names no dtype (MiniMax-M2's fp8 revision
        # fbd8a14b): its unquantized tensors are held in the dtype the engine runs it in,
        # bf16 (vLLM's default when the config has none, as for the KV cache)
        auto = "bf16"
    if auto is None and str(weights_dtype).strip().lower() == "auto":
        raise InvalidArgumentError(
            f"weights_dtype='auto' needs the dtype of {model.name}'s weights, but its config "
            "has no 'torch_dtype'/'dtype'; pass weights_dtype='bf16', 'fp16' or 'fp32'"
        )
    dtype = parse_dtype(weights_dtype, auto=auto, what="weights_dtype")
    if dtype.name not in _WEIGHTS_DTYPES:
        raise InvalidArgumentError(
            f"weights_dtype must be one of {', '.join(_WEIGHTS_DTYPES)}, got {weights_dtype!r} "
            "(quantized storage comes from the config's quantization_config)"
        )
    return dtype.name


def _stage_of(
    model: ModelSpec, place: Place, stages: list[range], pp: int, include_mtp: bool
) -> int | None:
    """The PP stage holding a tensor placed at ``place`` (None: not held at all)."""
    if model.is_head:
        return pp - 1
    if place == "first":
        return 0
    if place == "last":
        return pp - 1
    if place == "mtp":
        return pp - 1 if include_mtp else None
    for stage, layers in enumerate(stages):
        if place in layers:
            return stage
    raise AssertionError(f"layer {place} is on no stage")  # pragma: no cover


def _checked_layout(
    model: ModelSpec, *, tp: int, pp: int, pp_stage: int | None, ep: int, attention_tp: int | None
) -> int:
    """The attention TP size, once ``tp``, ``pp``, ``pp_stage``, ``ep`` are checked."""
    require_int("tp", tp, minimum=1)
    require_int("pp", pp, minimum=1)
    require_int("ep", ep, minimum=1)
    attn_tp = tp if attention_tp is None else require_int("attention_tp", attention_tp, minimum=1)
    if pp_stage is not None:
        require_int("pp_stage", pp_stage)
        if pp_stage >= pp:
            raise InvalidArgumentError(f"pp_stage={pp_stage} must be < pp={pp}")
    if pp > model.num_layers and not model.is_head:
        raise InvalidArgumentError(
            f"pp={pp} is more pipeline stages than {model.name} has layers ({model.num_layers})"
        )
    return attn_tp


def weights_bytes(
    model: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    pp_stage: int | None = None,
    include_mtp: bool = False,
    weights_dtype: str = "auto",
    ep: int = 1,
    attention_tp: int | None = None,
    source: WeightsSource = "auto",
) -> WeightsBytes:
    """Bytes of weights held by one rank, as engines shard them. Pure.

    Args:
        tp: tensor-parallel size; sharding as described in the module docstring.
        pp: pipeline-parallel size; ``pp_stage`` picks a stage, by default the stage
            with the most bytes (the earliest on ties) is reported.
        include_mtp: also load the model's MTP layers (on the last stage) - for MTP
            speculative decoding.
        weights_dtype: storage of the tensors the checkpoint does not quantize: ``auto``
            (the config's ``torch_dtype``; gpt-oss's mxfp4 checkpoints, which carry
            none, are bf16 per the openai/gpt-oss README), ``bf16``, ``fp16`` or
            ``fp32``.
        ep: expert-parallel size: routed experts whole, ``ceil(experts / ep)`` per rank.
        attention_tp: the tensor-parallel size of attention (``tp / dp`` under
            data-parallel attention); default ``tp``.
        source: ``"auto"``: the checkpoint's safetensors headers when ``model`` carries
            them (``model.checkpoint``, read for Hub models and local folders) and
            ``weights_dtype`` is ``auto``, else the inventory; ``"inventory"``: always
            computed from the config.

    Returns:
        A :class:`WeightsBytes`; the caller owns it. ``total_bytes`` is the figure to
        subtract from a GPU's memory for that rank.

    Raises:
        InvalidArgumentError: a bad ``tp``, ``pp``, ``pp_stage`` (``pp`` may not exceed
            the number of decoder layers, except for an EAGLE3 head, which sits on the
            last stage), or ``weights_dtype``, or ``auto`` with no dtype to resolve.
        UnsupportedArchitectureError / ConfigError: as :func:`count_params`, or a
            quantization format this module does not model.
    """
    require_model("model", model)
    attn_tp = _checked_layout(
        model, tp=tp, pp=pp, pp_stage=pp_stage, ep=ep, attention_tp=attention_tp
    )
    if not isinstance(include_mtp, bool):
        raise InvalidArgumentError(f"include_mtp must be true or false, got {include_mtp!r}")
    if source not in ("auto", "inventory"):
        raise InvalidArgumentError(f"source must be 'auto' or 'inventory', got {source!r}")
    inventory = model_inventory(model)
    quant = quantization(model)
    dtype_name = _resolve_weights_dtype(model, weights_dtype, quant)
    checkpoint = model.checkpoint
    from_headers = (
        checkpoint is not None and source == "auto" and weights_dtype.strip().lower() == "auto"
    )
    items = (
        _header_items(model, inventory, tp=tp, attention_tp=attn_tp, ep=ep)
        if from_headers
        else _inventory_items(inventory, quant, dtype_name, tp=tp, attention_tp=attn_tp, ep=ep)
    )
    stages = pp_stage_layers(model.num_layers, pp)
    tied_copy = pp > 1 and not model.is_head and ties_embeddings(model)

    per_stage: list[dict[str, Fraction | int]] = [{} for _ in range(pp)]
    for place, component, nbytes in items:
        stage = _stage_of(model, place, stages, pp, include_mtp)
        if stage is None:
            continue
        key = f"{component}_bytes"
        per_stage[stage][key] = per_stage[stage].get(key, 0) + nbytes
        if tied_copy and component == "embeddings":
            last = per_stage[pp - 1]
            last["lm_head_bytes"] = last.get("lm_head_bytes", 0) + nbytes

    def result(stage: int) -> WeightsBytes:
        return WeightsBytes(
            tp=tp,
            pp=pp,
            pp_stage=stage,
            include_mtp=include_mtp,
            weights_dtype=dtype_name,
            quantization=quant.label,
            source=checkpoint.source if from_headers and checkpoint else "inventory",
            **{key: math.ceil(value) for key, value in per_stage[stage].items()},
        )

    if pp_stage is not None:
        return result(pp_stage)
    return max((result(s) for s in range(pp)), key=lambda r: (r.total_bytes, -r.pp_stage))


# where a tensor lives, its component, its bytes on one rank (a fraction of a stored
# tensor's bytes for a sharded one: rounded up per component at the end)
_Item = tuple[Place, str, Fraction | int]


def _inventory_items(
    inventory: tuple[Weight, ...],
    quant: Quant,
    dtype_name: str,
    *,
    tp: int,
    attention_tp: int,
    ep: int,
) -> Iterator[_Item]:
    """Each inventory tensor's bytes on one rank, in its storage format."""
    plain_bytes = parse_dtype(dtype_name).bits // 8
    for w in inventory:
        copies = w.copies
        if w.expert and ep > 1:  # whole experts, spread over the EP ranks
            rows, cols = w.rank_shape(1)
            copies = -(-copies // ep)
        else:
            rows, cols = w.rank_shape(attention_tp if w.component == "attention" else tp)
        q = quant.for_weight(w)
        if q.converts(w):
            one = q.bytes_for(rows, cols)
        else:
            one = rows * cols * (FIXED_BYTES[w.fixed] if w.fixed else plain_bytes)
        yield w.place, w.component, copies * one


def _header_items(
    model: ModelSpec, inventory: tuple[Weight, ...], *, tp: int, attention_tp: int, ep: int
) -> Iterator[_Item]:
    """Each stored tensor's header bytes times the share of its inventory tensor one rank
    holds (:mod:`kvbudget.weights.headers`); an unmatched tensor whole, as ``other``; an
    MTP layer's copy of the main model's embedding or head not at all."""
    assert model.checkpoint is not None
    tensors = model.checkpoint.tensors
    arch = architecture_for(model.model_type)
    rules = arch.checkpoint_names if arch is not None else ()
    names = [renamed(t.name, rules) for t in tensors]
    for t, w in zip(tensors, match(names, inventory), strict=True):
        if w is None and main_model_copy(t.name, model.num_layers):
            continue
        if w is None:
            yield unmatched_place(t.name, model.num_layers), "other", t.nbytes
        else:
            part = share(w, tp=tp, attention_tp=attention_tp, ep=ep)
            yield w.place, w.component, t.nbytes * part


__all__ = ["WeightsBytes", "weights_bytes"]
