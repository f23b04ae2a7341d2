"""Budget policies as plan variants: bytes pinned, blocks per tier, hand arithmetic.

Llama-3.1-8B-Instruct + EAGLE3 head: target 131,072 B/token (32 layers x 2 x 8 heads x
128 x 2 B), draft 4,096 B/token (1 layer), no fixed cost; 32 tokens per block: block
bytes 4,194,304 (target) and 131,072 (draft).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

import kvbudget
from kvbudget import SpecDecodeCache
from kvbudget.errors import InvalidArgumentError
from kvbudget.sim.policies import PolicyPlan, policy_plans

GIB = 2**30


@pytest.fixture(scope="module")
def base() -> kvbudget.Plan:
    return kvbudget.plan(kv_budget="20GiB", host_budget="64GiB", max_seq_len=8192, gpus_per_node=8)


def by_name(plan: kvbudget.Plan) -> dict[str, PolicyPlan]:
    return {p.name: p for p in policy_plans(plan)}


def test_doubled_host_pins_exactly_twice_the_budget(base: kvbudget.Plan) -> None:
    p = by_name(base)["doubled-host"]
    host = 64 * GIB
    assert [m.host.bytes for m in p.plan.managers] == [host, host]
    assert p.pinned_host_bytes == 2 * host
    assert p.host_budget_bytes == host
    assert p.node_pinned_host_bytes == 2 * host * 8
    # the common count is what the target's whole budget holds: 64 GiB / 4 MiB = 16,384
    assert p.plan.capacity.host_blocks == 16384


def test_kvbudget_pins_the_budget_split_by_slope(base: kvbudget.Plan) -> None:
    p = by_name(base)["kvbudget"]
    host = 64 * GIB
    assert p.plan is base
    assert p.pinned_host_bytes == host
    # draft = floor(H x 4096 / 135168); blocks = target share // 4 MiB
    draft = host * 4096 // 135168
    assert [m.host.bytes for m in base.managers] == [host - draft, draft]
    assert base.capacity.host_blocks == (host - draft) // (131072 * 32) == 15887


def test_no_host_drops_the_tier(base: kvbudget.Plan) -> None:
    p = by_name(base)["no-host"]
    assert p.pinned_host_bytes == 0
    assert p.plan.capacity.host_blocks == 0
    assert all(m.host.blocks == 0 for m in p.plan.managers)
    assert p.plan.capacity.gpu_blocks == base.capacity.gpu_blocks


def test_equal_split_halves_gpu_and_host(base: kvbudget.Plan) -> None:
    p = by_name(base)["equal-split"]
    gpu = sum(m.gpu.bytes for m in base.managers)
    managers = p.plan.managers
    assert [m.gpu.bytes for m in managers] == [gpu - gpu // 2, gpu // 2]
    # the target's half holds (gpu - gpu // 2) // 4 MiB blocks; the draft's half many more
    assert p.plan.capacity.gpu_blocks == (gpu - gpu // 2) // (131072 * 32)
    assert p.plan.capacity.host_blocks == (32 * GIB) // (131072 * 32) == 8192
    assert p.pinned_host_bytes == 64 * GIB


def test_target_geometry_of_a_head_like_the_target_is_kvbudget(base: kvbudget.Plan) -> None:
    # EAGLE3 head: 1 layer of the target's geometry: 131,072 x 1 / 32 = 4,096 = its real
    p = by_name(base)["target-geometry-draft"]
    assert p.plan.capacity == base.capacity
    assert p.gpu_overcommit_bytes == 0


def test_target_geometry_overprices_a_smaller_draft() -> None:
    # draft Llama-3.2-1B: 16 layers x 2 x 8 heads x 64 x 2 B = 32,768 B/token; priced at
    # 131,072 x 16 / 32 = 65,536: the split gives the draft twice what it needs, so both
    # pools hold fewer tokens: B x 131,072 / (131,072 + 65,536) for the target.
    plan = kvbudget.plan(
        target="meta-llama/Llama-3.1-8B-Instruct",
        draft="meta-llama/Llama-3.2-1B-Instruct",
        kv_budget="12GiB",
        max_seq_len=8192,
    )
    (p,) = policy_plans(plan, ("target-geometry-draft",))
    budget = 12 * GIB
    draft_share = budget * 65536 // (131072 + 65536)
    assert [m.gpu.bytes for m in p.plan.managers] == [budget - draft_share, draft_share]
    blocks = (budget - draft_share) // (131072 * 32)
    assert p.plan.capacity.gpu_blocks == blocks == 2048
    # kvbudget's own split: B / (131,072 + 32,768) tokens -> more blocks
    assert plan.capacity.gpu_blocks == budget // ((131072 + 32768) * 32) == 2457
    assert p.gpu_overcommit_bytes == 0
    assert any("65,536 B/token" in note for note in p.notes)


def test_every_variant_builds_a_cache_and_leaves_the_base_alone(base: kvbudget.Plan) -> None:
    before = replace(base)
    for p in policy_plans(base):
        cache = SpecDecodeCache.from_plan(p.plan)
        cache.check_invariants()
        assert cache.stats().pool("target", "host").total_blocks == p.plan.capacity.host_blocks
    assert base == before


def test_unknown_policy() -> None:
    with pytest.raises(InvalidArgumentError, match=r"unknown policy 'x'.*--policies"):
        policy_plans(kvbudget.plan(kv_budget="8GiB", max_seq_len=4096), ("x",))


def test_target_geometry_underprices_a_larger_draft() -> None:
    # target Llama-3.2-1B: 16 layers x 2 x 8 heads x 64 x 2 B = 32,768 B/token; draft
    # Llama-3.1-8B (32 layers, 131,072 B/token) priced at 32,768 x 32 / 16 = 65,536.
    # Split of 12 GiB: draft 12 GiB x 65,536 / 98,304 = 8 GiB, target 4 GiB -> 4 GiB /
    # (32,768 x 32) = 4,096 blocks; the draft's real blocks need 4,096 x 131,072 x 32 =
    # 16 GiB: 8 GiB over its share.
    plan = kvbudget.plan(
        target="meta-llama/Llama-3.2-1B-Instruct",
        draft="meta-llama/Llama-3.1-8B-Instruct",
        kv_budget="12GiB",
        max_seq_len=8192,
    )
    (p,) = policy_plans(plan, ("target-geometry-draft",))
    assert [m.gpu.bytes for m in p.plan.managers] == [4 * GIB, 8 * GIB]
    assert p.plan.capacity.gpu_blocks == 4096
    assert p.gpu_overcommit_bytes == 8 * GIB
    assert any("run out of memory" in note for note in p.notes)
