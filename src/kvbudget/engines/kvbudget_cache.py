"""kvbudget's own cache (:class:`~kvbudget.SpecDecodeCache`) as an engine model.

It allocates exactly the ledger: per role, one pool of the growing layers' blocks per
tier (every role the same count, in lockstep), window pools of ``blocks_per_seq x
max_batch_size`` blocks per window size, ``max_batch_size`` recurrent-state slots and the
``cached_states`` kept at block boundaries, all reserved up front on the GPU. Capacity
is the common block count: tokens, sequences of ``max_seq_len`` at once (capped at the
batch) and the longest sequence at the full batch.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from kvbudget._version import __version__
from kvbudget.engines.base import EngineModel
from kvbudget.engines.common import cdiv, engine_capacity, refuse_unmodelled_family
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.layers import CompressedMLALayer, SharedCompressedMLALayer
from kvbudget.plan_types import (
    Capacity,
    EnginePlan,
    EngineSource,
    ManagerPlan,
    PoolKind,
    PoolPlan,
)
from kvbudget.units import count_of, format_bytes

if TYPE_CHECKING:
    from kvbudget.deployment import Deployment
    from kvbudget.ledger import Ledger


def plan(d: Deployment, ledger: Ledger) -> EnginePlan:
    """The cache's pools and capacity for ``ledger``.

    Raises InfeasibleBudgetError when not even one sequence of max_seq_len fits.
    """
    capacity, warnings = _capacity(d, ledger)
    pools = own_pools(ledger.managers)
    return EnginePlan(
        name=MODEL.name,
        version=MODEL.version,
        source=MODEL.source,
        pools=pools,
        capacity=capacity,
        settings={},
        warnings=tuple(warnings),
    )


def own_pools(managers: tuple[ManagerPlan, ...]) -> tuple[PoolPlan, ...]:
    """The cache's pools for ``managers``, role by role (a policy variant's too)."""
    return tuple(pool for m in managers for pool in _pools(m))


def _pools(m: ManagerPlan) -> list[PoolPlan]:
    """One manager's pools: growing blocks per tier, then its GPU fixed pools."""
    bs = m.tokens_per_block
    pools = [
        PoolPlan(
            role=m.role,
            kind="kv",
            tier=t.tier,
            tokens_per_block=bs,
            blocks=t.blocks,
            bytes=t.bytes - (m.fixed_bytes if t.tier == "gpu" else 0),
            tokens=t.tokens,
            padding_bytes=t.padding_bytes,
        )
        for t in (m.gpu, m.host, m.disk)
        if t.tier == "gpu" or t.bytes
    ]
    # GPU fixed pools: (kind, blocks or slots, bytes of each, tokens each holds, window)
    fixed: list[tuple[PoolKind, int, int, int, int | None]] = [
        ("window", g.blocks_per_seq * m.max_batch_size, bs * g.bytes_per_token, bs, g.window_tokens)
        for g in m.window_groups
    ]
    fixed.append(("state", m.max_batch_size, m.state_bytes_per_seq, 0, None))
    fixed.append(("checkpoint", m.cached_states, m.state_bytes_per_checkpoint, 0, None))
    pools += [
        PoolPlan(
            role=m.role,
            kind=kind,
            tier="gpu",
            tokens_per_block=bs,
            blocks=count,
            bytes=count * each,
            tokens=count * tokens,
            window_tokens=window,
        )
        for kind, count, each, tokens, window in fixed
        if count * each
    ]
    return pools


