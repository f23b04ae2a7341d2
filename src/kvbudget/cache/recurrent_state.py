"""Recurrent-state slots of one role (Mamba / gated delta-net layers).

A role whose plan has ``state_bytes_per_seq > 0`` holds ``max_batch_size`` fixed-size
state slots on the GPU, one per running request, taken at admit and released at free.
A slot's content is the state *after* the request's last token, so it cannot be reused
by another request (no hashing, no caching) nor swapped (the plan gives it no host bytes).
"""

from __future__ import annotations

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.request import SeqBlocks
from kvbudget.cache.shortage import Shortage
from kvbudget.plan_types import Role


class StatePool(BlockPool):
    """A :class:`BlockPool` of ``max_batch_size`` slots, one per request of one role."""

    __slots__ = ("role",)

    def __init__(self, role: Role, max_batch_size: int) -> None:
        super().__init__(f"{role}/gpu/state", max_batch_size)
        self.role = role

    def shortage(self) -> Shortage | None:
        """Why a new request cannot get a slot, or None. Reads only."""
        if self.free:
            return None
        return Shortage(
            role=self.role,
            tier="gpu",
            pool="state",
            needed=1,
            available=0,
            message=(
                f"role {self.role} has no free recurrent-state slot: all "
                f"max_batch_size={self.num_blocks} slots are taken; free a request or raise "
                "max_batch_size in the plan"
            ),
        )

    def attach(self, seq: SeqBlocks) -> None:
        """Give ``seq`` a slot. Precondition: :meth:`shortage` returned None."""
        seq.slot = self.take()[0]

    def detach(self, seq: SeqBlocks) -> None:
        """Release the slot of ``seq``, if it holds one. Never fails."""
        if seq.slot is not None:
            self.release(seq.slot)
            seq.slot = None
