"""The affine cost of one cache manager on one rank (DESIGN ledger rule 2).

A manager caching ``T`` tokens costs ``slope x T + intercept`` bytes:

* ``slope``: bytes per cached token, summed over the layers whose cache grows with the
  sequence (full attention, MLA, and sliding-window layers whose window is at least
  ``max_seq_len``);
* ``intercept``: bytes that do not grow with tokens, for ``max_batch_size`` sequences:

  - a sliding-window layer holds at most its window plus the lookahead, worst-case
    aligned to blocks: ``blocks = ceil((window + lookahead - 1) / tokens_per_block) + 1``
    per sequence (an interval of n tokens can straddle one more block than n fills),
    capped at the ``ceil(max_seq_len / tokens_per_block)`` blocks a whole sequence spans
    (a sequence never grows past ``max_seq_len``, its lookahead included);
  - a DeepSeek-V4 compressed layer grows by its compressed entries (``bytes_per_token``)
    and holds its window cache and compressor inputs as window groups (``window_parts``);
  - a recurrent layer (Gated DeltaNet, Mamba2, KDA) holds one state per sequence (see
    :mod:`kvbudget.layers` for the formulas; its conv state keeps ``conv_kernel - 1 +
    lookahead`` rows), stored in ``state_dtype`` (``auto``: the SSM state in the config's
    ``mamba_ssm_cache_dtype``, float32 for Nemotron-H, the conv state in the model's
    dtype), plus one more
    per lookahead token: a recurrent state cannot be rolled back, so the state after
    every unverified draft token is kept until verification (vLLM keeps
    ``num_speculative_tokens`` extra state blocks per request the same way):
    ``(1 + lookahead) x state`` per sequence.

Pipeline parallelism gives each stage its layers the way engines split them (vLLM's
``get_pp_indices``: ``L // pp`` each, the remainder going one each to the stages before
the last, from the back); MTP layers live on the last stage. :func:`cache_cost` reports
the stage with the largest cost unless ``pp_stage`` names one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvbudget._validate import require_int, require_model
from kvbudget.dtypes import DType, parse_dtype
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import (
    AttentionLayer,
    CompressedMLALayer,
    GatedDeltaNetLayer,
    KimiDeltaLayer,
    Layer,
    Mamba2Layer,
)
from kvbudget.model import ModelSpec

LayerSelection = Literal["model", "mtp", "all"]


@dataclass(frozen=True)
class CacheCost:
    """``slope`` bytes per cached token plus ``intercept`` fixed bytes; integers, immutable."""

    slope: int
    intercept: int = 0

    def __post_init__(self) -> None:
        require_int("slope", self.slope)
        require_int("intercept", self.intercept)

    def __add__(self, other: object) -> CacheCost:
        if not isinstance(other, CacheCost):
            return NotImplemented
        return CacheCost(self.slope + other.slope, self.intercept + other.intercept)

    def __sub__(self, other: object) -> CacheCost:
        if not isinstance(other, CacheCost):
            return NotImplemented
        if other.slope > self.slope or other.intercept > self.intercept:
            raise InvalidArgumentError(
                f"cannot subtract {other} from {self}: a cost cannot become negative"
            )
        return CacheCost(self.slope - other.slope, self.intercept - other.intercept)

    @property
    def is_zero(self) -> bool:
        """True when the manager costs nothing at all."""
        return self.slope == 0 and self.intercept == 0

    def bytes_for(self, num_tokens: int) -> int:
        """Bytes to hold ``num_tokens`` tokens: ``slope x num_tokens + intercept``."""
        require_int("num_tokens", num_tokens)
        return self.slope * num_tokens + self.intercept

    def tokens_for(self, budget_bytes: int) -> int:
        """Whole tokens that fit in ``budget_bytes`` after the intercept; never negative.

        Raises InvalidArgumentError for a negative budget or a zero slope (unbounded).
        """
        require_int("budget_bytes", budget_bytes)
        if self.slope == 0:
            raise InvalidArgumentError("a cost with slope 0 holds any number of tokens")
        return max(0, (budget_bytes - self.intercept) // self.slope)


@dataclass(frozen=True, kw_only=True)
class WindowGroup:
    """The sliding-window layers of one window size on one rank, for one sequence."""

    window_tokens: int
    num_layers: int
    bytes_per_token: int  # summed over the group's layers
    blocks_per_seq: int  # worst-case blocks one sequence holds (window + lookahead)


@dataclass(frozen=True, kw_only=True)
class CostDetail:
    """A manager's cost with its parts, for reports and for building cache pools.

    ``cost.intercept == window_bytes + state_bytes``; ``cost.slope`` is the bytes per
    token of the growing layers.
    """

    cost: CacheCost
    pp_stage: int
    num_layers: int  # layers of this manager on this stage (cache-less layers excluded)
    window_groups: tuple[WindowGroup, ...]
    window_bytes: int
    state_bytes_per_seq: int  # recurrent state of one sequence, (1 + lookahead) copies
    state_bytes: int  # running slots + cached states
    state_bytes_per_checkpoint: int = 0  # one state at a block boundary (no lookahead)
    cached_states: int = 0  # checkpoints kept for prefix reuse


def pp_stage_layers(num_layers: int, pp: int) -> list[range]:
    """Layer index ranges of each PP stage (vLLM's ``get_pp_indices`` split)."""
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    ranges, start = [], 0
    for size in sizes:
        ranges.append(range(start, start + size))
        start += size
    return ranges


def _check_tp(model: ModelSpec, layers: tuple[Layer, ...], tp: int) -> None:
    """InvalidArgumentError naming the first head count ``tp`` cannot shard. Query heads,
    Mamba2 heads, Gated DeltaNet value heads and KDA heads must split evenly (``count %
    tp == 0``); KV heads, Mamba2 groups and Gated DeltaNet key heads may also be
    replicated (``tp % count == 0``). The message suggests only sizes that would pass."""

    def fits(count: int) -> bool:
        return count % tp == 0 or tp % count == 0

    def fail(what: str, count: int, *, replicates: bool = False) -> InvalidArgumentError:
        sizes = (1, 2, 4, 8, 16, 32, 64)
        ok = [d for d in sizes if count % d == 0 or (replicates and d % count == 0)]
        rule = "divides it or a multiple of it" if replicates else "divides it"
        return InvalidArgumentError(
            f"tp={tp} cannot shard {what}={count} of {model.name}; "
            f"use a tp that {rule}, e.g. {', '.join(map(str, ok))}"
        )

    has_attention = any(isinstance(x, AttentionLayer) or x.kind == "mla" for x in layers)
    if has_attention and model.num_attention_heads % tp:
        raise fail("num_attention_heads", model.num_attention_heads)
    for layer in layers:
        if isinstance(layer, AttentionLayer) and not fits(layer.num_kv_heads):
            raise fail("num_key_value_heads", layer.num_kv_heads, replicates=True)
        if isinstance(layer, Mamba2Layer):
            if layer.num_heads % tp:
                raise fail("mamba_num_heads", layer.num_heads)
            if not fits(layer.n_groups):
                raise fail("n_groups", layer.n_groups, replicates=True)
        if isinstance(layer, GatedDeltaNetLayer):
            if not fits(layer.num_k_heads):
                raise fail("linear_num_key_heads", layer.num_k_heads, replicates=True)
            if layer.num_v_heads % tp:
                raise fail("linear_num_value_heads", layer.num_v_heads)
        if isinstance(layer, KimiDeltaLayer) and layer.num_heads % tp:
            # vLLM's KDA layer: ``assert self.num_heads % self.tp_size == 0``
            raise fail("linear_attn_config.num_heads", layer.num_heads)


def cache_cost_detail(
    model: ModelSpec,
    *,
    kv_dtype: str = "bf16",
    state_dtype: str = "auto",
    tokens_per_block: int = 32,
    max_batch_size: int = 1,
    max_seq_len: int | None = None,
    tp: int = 1,
    pp: int = 1,
    pp_stage: int | None = None,
    layers: LayerSelection = "model",
    lookahead_tokens: int = 0,
    cached_states: int = 0,
) -> CostDetail:
    """:func:`cache_cost` with its parts (window groups, state bytes, stage). Pure.

    ``cached_states``: recurrent states kept at block boundaries for prefix reuse, one
    state each (``state_bytes_per_checkpoint``: no lookahead copies, ``conv_kernel - 1``
    conv rows), on top of the ``max_batch_size`` running slots; 0 for a model without
    recurrent layers. Without ``pp_stage``, the stage whose full batch costs most."""
    require_model("model", model)
    for name, value, minimum in (
        ("tokens_per_block", tokens_per_block, 1),
        ("max_batch_size", max_batch_size, 1),
        ("tp", tp, 1),
        ("pp", pp, 1),
        ("lookahead_tokens", lookahead_tokens, 0),
        ("cached_states", cached_states, 0),
    ):
        require_int(name, value, minimum=minimum)
    seq_len = model.max_position_embeddings if max_seq_len is None else max_seq_len
    require_int("max_seq_len", seq_len, minimum=1)
    if layers not in ("model", "mtp", "all"):
        raise InvalidArgumentError(f"layers must be 'model', 'mtp' or 'all', got {layers!r}")
    if pp > model.num_layers:
        raise InvalidArgumentError(
            f"pp={pp} is more pipeline stages than {model.name} has layers ({model.num_layers})"
        )
    if pp_stage is not None:
        require_int("pp_stage", pp_stage)
        if pp_stage >= pp:
            raise InvalidArgumentError(f"pp_stage={pp_stage} must be < pp={pp}")
    _check_tp(model, model.layers + model.mtp_layers, tp)
    args = _CostArgs(
        model=model,
        dtypes=_storage_dtypes(model, kv_dtype, state_dtype),
        tokens_per_block=tokens_per_block,
        max_batch_size=max_batch_size,
        seq_len=seq_len,
        tp=tp,
        pp=pp,
        layers=layers,
        lookahead_tokens=lookahead_tokens,
        cached_states=cached_states,
    )
    if pp_stage is not None:
        return _stage_detail(args, pp_stage)
    details = [_stage_detail(args, s) for s in range(pp)]
    full = max_batch_size * seq_len
    return max(details, key=lambda d: (d.cost.bytes_for(full), -d.pp_stage))


@dataclass(frozen=True)
class _Dtypes:
    """The storage dtypes of one cost: KV, recurrent state, and the SSM state where the
    config names its own (None: the state dtype)."""

    kv: DType
    state: DType
    ssm: DType | None


def _storage_dtypes(model: ModelSpec, kv_dtype: str, state_dtype: str) -> _Dtypes:
    """``kv_dtype`` and ``state_dtype`` resolved against ``model``. "auto" state: the
    SSM/recurrent state in the config's state dtype (Nemotron-H: fp32), the conv state
    in the model's; an explicit state_dtype sets both. A model without recurrent layers
    stores no state (its state dtype is the KV one, never parsed)."""
    kv = parse_dtype(kv_dtype, auto=model.dtype)
    if not any(x.kind in ("gated_deltanet", "kda", "mamba2") for x in model.layers):
        return _Dtypes(kv=kv, state=kv, ssm=None)
    state = parse_dtype(state_dtype, auto=model.dtype, what="state_dtype")
    auto = str(state_dtype).strip().lower() == "auto"
    ssm = (
        parse_dtype(model.ssm_state_dtype, what="state_dtype")
        if auto and model.ssm_state_dtype
        else None
    )
    return _Dtypes(kv=kv, state=state, ssm=ssm)


@dataclass(frozen=True, kw_only=True)
class _CostArgs:
    """:func:`cache_cost_detail`'s checked arguments, handed whole to each stage."""

    model: ModelSpec
    dtypes: _Dtypes
    tokens_per_block: int
    max_batch_size: int
    seq_len: int
    tp: int
    pp: int
    layers: LayerSelection
    lookahead_tokens: int
    cached_states: int


def _stage_detail(a: _CostArgs, stage: int) -> CostDetail:
    """The cost of PP stage ``stage``'s chosen layers (the MTP layers on the last)."""
    model, dt = a.model, a.dtypes
    chosen: list[Layer] = []
    if a.layers in ("model", "all"):
        chosen += [model.layers[i] for i in pp_stage_layers(model.num_layers, a.pp)[stage]]
    if a.layers in ("mtp", "all") and stage == a.pp - 1:
        chosen += list(model.mtp_layers)
    slope = state_per_seq = checkpoint = counted = 0
    windows: dict[int, tuple[int, int]] = {}  # window -> (layers, bytes per token)
    for layer in chosen:
        per_token = layer.bytes_per_token(dt.kv, a.tp)
        state = layer.state_bytes(dt.state, a.tp, lookahead=a.lookahead_tokens, ssm_dtype=dt.ssm)
        state_per_seq += state
        if state:
            checkpoint += layer.state_bytes(dt.state, a.tp, lookahead=0, ssm_dtype=dt.ssm)
        parts = _window_parts(layer, per_token, dt.kv)
        if state or any(parts.values()):
            counted += 1
        for window, part in parts.items():
            if window is not None and window < a.seq_len:
                n, b = windows.get(window, (0, 0))
                windows[window] = (n + 1, b + part)
            else:
                slope += part
    groups = tuple(_window_group(a, w, n, b) for w, (n, b) in sorted(windows.items()))
    window_bytes = a.max_batch_size * sum(
        g.blocks_per_seq * a.tokens_per_block * g.bytes_per_token for g in groups
    )
    state_per_seq *= 1 + a.lookahead_tokens  # one state per rollback point
    checkpoints = a.cached_states if checkpoint else 0
    state_bytes = a.max_batch_size * state_per_seq + checkpoints * checkpoint
    return CostDetail(
        cost=CacheCost(slope, window_bytes + state_bytes),
        pp_stage=stage,
        num_layers=counted,
        window_groups=groups,
        window_bytes=window_bytes,
        state_bytes_per_seq=state_per_seq,
        state_bytes=state_bytes,
        state_bytes_per_checkpoint=checkpoint,
        cached_states=checkpoints,
    )


def _window_parts(layer: Layer, per_token: int, kv: DType) -> dict[int | None, int]:
    """A layer's bytes a token by window (None: the cache grows with the sequence): its
    ``bytes_per_token`` at its ``sliding_window``, and a compressed layer's bounded
    caches (its window cache and compressor inputs, ``window_parts``) at theirs."""
    parts: dict[int | None, int] = {layer.sliding_window: per_token}
    if isinstance(layer, CompressedMLALayer):
        for window, part in layer.window_parts(kv):
            parts[window] = parts.get(window, 0) + part
    return parts


def _window_group(a: _CostArgs, window: int, layers: int, bytes_per_token: int) -> WindowGroup:
    """``layers`` layers of one sliding ``window``: blocks per sequence at worst-case
    alignment of ``window + lookahead`` tokens, never more than a whole sequence spans."""
    span = window + a.lookahead_tokens
    blocks = min(
        -(-(span - 1) // a.tokens_per_block) + 1,
        -(-a.seq_len // a.tokens_per_block),
    )
    return WindowGroup(
        window_tokens=window,
        num_layers=layers,
        bytes_per_token=bytes_per_token,
        blocks_per_seq=blocks,
    )


def cache_cost(
    model: ModelSpec,
    *,
    kv_dtype: str = "bf16",
    state_dtype: str = "auto",
    tokens_per_block: int = 32,
    max_batch_size: int = 1,
    max_seq_len: int | None = None,
    tp: int = 1,
    pp: int = 1,
    pp_stage: int | None = None,
    layers: LayerSelection = "model",
    lookahead_tokens: int = 0,
) -> CacheCost:
    """The cost of one cache manager over ``model``'s layers on one rank.

    Args:
        kv_dtype: storage of K/V and MLA latents: fp32, bf16, fp16, fp8, int8, nvfp4 or
            ``auto`` (the config's dtype).
        state_dtype: storage of recurrent state (``auto`` = the config's dtype).
        tokens_per_block: block size; sliding-window layers are costed in whole blocks.
        max_batch_size: sequences whose fixed costs (window, state) are reserved.
        max_seq_len: longest sequence (default: the config's ``max_position_embeddings``);
            a sliding window at least this long is full attention.
        tp, pp: tensor / pipeline parallel sizes; ``pp_stage`` picks a stage (default:
            the stage with the largest cost).
        layers: ``"model"`` (the model's own layers), ``"mtp"`` (its MTP draft layers) or
            ``"all"``.
        lookahead_tokens: unverified draft tokens each sequence may hold on top of its
            window (speculative decoding).

    Raises:
        InvalidArgumentError: a bad dtype, size, tp (does not shard the heads) or pp.
    """
    return cache_cost_detail(
        model,
        kv_dtype=kv_dtype,
        state_dtype=state_dtype,
        tokens_per_block=tokens_per_block,
        max_batch_size=max_batch_size,
        max_seq_len=max_seq_len,
        tp=tp,
        pp=pp,
        pp_stage=pp_stage,
        layers=layers,
        lookahead_tokens=lookahead_tokens,
    ).cost
