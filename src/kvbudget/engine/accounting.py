"""The cache's real bytes against the plan's, per role and tier.

The storage (:mod:`kvbudget.cache.storage`) allocates the plan's blocks per role and tier
(kv rows, and on the GPU the window pools and state slots); what a tier's plan bytes do
not fill with whole blocks is padding, never allocated. So for every role and tier
``bytes + padding_bytes == plan_bytes``, where ``bytes`` is measured on the tensors.
"""

from __future__ import annotations

from kvbudget.cache.storage import CacheStorage
from kvbudget.plan_types import Plan
from kvbudget.split import TIERS


def storage_report(plan: Plan, storage: CacheStorage) -> dict[str, dict[str, dict[str, int]]]:
    """``{role: {tier: {"bytes", "plan_bytes", "padding_bytes"}}}`` measured on
    ``storage``'s tensors. Reads only."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for manager, role in zip(plan.managers, storage.roles, strict=True):
        out[manager.role] = {
            tier: {
                "bytes": role.tier_bytes(tier),
                "plan_bytes": manager.tier(tier).bytes,
                "padding_bytes": manager.tier(tier).bytes - role.tier_bytes(tier),
            }
            for tier in TIERS
        }
    return out
