"""Swap: moving a running request's kv blocks between the GPU and the host tier.

``SpecDecodeCache.preempt(mode="swap")`` and ``resume`` call :func:`swap_out` and
:func:`swap_in`. The kv block table is shared by every role
(:mod:`kvbudget.cache.kv_tiers`), so one move moves the request in every role; each checks
first and then moves, so a refusal raises and changes nothing. Blocks whose hash the
destination tier already holds are shared, not copied; the source tier keeps hashed
blocks cached. Copies are logged in ``KvTiers.copies``; the caller runs them
(``SpecDecodeCache._flush``).
"""

from __future__ import annotations

from typing import Any

from kvbudget.cache.ids import RequestId
from kvbudget.cache.kv_tiers import GPU, HOST, KvTiers
from kvbudget.cache.request import Request
from kvbudget.cache.shortage import refuse
from kvbudget.errors import InvalidCacheOperationError


def swap_out(kv: KvTiers, req: Request[Any], request_id: RequestId, tokens_per_block: int) -> None:
    """Roll back the lookahead of running ``req`` and move its blocks to the host tier.
    Mutates ``req`` (``swapped``, ``num_reserved``, ``table``) and the pools.

    Raises:
        InvalidCacheOperationError: some role has sliding-window blocks or recurrent state
            (GPU-only, with no host budget); nothing changes.
        OutOfBlocksError: not enough host blocks; nothing changes.
    """
    if req.parts:  # the roles with windows or state
        raise InvalidCacheOperationError(
            f"cannot swap request {request_id!r}: its sliding-window blocks / recurrent "
            "state live on the GPU only; preempt with mode='recompute'"
        )
    keep = -(-len(req.tokens) // tokens_per_block)
    refuse(
        f"cannot swap out request {request_id!r} ({keep} blocks per role)",
        (kv.move_shortage(req.table, keep, GPU, HOST),),
    )
    surplus = len(req.table) - keep
    if surplus > 0:
        kv.gpu.release_tail(req.table, surplus)
    req.table = kv.move(req.table, GPU, HOST)
    req.num_reserved = 0
    req.swapped = True


def swap_in(kv: KvTiers, req: Request[Any], request_id: RequestId) -> None:
    """Move swapped-out ``req`` back to the GPU (its host blocks stay cached there).
    Mutates ``req`` (``swapped``, ``table``) and the pools.

    Raises:
        InvalidCacheOperationError: ``req`` is not swapped out; nothing changes.
        OutOfBlocksError: not enough GPU blocks; nothing changes.
    """
    if not req.swapped:
        raise InvalidCacheOperationError(f"request {request_id!r} is not swapped out")
    keep = len(req.table)
    refuse(
        f"cannot resume request {request_id!r} ({keep} blocks per role)",
        (kv.move_shortage(req.table, keep, HOST, GPU),),
    )
    req.table = kv.move(req.table, HOST, GPU)
    req.swapped = False
