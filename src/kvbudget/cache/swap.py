"""Swap: moving a running request's kv blocks between the GPU and the host tier.

:func:`swap_out` / :func:`swap_in` work on a request in every role (lockstep);
:func:`move_shortage` / :func:`move` are their per-role check and apply steps.

``SpecDecodeCache.preempt(mode="swap")`` and ``resume`` call :func:`swap_out` and
:func:`swap_in`. Both check every role first and then move the request in every role, so a
refusal raises and changes nothing. Blocks whose hash the destination tier already holds
are shared, not copied; the source tier keeps hashed blocks cached. Copies are logged in
each manager's ``copies``; the caller runs them (``SpecDecodeCache._flush``).
"""

from __future__ import annotations

from kvbudget.cache.ids import BlockId, RequestId
from kvbudget.cache.manager import GPU, HOST, RoleManager
from kvbudget.cache.request import Request, SeqBlocks
from kvbudget.cache.shortage import Shortage, refuse
from kvbudget.errors import InvalidCacheOperationError
from kvbudget.split import TIERS


def swap_out(req: Request, request_id: RequestId, tokens_per_block: int) -> None:
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
        (move_shortage(m, seq, keep, GPU, HOST) for m, seq in req.parts),
    )
    for m, seq in req.parts:
        m.shrink(seq, keep, num_committed)
        move(m, seq, GPU, HOST)
    req.num_reserved = 0
    req.swapped = True


def swap_in(req: Request, request_id: RequestId) -> None:
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
        (move_shortage(m, seq, keep, HOST, GPU) for m, seq in req.parts),
    )
    for m, seq in req.parts:
        move(m, seq, HOST, GPU)
    req.swapped = False


# ---------------------------------------------------------------------------- one role
def move_shortage(
    m: RoleManager, seq: SeqBlocks, num_blocks: int, src: int, dst: int
) -> Shortage | None:
    """Why the first ``num_blocks`` of ``seq`` cannot move from tier ``src`` to ``dst`` of
    ``m``, or None. Blocks whose hash ``dst`` already holds are shared, not copied.
    Reads only."""
    s, d = m.tiers[src], m.tiers[dst]
    need = pinned = 0
    for b in seq.table[:num_blocks]:
        h = s.block_hash[b]
        db = d.by_hash.get(h) if h is not None else None
        if db is None:
            need += 1
        elif d.refcount[db] == 0:
            pinned += 1
    have = d.num_available - pinned
    if need > have:
        hint = (
            "raise host_budget in the plan or preempt with mode='recompute'"
            if dst == HOST
            else "free or preempt other requests first"
        )
        return Shortage(
            role=m.role,
            tier=TIERS[dst],
            pool="kv",
            needed=need,
            available=have,
            message=(
                f"role {m.role} needs {need} free {TIERS[dst]} blocks to move the request, "
                f"{have} are free or evictable ({d.num_blocks} in the pool); {hint}"
            ),
        )
    return None


def move(m: RoleManager, seq: SeqBlocks, src: int, dst: int) -> None:
    """Move every block of ``seq`` from tier ``src`` to ``dst`` of ``m`` (copies logged),
    then release the source blocks tail first (hashed ones stay cached there). Replaces
    ``seq.table``. Precondition: :func:`move_shortage` returned None."""
    s, d = m.tiers[src], m.tiers[dst]
    old = seq.table
    new: list[BlockId] = list(old)
    missing: list[int] = []
    for i, b in enumerate(old):
        h = s.block_hash[b]
        db = d.by_hash.get(h) if h is not None else None
        if db is None:
            missing.append(i)
        else:
            d.acquire(db)
            new[i] = db
    for i in missing:
        b = old[i]
        db = m.take(dst)
        if m.copies is not None:
            m.copies.append((src, b, dst, db))
        h = s.block_hash[b]
        if h is not None:
            d.set_hash(db, h)
        new[i] = db
        if dst > src:
            d.offloaded_blocks += 1
        else:
            s.onboarded_blocks += 1
    for i in range(len(old) - 1, -1, -1):
        s.release(old[i])
    seq.table = new
