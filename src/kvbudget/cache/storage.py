"""Real memory behind the pools: one byte tensor per role, tier and kind.

For each role the plan's bytes become tensors of ``uint8`` rows, one row per block:

* ``kv[tier]``: ``[plan blocks, block_bytes]`` on the GPU tier's device, in (pinned, when
  CUDA is available) host memory, or in a file-backed map for the disk tier;
* ``windows[g]``: ``[blocks_per_seq x max_batch_size, bytes_per_token x tokens_per_block]``
  on the GPU tier's device;
* ``state``: ``[max_batch_size, state_bytes_per_seq]`` on the GPU tier's device;
* ``checkpoints``: ``[cached_states, state_bytes_per_checkpoint]`` there too (cached
  recurrent states, :mod:`kvbudget.cache.recurrent_state`).

Block ``b`` of a kv tier is row ``b`` of *every* role's tensor in that tier (the roles
share their block ids, :mod:`kvbudget.cache.kv_tiers`), so one copy log moves every role.

Their bytes add up to the plan's bytes for that role and tier minus its padding, which
:attr:`RoleStorage.padding_bytes` reports. An engine views a row with the dtype and
layer layout it uses. torch is imported here only, when storage is requested, so the rest
of the cache runs without it.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

from kvbudget.cache.ids import BlockId
from kvbudget.cache.kv_tiers import Copy
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import ManagerPlan
from kvbudget.split import TIERS

if TYPE_CHECKING:
    import torch


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without torch
        raise InvalidArgumentError(
            "cache storage needs torch; install the pinned CPU build "
            "(pip install torch==2.13.0) or build the cache with device=None (metadata only)"
        ) from exc
    return torch


class RoleStorage:
    """The tensors of one role; see the module docstring. Owns its memory."""

    def __init__(self, plan: ManagerPlan, device: str, th: Any) -> None:
        """Allocate every tensor of ``plan``; raises InvalidArgumentError for a device
        torch cannot use."""
        self.role = plan.role
        self.block_bytes = plan.block_bytes
        cuda = th.cuda.is_available()
        self.kv: list[torch.Tensor] = []
        for tier in TIERS:
            blocks = plan.tier(tier).blocks
            shape = (blocks, self.block_bytes)
            if tier == "gpu":
                self.kv.append(th.zeros(shape, dtype=th.uint8, device=device))
            elif tier == "host":
                pin = cuda and blocks * self.block_bytes > 0
                self.kv.append(th.zeros(shape, dtype=th.uint8, pin_memory=pin))
            else:
                self.kv.append(_file_tensor(th, shape))
        self.windows: list[torch.Tensor] = [
            th.zeros(
                (g.blocks_per_seq * plan.max_batch_size, g.bytes_per_token * plan.tokens_per_block),
                dtype=th.uint8,
                device=device,
            )
            for g in plan.window_groups
        ]
        self.state: torch.Tensor | None = (
            th.zeros((plan.max_batch_size, plan.state_bytes_per_seq), dtype=th.uint8, device=device)
            if plan.state_bytes_per_seq > 0
            else None
        )
        self.checkpoints: torch.Tensor | None = (
            th.zeros(
                (plan.cached_states, plan.state_bytes_per_checkpoint),
                dtype=th.uint8,
                device=device,
            )
            if plan.state_bytes_per_seq > 0
            else None
        )
        self.padding_bytes: dict[str, int] = {
            tier: plan.tier(tier).bytes - self.tier_bytes(tier) for tier in TIERS
        }

    def tier_bytes(self, tier: str) -> int:
        """Bytes this role holds in ``tier`` (kv blocks, plus windows and state on gpu)."""
        i = ("gpu", "host", "disk").index(tier)
        total = self.kv[i].numel()
        if tier == "gpu":
            total += sum(w.numel() for w in self.windows)
            total += 0 if self.state is None else self.state.numel()
            total += 0 if self.checkpoints is None else self.checkpoints.numel()
        return int(total)

    def run_copies(self, copies: list[Copy], th: Any) -> None:
        """Execute ``copies`` in order, batching consecutive copies between the same two
        tiers into one gather and one scatter. A batch never writes one block twice
        (``index_copy_`` leaves duplicate targets undefined on CUDA): a block offloaded
        and overwritten again in the same operation starts a new batch."""
        i = 0
        n = len(copies)
        while i < n:
            src_tier, _, dst_tier, _ = copies[i]
            j = i
            targets: set[int] = set()
            while j < n and copies[j][0] == src_tier and copies[j][2] == dst_tier:
                if copies[j][3] in targets:
                    break
                targets.add(copies[j][3])
                j += 1
            src = self.kv[src_tier]
            dst = self.kv[dst_tier]
            src_idx = th.tensor([c[1] for c in copies[i:j]], dtype=th.long)
            dst_idx = th.tensor([c[3] for c in copies[i:j]], dtype=th.long)
            rows = src.index_select(0, src_idx.to(src.device))
            # a non-blocking device-to-host copy returns before its bytes land, and the CPU
            # index_copy_ would read them early: only copies onto a CUDA tensor (ordered
            # on its stream) may be non-blocking
            rows = rows.to(dst.device, non_blocking=dst.is_cuda)
            dst.index_copy_(0, dst_idx.to(dst.device), rows)
            i = j
        if any(t.is_cuda for t in self.kv):
            th.cuda.synchronize()


def _file_tensor(th: Any, shape: tuple[int, int]) -> torch.Tensor:
    """A zeroed ``uint8`` tensor backed by an unlinked temporary file (the disk tier)."""
    nbytes = shape[0] * shape[1]
    if nbytes == 0:
        empty: torch.Tensor = th.zeros(shape, dtype=th.uint8)
        return empty
    fd, path = tempfile.mkstemp(prefix="kvbudget-disk-")
    try:
        os.ftruncate(fd, nbytes)
        flat = th.from_file(path, shared=True, size=nbytes, dtype=th.uint8)
    finally:
        os.close(fd)
        os.unlink(path)  # the mapping stays valid; the file goes away with it
    view: torch.Tensor = flat.view(shape)
    return view


class CacheStorage:
    """The tensors of every role of a cache, in the coordinator's role order."""

    def __init__(self, plans: tuple[ManagerPlan, ...], device: str) -> None:
        """Allocate storage for every manager plan on ``device`` ("cpu", "cuda", ...).

        Raises InvalidArgumentError when torch is missing or the device is unusable.
        """
        th = _import_torch()
        self._torch = th
        try:
            dev = th.device(device)
        except (RuntimeError, TypeError) as exc:
            raise InvalidArgumentError(f"unknown storage device {device!r}: {exc}") from exc
        if dev.type == "cuda" and not th.cuda.is_available():
            raise InvalidArgumentError(
                f"storage device {device!r} asked for, but torch sees no CUDA device; "
                "use device='cpu' or device=None (metadata only)"
            )
        if dev.type not in ("cpu", "cuda"):
            raise InvalidArgumentError(
                f"storage device {device!r} is not supported; use 'cpu', 'cuda' or 'cuda:N' "
                "(or device=None for metadata only)"
            )
        self.device = str(dev)
        try:
            self.roles: tuple[RoleStorage, ...] = tuple(RoleStorage(p, device, th) for p in plans)
        except (RuntimeError, MemoryError) as exc:
            total = sum(p.tier(t).bytes for p in plans for t in TIERS)
            raise InvalidArgumentError(
                f"could not allocate the cache's {total} bytes on {device!r} ({exc}); plan "
                "smaller --kv-budget/--host-budget for this machine, or build the cache with "
                "device=None (metadata only)"
            ) from None

    def run_copies(self, copies: list[Copy]) -> None:
        """Execute the logged kv copies in every role (see :meth:`RoleStorage.run_copies`)."""
        for role in self.roles:
            role.run_copies(copies, self._torch)

    def restore_states(self, role_index: int, restores: list[tuple[BlockId, BlockId]]) -> None:
        """Copy each cached state ``(checkpoint, slot)`` into the first
        ``state_bytes_per_checkpoint`` bytes of that slot's row, in order."""
        role = self.roles[role_index]
        assert role.state is not None and role.checkpoints is not None
        width = role.checkpoints.shape[1]
        for checkpoint, slot in restores:
            role.state[slot, :width].copy_(role.checkpoints[checkpoint])

    def state_row(self, role_index: int, slot: BlockId) -> torch.Tensor:
        """The bytes of one recurrent-state slot (a view)."""
        state = self.roles[role_index].state
        assert state is not None
        row: torch.Tensor = state[slot]
        return row

    def checkpoint_row(self, role_index: int, checkpoint: BlockId) -> torch.Tensor:
        """The bytes of one cached state (a view)."""
        checkpoints = self.roles[role_index].checkpoints
        assert checkpoints is not None
        row: torch.Tensor = checkpoints[checkpoint]
        return row

    def page(self, role_index: int, tier: int, block: BlockId) -> torch.Tensor:
        """The bytes of one block (a view; writing to it writes the cache)."""
        row: torch.Tensor = self.roles[role_index].kv[tier][block]
        return row
