"""kvbudget's budget ledger of one rank: what every engine model starts from.

The planner (:func:`kvbudget.planner.build_plan`) prices each role's cache per PP stage,
takes each stage's GPU budget and splits every tier between the roles (ledger rules 3
and 4 of the design); the result is one :class:`Ledger`. An engine model reads it with
the :class:`~kvbudget.deployment.Deployment` and says what its engine allocates.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.plan_types import Budget, ManagerPlan, StagePlan


@dataclass(frozen=True, kw_only=True)
class Ledger:
    """The budget and its split on one rank, per role and stage.

    * ``managers``: one per role, on the reported stage ``pp_stage`` (the last, where
      draft layers live), each with its share of every tier and the common blocks.
    * ``gpu_blocks``, ``host_blocks``, ``disk_blocks``: blocks every role with growing
      layers holds in its share, at the binding stage ``binding_pp_stage`` (GPU) and the
      tightest stage (host, disk); with no growing layer, ``gpu_blocks`` is one
      full-length sequence's blocks per batch slot (0-byte blocks).
    * ``binding_gpu_bytes`` and ``binding_fixed_bytes``: that stage's GPU budget and the
      fixed costs taken from it first.
    * ``max_weights_bytes``: weights on the most loaded rank (target + draft), None
      when the configs are too sparse to count them.
    * ``warnings``: what the ledger found (the deployment's notes first).
    """

    managers: tuple[ManagerPlan, ...]
    budget: Budget
    stages: tuple[StagePlan, ...]
    pp_stage: int
    binding_pp_stage: int
    gpu_blocks: int
    host_blocks: int
    disk_blocks: int
    growing: bool
    binding_gpu_bytes: int
    binding_fixed_bytes: int
    max_weights_bytes: int | None
    warnings: tuple[str, ...] = ()

    @property
    def min_stage_gpu_bytes(self) -> int:
        """The smallest GPU KV budget of any PP stage: safe for a per-GPU engine knob."""
        if not self.stages:
            return self.budget.gpu_bytes
        return min(stage.gpu_bytes for stage in self.stages)

    @property
    def host_bytes(self) -> int:
        """Host KV bytes per rank, every role together."""
        return sum(m.host.bytes for m in self.managers)


__all__ = ["Ledger"]
