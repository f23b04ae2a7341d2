"""Splitting one tier's budget between target and draft (kvbudget.split)."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget import (
    BudgetSplit,
    CacheCost,
    InfeasibleBudgetError,
    InvalidArgumentError,
    KvBudgetError,
    split_budget,
)

# --------------------------------------------------------------------------- exact examples


def test_gpu_fixed_costs_first_then_same_tokens() -> None:
    target, draft = CacheCost(3, 100), CacheCost(1, 20)
    split = split_budget(1000, target=target, draft=draft)
    # fixed 100 + 20 = 120; rest 880; draft = 20 + 880 x 1 // 4 = 20 + 220 = 240
    assert split == BudgetSplit(
        tier="gpu", total_bytes=1000, target=760, draft=240, fixed_bytes=120, tokens=220
    )
    assert (split.target - 100) // 3 == 220  # target tokens: (760 - 100) // 3
    assert (split.draft - 20) // 1 == 220  # draft tokens: (240 - 20) // 1


def test_gpu_rounding_goes_to_the_target() -> None:
    split = split_budget(1001, target=CacheCost(3), draft=CacheCost(2))
    # draft = 1001 x 2 // 5 = 2002 // 5 = 400; target = 1001 - 400 = 601
    assert (split.target, split.draft, split.tokens) == (601, 400, 200)  # 1001 // 5 = 200
    assert 601 // 3 == 200 and 400 // 2 == 200  # both hold 200 tokens


def test_gpu_real_models_same_tokens() -> None:
    # Llama-3.1-8B target 131072 B/token; EAGLE3 head 1 x 2 x 8 x 128 x 2 B = 4096 B/token
    target, draft = CacheCost(131072), CacheCost(4096)
    split = split_budget(80 * 2**30, target=target, draft=draft)
    # 80 GiB = 85899345920 B; St + Sd = 135168 = 33 x 4096
    # tokens = 85899345920 // 135168 = 635500 (635500.6...)
    # draft = 85899345920 x 4096 // 135168 = 85899345920 // 33 = 2603010482 (...482.4)
    # target = 85899345920 - 2603010482 = 83296335438
    assert split.draft == 2603010482
    assert split.target == 83296335438
    assert split.tokens == 635500
    assert split.draft // 4096 == 635500  # 2603010482 // 4096
    assert split.target // 131072 == 635500  # 83296335438 // 131072 = 635500.6...


def test_gpu_budget_exactly_the_fixed_cost() -> None:
    split = split_budget(120, target=CacheCost(3, 100), draft=CacheCost(1, 20))
    assert (split.target, split.draft, split.tokens) == (100, 20, 0)


def test_gpu_only_fixed_costs() -> None:
    # no slopes: the draft gets its fixed cost, the target the rest
    split = split_budget(500, target=CacheCost(0, 100), draft=CacheCost(0, 20))
    assert (split.target, split.draft, split.tokens) == (480, 20, 0)  # 500 - 20


@pytest.mark.parametrize("tier", ["host", "disk"])
def test_host_and_disk_by_slope_only(tier: str) -> None:
    split = split_budget(1000, target=CacheCost(3, 100), draft=CacheCost(1, 20), tier=tier)  # type: ignore[arg-type]
    # draft = 1000 x 1 // (3 + 1) = 250; target = 1000 - 250 = 750; intercepts ignored
    assert split == BudgetSplit(
        tier=tier,  # type: ignore[arg-type]
        total_bytes=1000,
        target=750,
        draft=250,
        fixed_bytes=0,
        tokens=250,  # 1000 // 4
    )


def test_host_budget_below_the_fixed_costs_is_fine() -> None:
    split = split_budget(10, target=CacheCost(3, 100), draft=CacheCost(1, 20), tier="host")
    assert (split.target, split.draft) == (8, 2)  # draft 10 x 1 // 4 = 2


@pytest.mark.parametrize("tier", ["gpu", "host", "disk"])
def test_draft_of_zero_cost_gets_nothing(tier: str) -> None:
    split = split_budget(1000, target=CacheCost(3, 100), draft=CacheCost(0), tier=tier)  # type: ignore[arg-type]
    assert (split.target, split.draft) == (1000, 0)


@pytest.mark.parametrize("tier", ["gpu", "host", "disk"])
def test_zero_budget_gives_zeros(tier: str) -> None:
    split = split_budget(0, target=CacheCost(3), draft=CacheCost(1), tier=tier)  # type: ignore[arg-type]
    assert (split.target, split.draft, split.tokens) == (0, 0, 0)


def test_zero_budget_zero_costs() -> None:
    split = split_budget(0, target=CacheCost(0), draft=CacheCost(0))
    assert (split.target, split.draft, split.tokens) == (0, 0, 0)


def test_result_is_frozen() -> None:
    split = split_budget(10, target=CacheCost(1), draft=CacheCost(1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        split.draft = 0  # type: ignore[misc]


# --------------------------------------------------------------------------- errors


def test_infeasible_gpu_budget() -> None:
    with pytest.raises(InfeasibleBudgetError) as info:
        split_budget(100, target=CacheCost(3, 100), draft=CacheCost(1, 20))
    exc = info.value
    assert isinstance(exc, ValueError)
    assert isinstance(exc, KvBudgetError)
    message = str(exc)
    assert "GPU budget of 100 bytes" in message
    assert "fixed cost of 120 bytes" in message  # 100 + 20
    assert "target 100 + draft 20" in message
    assert "max_batch_size" in message  # a knob that would fix it


def test_infeasible_only_on_gpu() -> None:
    # the same costs on host/disk are fine (fixed costs are GPU-resident)
    for tier in ("host", "disk"):
        split_budget(100, target=CacheCost(3, 100), draft=CacheCost(1, 20), tier=tier)  # type: ignore[arg-type]


@pytest.mark.parametrize("total", [-1, -(2**40), 1.0, 1000.5, True, False, "1000", None])
def test_bad_budget(total: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        split_budget(total, target=CacheCost(3), draft=CacheCost(1))  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert "total_bytes" in str(info.value)


@pytest.mark.parametrize("tier", ["cpu", "GPU", "", None])
def test_bad_tier(tier: object) -> None:
    with pytest.raises(InvalidArgumentError, match="tier"):
        split_budget(10, target=CacheCost(1), draft=CacheCost(1), tier=tier)  # type: ignore[arg-type]


def test_costs_must_be_cache_costs() -> None:
    with pytest.raises(InvalidArgumentError, match="CacheCost"):
        split_budget(10, target=(1, 0), draft=CacheCost(1))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

SLOPES = st.integers(min_value=0, max_value=2**20)
INTERCEPTS = st.integers(min_value=0, max_value=2**30)
costs = st.builds(CacheCost, SLOPES, INTERCEPTS)
positive_costs = st.builds(CacheCost, st.integers(min_value=1, max_value=2**20), INTERCEPTS)
tiers = st.sampled_from(["gpu", "host", "disk"])
budgets = st.integers(min_value=0, max_value=2**44)


def feasible(total: int, target: CacheCost, draft: CacheCost, tier: str) -> bool:
    return tier != "gpu" or total >= target.intercept + draft.intercept


@given(budgets, costs, costs, tiers)
def test_parts_sum_exactly_and_are_non_negative(
    total: int, target: CacheCost, draft: CacheCost, tier: str
) -> None:
    if not feasible(total, target, draft, tier):
        with pytest.raises(InfeasibleBudgetError):
            split_budget(total, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
        return
    split = split_budget(total, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
    assert split.target + split.draft == total == split.total_bytes
    assert split.target >= 0
    assert split.draft >= 0
    assert isinstance(split.target, int) and isinstance(split.draft, int)


@given(budgets, positive_costs, positive_costs)
def test_gpu_same_tokens_within_one(total: int, target: CacheCost, draft: CacheCost) -> None:
    total += target.intercept + draft.intercept  # always feasible
    split = split_budget(total, target=target, draft=draft)
    target_tokens = (split.target - target.intercept) // target.slope
    draft_tokens = (split.draft - draft.intercept) // draft.slope
    assert abs(target_tokens - draft_tokens) <= 1
    assert draft_tokens == split.tokens
    # each part covers its own fixed cost
    assert split.target >= target.intercept
    assert split.draft >= draft.intercept


@given(budgets, costs, costs, st.sampled_from(["host", "disk"]))
def test_host_and_disk_ignore_intercepts(
    total: int, target: CacheCost, draft: CacheCost, tier: str
) -> None:
    with_fixed = split_budget(total, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
    without = split_budget(
        total,
        target=CacheCost(target.slope),
        draft=CacheCost(draft.slope),
        tier=tier,  # type: ignore[arg-type]
    )
    assert (with_fixed.target, with_fixed.draft) == (without.target, without.draft)
    assert with_fixed.fixed_bytes == 0


@given(budgets, positive_costs, positive_costs, st.sampled_from(["host", "disk"]))
def test_host_split_by_slope_ratio(
    total: int, target: CacheCost, draft: CacheCost, tier: str
) -> None:
    split = split_budget(total, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
    assert split.draft == total * draft.slope // (target.slope + draft.slope)
    assert abs(split.target // target.slope - split.draft // draft.slope) <= 1


@given(budgets, st.integers(min_value=0, max_value=2**30), costs, costs, tiers)
def test_monotonic_in_the_budget(
    total: int, extra: int, target: CacheCost, draft: CacheCost, tier: str
) -> None:
    if tier == "gpu":
        total += target.intercept + draft.intercept
    small = split_budget(total, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
    large = split_budget(total + extra, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
    assert large.target >= small.target
    assert large.draft >= small.draft
    assert large.tokens >= small.tokens


@given(budgets, costs, costs, tiers)
def test_inputs_not_mutated(total: int, target: CacheCost, draft: CacheCost, tier: str) -> None:
    before = (CacheCost(target.slope, target.intercept), CacheCost(draft.slope, draft.intercept))
    with contextlib.suppress(InfeasibleBudgetError):
        split_budget(total, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
    assert (target, draft) == before


@given(budgets, costs, tiers)
def test_zero_draft_gets_zero(total: int, target: CacheCost, tier: str) -> None:
    if tier == "gpu":
        total += target.intercept
    split = split_budget(total, target=target, draft=CacheCost(0), tier=tier)  # type: ignore[arg-type]
    assert (split.target, split.draft) == (total, 0)


@given(st.builds(CacheCost, SLOPES), st.builds(CacheCost, SLOPES), tiers)
def test_zero_budget_without_fixed_costs(target: CacheCost, draft: CacheCost, tier: str) -> None:
    split = split_budget(0, target=target, draft=draft, tier=tier)  # type: ignore[arg-type]
    assert (split.target, split.draft, split.tokens) == (0, 0, 0)


@given(budgets, positive_costs, positive_costs)
def test_infeasible_iff_below_fixed_costs(total: int, target: CacheCost, draft: CacheCost) -> None:
    fixed = target.intercept + draft.intercept
    if total < fixed:
        with pytest.raises(InfeasibleBudgetError, match=f"fixed cost of {fixed} bytes"):
            split_budget(total, target=target, draft=draft)
    else:
        assert split_budget(total, target=target, draft=draft).fixed_bytes == fixed
