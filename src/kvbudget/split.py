"""Splitting one tier's budget between the target and the draft manager.

DESIGN ledger rules 3-5, in integers:

* **gpu**: the fixed costs come off first, the rest is divided by slope so both managers
  hold the same number of tokens::

      rest   = B - It - Id
      draft  = Id + floor(rest x Sd / (St + Sd))
      target = B - draft

  (``rest / (St + Sd)`` is the common token count T; the draft gets exactly ``Sd x T``
  bytes of it, rounded down, so the target holds T or T + 1 tokens and the draft T.)
* **host** / **disk**: by slope only (fixed costs are GPU-resident)::

      draft  = floor(H x Sd / (St + Sd)),   target = H - draft

The parts always sum to the total; nothing is mutated; a draft that costs nothing gets 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvbudget._validate import require_int
from kvbudget.cost import CacheCost
from kvbudget.errors import InfeasibleBudgetError, InvalidArgumentError

Tier = Literal["gpu", "host", "disk"]
TIERS: tuple[Tier, ...] = ("gpu", "host", "disk")


@dataclass(frozen=True, kw_only=True)
class BudgetSplit:
    """One tier's budget split between target and draft; ``target + draft == total_bytes``."""

    tier: Tier
    total_bytes: int
    target: int
    draft: int
    fixed_bytes: int  # intercepts paid first (gpu only; 0 on host/disk)
    tokens: int  # tokens both managers hold at least (the draft's count)


def split_budget(
    total_bytes: int,
    *,
    target: CacheCost,
    draft: CacheCost,
    tier: Tier = "gpu",
) -> BudgetSplit:
    """Split ``total_bytes`` of one tier between the target and draft managers.

    Returns a new :class:`BudgetSplit`; the inputs are not modified.

    Raises:
        InvalidArgumentError: a negative or non-integer budget, or an unknown tier.
        InfeasibleBudgetError: on the GPU, the budget does not cover the fixed costs.
    """
    total = require_int("total_bytes", total_bytes)
    if tier not in TIERS:
        raise InvalidArgumentError(f"tier must be one of {', '.join(TIERS)}, got {tier!r}")
    if not isinstance(target, CacheCost) or not isinstance(draft, CacheCost):
        raise InvalidArgumentError("target and draft must be CacheCost values")
    slope = target.slope + draft.slope
    if tier == "gpu":
        fixed = target.intercept + draft.intercept
        if total < fixed:
            raise InfeasibleBudgetError(
                f"the GPU budget of {total} bytes cannot cover the fixed cost of {fixed} bytes "
                f"(target {target.intercept} + draft {draft.intercept}: sliding-window and "
                "recurrent-state layers for the max batch size); raise the KV budget "
                "(--kv-budget / --memory-fraction), lower max_batch_size, use a smaller "
                "kv/state dtype, or shard over more ranks (tp/pp)"
            )
        rest = total - fixed
        share = rest * draft.slope // slope if slope else 0
        draft_bytes = draft.intercept + share
        tokens = rest // slope if slope else 0
    else:
        fixed = 0
        draft_bytes = total * draft.slope // slope if slope else 0
        tokens = total // slope if slope else 0
    return BudgetSplit(
        tier=tier,
        total_bytes=total,
        target=total - draft_bytes,
        draft=draft_bytes,
        fixed_bytes=fixed,
        tokens=tokens,
    )