def lockstep_capacity(base: Capacity, gpu_blocks: int) -> Capacity:
    """``base`` holding ``gpu_blocks`` common GPU blocks: its tokens, the sequences of
    ``max_seq_len`` running at once (capped at the batch: window pools and state slots
    exist for ``max_batch_size`` sequences) and the longest sequence at the full batch.

    The one place these are computed, for the plan and for every policy variant of it.
    A sequence never grows past ``max_seq_len``, so neither does its lookahead (engines
    reserve ``min(tokens + K, max_seq_len)``): a full-length sequence spans its own blocks.
    """
    bs = base.tokens_per_block
    per_seq = (gpu_blocks // base.max_batch_size) * bs
    at_batch = base.max_seq_len if per_seq >= base.max_seq_len else per_seq - base.lookahead_tokens
    return replace(
        base,
        tokens=gpu_blocks * bs,
        gpu_blocks=gpu_blocks,
        max_concurrency=min(gpu_blocks // cdiv(base.max_seq_len, bs), base.max_batch_size),
        max_seq_len_at_batch=max(at_batch, 0),
    )


def _capacity(d: Deployment, ledger: Ledger) -> tuple[Capacity, list[str]]:
    """Tokens, concurrency and the longest sequence at the batch size, with warnings.

    Raises InfeasibleBudgetError when not even one sequence of max_seq_len fits.
    """
    bs, lookahead, batch = d.tokens_per_block, d.lookahead_tokens, d.max_batch_size
    blocks = ledger.gpu_blocks
    base = replace(
        engine_capacity(
            d,
            tokens_per_block=bs,
            gpu_blocks=blocks,
            host_blocks=ledger.host_blocks,
            disk_blocks=ledger.disk_blocks,
            max_concurrency=batch,
        ),
        max_seq_len_at_batch=d.max_seq_len,
    )
    if not ledger.growing:
        return base, [
            "every cached layer is sliding-window or recurrent: the cache is a fixed cost "
            f"for max_batch_size={batch} sequences of any length; the rest of the GPU budget "
            "is unused (raise --max-batch-size to use it)"
        ]
    capacity = lockstep_capacity(base, blocks)
    if capacity.max_concurrency == 0:
        raise InfeasibleBudgetError(
            f"one sequence of max_seq_len {d.max_seq_len} needs "
            f"{cdiv(d.max_seq_len, bs)} blocks per manager but the GPU budget of "
            f"{format_bytes(ledger.binding_gpu_bytes)} per rank holds {blocks} after the "
            f"fixed cost of {format_bytes(ledger.binding_fixed_bytes)}; the longest "
            f"sequence that fits is {max(blocks * bs - lookahead, 0)} tokens: lower "
            "--max-seq-len, raise --kv-budget/--memory-fraction, use a smaller "
            "--kv-dtype, or raise --tp/--pp"
        )
    fit = blocks // cdiv(d.max_seq_len, bs)
    assert capacity.max_seq_len_at_batch is not None
    notes = _batch_notes(d, fit, capacity.max_concurrency, capacity.max_seq_len_at_batch)
    return capacity, notes


def _batch_notes(d: Deployment, fit: int, concurrency: int, at_batch: int) -> list[str]:
    """What the batch size leaves unused, or what it cannot run at full length."""
    batch = d.max_batch_size
    if fit > batch:
        return [
            f"the GPU blocks hold {count_of(fit, 'sequence')} of max_seq_len "
            f"{d.max_seq_len} but "
            f"max_batch_size is {batch}: at most {batch} run at once (raise "
            "--max-batch-size to use the rest, or lower --kv-budget/--memory-fraction)"
        ]
    if fit < batch:
        return [
            f"only {count_of(concurrency, 'sequence')} of max_seq_len {d.max_seq_len} "
            "fit at once "
            f"(max_batch_size is {batch}); at the full batch each sequence can hold "
            f"{max(at_batch, 0)} tokens"
        ]
    return []


def check(d: Deployment) -> None:
    """InvalidArgumentError for a family whose caches this cache has no pool for
    (``Architecture.unmodelled_engines``), or compressed latents it cannot hold exactly
    (:func:`_check_compressed`)."""
    refuse_unmodelled_family(d, "kvbudget")
    _check_compressed(d)


def _check_compressed(d: Deployment) -> None:
    """DeepSeek-V4's compressed layers (V4.1's KV sources) keep one entry (latent and
    indexer key) per ``ratio`` tokens in the growing blocks: exact only when every block
    holds whole entries (``tokens_per_block`` a multiple of every ratio, so a block
    boundary is a compression boundary, where a prefix hit restarts) and an entry is a
    whole number of bytes a token (``entry % ratio == 0``; the ledger's slope is whole
    bytes a token). InvalidArgumentError, with the setting to change, otherwise."""
    layers = [x for m in (d.target, d.draft) if m is not None for x in m.layers + m.mtp_layers]
    compressed = [
        x
        for x in layers
        if isinstance(x, CompressedMLALayer)
        and x.compress_ratio > 1
        and (x.kv_source if isinstance(x, SharedCompressedMLALayer) else True)
    ]
    if not compressed:
        return
    ratios = sorted({x.compress_ratio for x in compressed})
    bs = d.tokens_per_block
    if any(bs % r for r in ratios):
        span = math.lcm(*ratios)
        raise InvalidArgumentError(
            f"--tokens-per-block {bs} splits the compressed entries of {d.target.name} "
            f"(one per {' and '.join(map(str, ratios))} tokens) over blocks: kvbudget's own "
            f"cache needs a multiple of {span} (e.g. --tokens-per-block {max(span, 128)})"
        )
    dtype = d.kv_dtype_value
    for x in compressed:
        entry = x.entry_bytes(dtype) + x.indexer_key_bytes
        if entry % x.compress_ratio:
            raise InvalidArgumentError(
                f"the {d.kv_dtype} entry of {d.target.name}'s layer {x.index} is {entry} "
                f"bytes per {x.compress_ratio} tokens, not a whole number of bytes a token, "
                "which kvbudget's own cache prices exactly only in whole bytes: plan "
                "--kv-dtype bf16 (or --engine vllm, whose fp8 pages it models)"
            )


MODEL = EngineModel(
    name="kvbudget",
    version=__version__,
    default=True,
    source=EngineSource(
        repository="kvbudget", ref=__version__, files=("src/kvbudget/cache/spec_decode_cache.py",)
    ),
    summary="kvbudget's own SpecDecodeCache",
    plan=plan,
    check=check,
    fixed_per_batch=True,
    sizes_cached_states=True,
)

__all__ = ["MODEL", "lockstep_capacity", "own_pools", "plan"]
