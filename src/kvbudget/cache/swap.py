"""Swap: moving a running request's kv blocks between the GPU and the host tier.

:func:`swap_out` / :func:`swap_in` work on a request in every role (lockstep);
:meth:`RoleManager.move_shortage` / :meth:`RoleManager.move` are their per-role check and
apply steps.

``SpecDecodeCache.preempt(mode="swap")`` and ``resume`` call :func:`swap_out` and
:func:`swap_in`. Both check every role first and then move the request in every role, so a
refusal raises and changes nothing. Blocks whose hash the destination tier already holds
are shared, not copied; the source tier keeps hashed blocks cached. Copies are logged in
each manager's ``copies``; the caller runs them (``SpecDecodeCache._flush``).
"""

from __future__ import annotations

from kvbudget.cache.ids import RequestId
from kvbudget.cache.manager import GPU, HOST, RoleManager
from kvbudget.cache.request import Request
from kvbudget.cache.shortage import refuse
from kvbudget.errors import InvalidCacheOperationError


def swap_out(req: Request[RoleManager], request_id: RequestId, tokens_per_block: int) -> None:
    """Roll back the lookahead of running ``req`` and move its blocks to the host tier in
    every role. Mutates ``req`` (``swapped``, ``num_reserved``, tables) and the pools.

    Raises:
        InvalidCacheOperationError: some role has sliding-window blocks or recurrent state
            (GPU-only, with no host budget); nothing changes.
        OutOfBlocksError: not enough host blocks in some role; nothing changes.
    """
    if any(m.has_fixed for m, _ in req.parts):
        raise InvalidCacheOperationError(
            f"cannot swap request {request_id!r}: its sliding-window blocks / recurrent "
            "state live on the GPU only; preempt with mode='recompute'"
        )
    num_committed = len(req.tokens)
    keep = -(-num_committed // tokens_per_block)
    refuse(
        f"cannot swap out request {request_id!r} ({keep} blocks per role)",
        (m.move_shortage(seq, keep, GPU, HOST) for m, seq in req.parts),
    )
    for m, seq in req.parts:
        m.shrink(seq, keep, num_committed)
        m.move(seq, GPU, HOST)
    req.num_reserved = 0
    req.swapped = True


def swap_in(req: Request[RoleManager], request_id: RequestId) -> None:
    """Move swapped-out ``req`` back to the GPU in every role (its host blocks stay cached
    there). Mutates ``req`` (``swapped``, tables) and the pools.

    Raises:
        InvalidCacheOperationError: ``req`` is not swapped out; nothing changes.
        OutOfBlocksError: not enough GPU blocks in some role; nothing changes.
    """
    if not req.swapped:
        raise InvalidCacheOperationError(f"request {request_id!r} is not swapped out")
    keep = len(req.seqs[0].table)
    refuse(
        f"cannot resume request {request_id!r} ({keep} blocks per role)",
        (m.move_shortage(seq, keep, HOST, GPU) for m, seq in req.parts),
    )
    for m, seq in req.parts:
        m.move(seq, HOST, GPU)
    req.swapped = False
