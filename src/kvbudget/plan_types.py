"""The immutable result of planning: per rank, per manager, per tier.

These are the values the cache builds its pools from (``SpecDecodeCache.from_plan``) and
that ``kvbudget plan --json`` prints. All sizes are integers: bytes, blocks or tokens,
per rank unless a name says ``node``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvbudget.cost import WindowGroup
from kvbudget.split import Tier

Role = Literal["target", "draft"]
ROLES: tuple[Role, ...] = ("target", "draft")


@dataclass(frozen=True, kw_only=True)
class TierPlan:
    """One manager's share of one tier on one rank.

    ``blocks`` whole blocks of ``block_bytes`` hold the growing layers' tokens;
    ``tokens == blocks x tokens_per_block``. On the GPU the manager's fixed bytes
    (window pools, recurrent state) come out of ``bytes`` first. ``padding_bytes`` is what
    is left over: ``bytes - fixed - blocks x block_bytes``.
    """

    tier: Tier
    bytes: int
    blocks: int
    tokens: int
    padding_bytes: int


@dataclass(frozen=True, kw_only=True)
class ManagerPlan:
    """The cache of one model role over its layers on one rank.

    * ``slope_bytes_per_token``: bytes per token of the layers whose cache grows;
      ``block_bytes = slope_bytes_per_token x tokens_per_block``.
    * ``fixed_bytes``: window pools + recurrent state, GPU-resident:
      ``window_bytes + state_bytes_per_seq x max_batch_size``.
    * ``window_groups``: sliding-window layers by window size; each is a GPU pool of
      ``blocks_per_seq x max_batch_size`` blocks of ``bytes_per_token x tokens_per_block``.
    * ``state_bytes_per_seq``: one recurrent-state slot; ``max_batch_size`` slots.
    """

    role: Role
    model: str
    layers: Literal["model", "mtp", "all"]
    num_layers: int
    kv_dtype: str
    tokens_per_block: int
    slope_bytes_per_token: int
    fixed_bytes: int
    window_bytes: int
    window_groups: tuple[WindowGroup, ...]
    state_bytes_per_seq: int
    max_batch_size: int
    gpu: TierPlan
    host: TierPlan
    disk: TierPlan

    @property
    def block_bytes(self) -> int:
        """Bytes of one block of the growing layers on this rank."""
        return self.slope_bytes_per_token * self.tokens_per_block

    def tier(self, name: Tier) -> TierPlan:
        """The :class:`TierPlan` of ``name`` ("gpu", "host" or "disk")."""
        return {"gpu": self.gpu, "host": self.host, "disk": self.disk}[name]


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Bytes per rank given to KV caches, and where the GPU figure came from."""

    gpu_bytes: int
    host_bytes: int
    disk_bytes: int
    gpu_source: str  # how gpu_bytes was obtained, in words
    gpu_name: str | None = None
    gpu_memory_bytes: int | None = None
    weights_bytes: int | None = None
    reserve_bytes: int | None = None
    memory_fraction: float | None = None
    gpus_per_node: int = 1
    host_memory_bytes: int | None = None

    @property
    def node_host_bytes(self) -> int:
        """Host bytes pinned by all ranks of one node."""
        return self.host_bytes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """What the plan holds: tokens common to all managers, and what that buys."""

    tokens: int  # GPU tokens every manager holds (whole blocks)
    host_tokens: int
    disk_tokens: int
    max_seq_len: int
    max_draft_len: int
    lookahead_tokens: int
    max_batch_size: int
    max_concurrency: int  # sequences of max_seq_len (+ lookahead) that fit on the GPU
    max_seq_len_at_batch: int  # longest sequence that fits at max_batch_size


@dataclass(frozen=True, kw_only=True)
class Plan:
    """A complete KV plan for one rank of a speculative-decoding deployment."""

    target: str
    draft: str | None
    spec: str
    tp: int
    pp: int
    kv_dtype: str
    tokens_per_block: int
    budget: Budget
    managers: tuple[ManagerPlan, ...]
    capacity: Capacity
    warnings: tuple[str, ...] = ()

    def manager(self, role: Role) -> ManagerPlan | None:
        """The manager of ``role``, or None (e.g. no draft cache for ngram)."""
        for m in self.managers:
            if m.role == role:
                return m
        return None
