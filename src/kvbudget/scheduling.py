"""Continuous batching over a :class:`~kvbudget.SpecDecodeCache`: the admission and
preemption rules, one copy for the reference engine and the simulator (no torch).

The reference engine (:mod:`kvbudget.engine.scheduler`) and the simulator's replay
(:mod:`kvbudget.sim.replay`) keep their own request records (token lists and sampling
state; integers and roofline work) and call these functions for every decision that
touches the cache's blocks, so both follow one policy:

1. **Decode reservations**, oldest running request first (:func:`reserve_or_preempt`):
   when the GPU has no block for a request's ``k + 1`` slots, the youngest running
   request is preempted, possibly the request itself; the oldest never waits for a
   younger one. A request alone that still does not fit is reported (``ALONE``): the
   engine raises (the planner refuses such plans), the simulator drops it
   (``outgrew_gpu``: a trace may hold a request no plan serves).
2. **Preemption** (:func:`preempt`): ``swap`` moves the blocks to the host tier, falling
   back to ``recompute`` when the host tier cannot take them; ``recompute`` drops them
   (re-admit the verified tokens).
3. **Resume and admission** (:class:`BatchRules`) only in a step that preempted
   nothing (a request swapped out to make room would come straight back), while fewer
   than ``max_batch_size`` requests run; swapped requests first, oldest first.

Two rules are settings, because the two paths differ there and the simulator's
published results rest on its choice (README, "One scheduler"):

* ``admit_while_swapped``: the engine admits nothing while a request waits swapped
  out (False); the simulator admits behind a swapped request that cannot resume yet
  (True);
* ``watermark``: the engine admits a prompt only when one free GPU block per running
  request remains after it (True, vLLM's ``watermark`` idea); the simulator admits
  while the prompt fits (False).

Prefill budgets are the caller's: the engine prefills an admitted prompt whole in its
step, the simulator in chunks of ``max_num_batched_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from kvbudget.cache import PreemptMode, RequestId, SpecDecodeCache
from kvbudget.errors import InvalidArgumentError, InvalidCacheOperationError, OutOfBlocksError

T = TypeVar("T")


class Reserving(Protocol):
    """A cache that reserves lookahead (:meth:`SpecDecodeCache.reserve
    <kvbudget.SpecDecodeCache.reserve>`, raising OutOfBlocksError when the GPU lacks
    blocks): what :func:`reserve_or_preempt` needs."""

    def reserve(self, request_id: RequestId, num_tokens: int) -> None: ...


class Reserved(Enum):
    """What :func:`reserve_or_preempt` did for one request."""

    RESERVED = "reserved"  # room reserved (after preempting younger requests, maybe)
    PREEMPTED = "preempted"  # the request itself was the youngest: preempted
    ALONE = "alone"  # the only running request, and no room: nothing was changed


@dataclass(frozen=True, kw_only=True)
class BatchRules:
    """The settings of the policy (module docstring)."""

    max_batch_size: int
    admit_while_swapped: bool
    watermark: bool

    def __post_init__(self) -> None:
        if type(self.max_batch_size) is not int or self.max_batch_size < 1:
            raise InvalidArgumentError(
                f"max_batch_size must be an int >= 1, got {self.max_batch_size!r}"
            )

    def may_resume(self, *, running: int, preempted: bool) -> bool:
        """Whether a swapped-out request may try to resume now."""
        return not preempted and running < self.max_batch_size

    def may_admit(
        self,
        *,
        running: int,
        swapped: int,
        preempted: bool,
        available_blocks: int,
        need_blocks: int,
    ) -> bool:
        """Whether a waiting prompt of ``need_blocks`` GPU blocks may try to be admitted
        now, with ``available_blocks`` free or evictable (the cache still decides
        whether it fits)."""
        if preempted or running >= self.max_batch_size:
            return False
        if swapped and not self.admit_while_swapped:
            return False
        return not (self.watermark and running and available_blocks - need_blocks < running)


def preempt(
    cache: SpecDecodeCache, request_id: RequestId, mode: PreemptMode
) -> tuple[PreemptMode, tuple[int, ...]]:
    """Take ``request_id`` off the GPU by ``mode``; a swap the host tier cannot take (or
    a cache that cannot swap) falls back to recompute. Returns the mode used and the
    request's verified tokens (what a recomputed request is re-admitted with)."""
    if mode == "swap":
        try:
            tokens = cache.preempt(request_id, mode="swap")
        except (OutOfBlocksError, InvalidCacheOperationError):
            pass
        else:
            return "swap", tokens
    return "recompute", cache.preempt(request_id, mode="recompute")


def reserve_or_preempt(
    cache: Reserving,
    running: list[T],
    request: T,
    request_id: RequestId,
    slots: int,
    preempt_youngest: Callable[[T], None],
) -> Reserved:
    """Reserve ``slots`` tokens for running ``request``; while the GPU lacks blocks,
    ``preempt_youngest(running[-1])`` (which must take it out of ``running``) and try
    again (module docstring, rule 1)."""
    while True:
        try:
            cache.reserve(request_id, slots)
            return Reserved.RESERVED
        except OutOfBlocksError:
            victim = running[-1]
            if len(running) == 1:
                return Reserved.ALONE
            preempt_youngest(victim)
            if victim is request:
                return Reserved.PREEMPTED
