"""Recurrent-state slots of one role (Mamba, gated delta-net and KDA layers), and cached states.

A role whose plan has ``state_bytes_per_seq > 0`` holds ``max_batch_size`` fixed-size
state *slots* on the GPU, one per running request, taken at admit and released at free.
A slot holds the state after the request's last token (and the states at its lookahead
positions, ``1 + lookahead`` copies, for rollback), so it is never shared or cached.

Prefix reuse (vLLM's "align" mode for Mamba prefix caching): the plan also gives the role
``cached_states`` *checkpoints* of one state each (``state_bytes_per_checkpoint``). A
checkpoint holds the state right after a block boundary, keyed by that block's chained
hash, cached and evicted LRU like a kv block (no request owns one). A prefix of ``n``
blocks is a hit for the role when a checkpoint holds the state after block ``n - 1``;
the new request's slot starts from a copy of it (logged in ``restores`` as
``(checkpoint, slot)``, bytes ``0 .. state_bytes_per_checkpoint`` of the slot's row).

Which boundaries are saved: at admit, the prompt's last hashed block and, under the
``drop_last_block`` policy, the one before it; at commit, every block the commit hashed.
Under ``drop_last_block`` a block's hash covers the token after it
(:mod:`kvbudget.cache.hashing`): a prompt's last hashed block is its last one followed
by a prompt token, a commit hashes the blocks whose next token it brought, and a prompt
that diverges right after a block boundary hits one block less, hence the second
boundary. The cache picks a checkpoint for each (the least recently used one when none
is free) and lists them in ``SeqBlocks.saves`` as ``(boundary tokens, checkpoint)``: the
engine writes the state after that many tokens there in the same step (it holds the
state at every verified position; under ``drop_last_block`` that may be the state the
step started from). Checkpoints are
best effort and come out of the plan's state budget: ``max_batch_size`` running slots
always remain for the running requests.
"""

from __future__ import annotations

from kvbudget.cache.block_pool import BlockPool
from kvbudget.cache.ids import BlockHash, BlockId
from kvbudget.cache.request import SeqBlocks
from kvbudget.cache.shortage import Shortage
from kvbudget.plan_types import ManagerPlan


class StatePool(BlockPool):
    """A :class:`BlockPool` of ``max_batch_size`` slots, one per request of one role, and
    the role's cached states (``checkpoints``); see the module docstring."""

    __slots__ = ("boundaries_at_admit", "checkpoints", "restores", "role", "tokens_per_block")

    def __init__(
        self, plan: ManagerPlan, *, boundaries_at_admit: int = 1, record_copies: bool = False
    ) -> None:
        super().__init__(f"{plan.role}/gpu/state", plan.max_batch_size)
        self.role = plan.role
        self.tokens_per_block = plan.tokens_per_block
        self.boundaries_at_admit = boundaries_at_admit
        self.checkpoints = BlockPool(f"{plan.role}/gpu/state_cache", plan.cached_states)
        # (checkpoint, slot) copies to run, when the cache has real storage
        self.restores: list[tuple[BlockId, BlockId]] | None = [] if record_copies else None

    def hit(self, hashes: list[BlockHash], num_hit: int) -> bool:
        """Whether a checkpoint holds the state after block ``num_hit - 1`` (always True
        for ``num_hit == 0``). Reads only."""
        return num_hit == 0 or hashes[num_hit - 1] in self.checkpoints.hashes

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

    def admit(self, seq: SeqBlocks, hashes: list[BlockHash], num_hit: int, num_tokens: int) -> None:
        """Give ``seq`` a slot, restored from the checkpoint of a hit of ``num_hit``
        blocks, and pick checkpoints for the prompt's last boundaries. Precondition:
        :meth:`shortage` returned None and :meth:`hit` True."""
        slot = self.take()[0]
        seq.slot = slot
        if num_hit:
            cp = self.checkpoints
            b = cp.hashes[hashes[num_hit - 1]]
            cp.acquire_hit(b)  # leaves the LRU; back at its most recent end below
            cp.release(b)
            if self.restores is not None:
                self.restores.append((b, slot))
        full = min(num_tokens // self.tokens_per_block, len(hashes))
        first = max(num_hit + 1, full - self.boundaries_at_admit + 1)
        seq.saves = self._save(hashes, range(first, full + 1))

    def commit(self, seq: SeqBlocks, hashes: list[BlockHash], start: int) -> None:
        """Pick checkpoints for the boundaries after blocks ``start ..`` of ``hashes`` (the
        blocks a commit completed); replaces ``seq.saves``."""
        seq.saves = self._save(hashes, range(start + 1, len(hashes) + 1))

    def _save(self, hashes: list[BlockHash], boundaries: range) -> list[tuple[int, BlockId]]:
        """A checkpoint for each boundary (blocks before it) not already cached."""
        cp = self.checkpoints
        saves: list[tuple[int, BlockId]] = []
        if cp.num_blocks == 0:
            return saves
        for n in boundaries[-cp.num_blocks :]:  # more would evict this call's own saves
            h = hashes[n - 1]
            if cp.find(h) is not None:
                continue
            b = cp.take()[0]  # free first, else the least recently used (never owned)
            cp.set_hash(b, h)
            cp.release(b)  # cached, most recently used
            saves.append((n * self.tokens_per_block, b))
        return saves

    def detach(self, seq: SeqBlocks) -> None:
        """Release the slot of ``seq``, if it holds one. Never fails."""
        if seq.slot is not None:
            self.release(seq.slot)
            seq.slot = None
        seq.saves = []
