"""The pools of one model role (target or draft) that are its own, on one rank.

The growing layers' blocks are shared by every role under one set of block ids
(:class:`~kvbudget.cache.kv_tiers.KvTiers`); what differs per role lives here, sized by
the role's :class:`~kvbudget.plan_types.ManagerPlan`:

* ``windows``: the sliding-window groups (:class:`~kvbudget.cache.windows.WindowPools`,
  None when the role has none);
* ``state``: the recurrent-state slots and cached states
  (:class:`~kvbudget.cache.recurrent_state.StatePool`, None when
  ``state_bytes_per_seq == 0``).

It keeps no request table of its own: the coordinator holds one
:class:`~kvbudget.cache.request.SeqBlocks` per request and role and passes it in. Methods
named ``*_shortage`` only read state and return a :class:`Shortage` when an operation
would not fit; the matching mutating method assumes that the check passed.
"""

from __future__ import annotations

from collections.abc import Iterator

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.ids import BlockHash
from kvbudget.cache.recurrent_state import StatePool
from kvbudget.cache.request import SeqBlocks
from kvbudget.cache.shortage import Shortage
from kvbudget.cache.windows import WindowPools
from kvbudget.plan_types import ManagerPlan
from kvbudget.split import Tier


class RoleManager:
    """The window groups and recurrent state of one role; see the module docstring."""

    __slots__ = ("plan", "role", "state", "windows")

    def __init__(
        self, plan: ManagerPlan, *, state_boundaries_at_admit: int = 1, record_copies: bool = False
    ) -> None:
        """Pools from ``plan``; ``state_boundaries_at_admit``: how many of a prompt's last
        block boundaries get a cached state (see :mod:`kvbudget.cache.recurrent_state`);
        ``record_copies``: log state restores for real storage."""
        self.plan = plan
        self.role = plan.role
        self.windows: WindowPools | None = WindowPools(plan) if plan.window_groups else None
        self.state: StatePool | None = (
            StatePool(
                plan, boundaries_at_admit=state_boundaries_at_admit, record_copies=record_copies
            )
            if plan.state_bytes_per_seq > 0
            else None
        )

    @property
    def has_fixed(self) -> bool:
        """Whether the role has pools sized per sequence (GPU-only: no swap)."""
        return self.windows is not None or self.state is not None

    def hit(self, hashes: list[BlockHash], num_hit: int) -> bool:
        """Whether the window groups and cached states hold what a hit of ``num_hit``
        blocks needs. Reads only."""
        if self.windows is not None and not self.windows.hit(hashes, num_hit):
            return False
        return self.state is None or self.state.hit(hashes, num_hit)

    def admit_shortage(
        self, hashes: list[BlockHash], num_hit: int, num_tokens: int
    ) -> Shortage | None:
        """Why a prompt of ``num_tokens`` (its first ``num_hit`` blocks a hit) would not get
        its window blocks or state slot, or None. Reads only."""
        if self.windows is not None:
            reason = self.windows.shortage(None, num_tokens, num_tokens, hashes, num_hit)
            if reason is not None:
                return reason
        return self.state.shortage() if self.state is not None else None

    def admit(self, seq: SeqBlocks, hashes: list[BlockHash], num_hit: int, num_tokens: int) -> None:
        """Fill the window tables and state slot of ``seq`` for a new prompt. Precondition:
        :meth:`admit_shortage` returned None."""
        if self.windows is not None:
            self.windows.admit(seq, num_tokens, hashes, num_hit)
        if self.state is not None:
            self.state.admit(seq, hashes, num_hit, num_tokens)

    def release_all(self, seq: SeqBlocks) -> None:
        """Release every window block and the state slot of ``seq``. Never fails."""
        if self.windows is not None:
            self.windows.release_all(seq)
        if self.state is not None:
            self.state.detach(seq)

    def named_pools(self) -> Iterator[tuple[Tier, str, BlockPool]]:
        """The role's own pools as ``(tier, kind, pool)``: the window groups, then the
        state slots. Reads only."""
        if self.windows is not None:
            for g, pool in zip(self.windows.groups, self.windows.pools, strict=True):
                yield "gpu", f"window{g.window_tokens}", pool
        if self.state is not None:
            yield "gpu", "state", self.state
            yield "gpu", "state_cache", self.state.checkpoints
