"""Fuzzing the planner's inputs: every call is a typed error or a consistent plan."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvbudget
from kvbudget.errors import KvBudgetError
from kvbudget.model import list_presets
from kvbudget.units import parse_bytes

SIZES = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(["40GiB", "3.81GiB", "23.58 GiB", "0.5TB", "1e9", "-1GiB", "", "x", "7"]),
    st.text(max_size=12),
    st.floats(allow_nan=True),
    st.none(),
)
KWARGS = st.fixed_dictionaries(
    {},
    optional={
        "target": st.sampled_from([*list_presets(), "", "no/such-model"]),
        "spec": st.sampled_from(["auto", "none", "ngram", "eagle3", "mtp", "draft-target", "x"]),
        "kv_budget": SIZES,
        "host_budget": SIZES,
        "disk_budget": SIZES,
        "gpu": st.sampled_from(["H200", "h100", "l4", "mi300x", "nope", None]),
        "memory_fraction": st.one_of(st.floats(-1, 2), st.sampled_from(["0.9", "x"])),
        "kv_dtype": st.sampled_from(["auto", "bf16", "fp8", "nvfp4", "int3"]),
        "tokens_per_block": st.integers(-2, 300),
        "max_batch_size": st.integers(-1, 600),
        "max_seq_len": st.one_of(st.none(), st.integers(-1, 2**20)),
        "max_draft_len": st.integers(-1, 12),
        "tp": st.integers(0, 16),
        "pp": st.integers(0, 12),
        "engine": st.sampled_from(["kvbudget", "vllm", "sglang", "trtllm", "x"]),
        "cached_states": st.one_of(st.none(), st.integers(-1, 64)),
    },
)


def _check(p: kvbudget.Plan) -> None:
    budget = p.budget
    for tier, total in (("gpu", budget.gpu_bytes), ("host", budget.host_bytes)):
        # the tiers are split exactly among the managers
        assert sum(m.tier(tier).bytes for m in p.managers) == total
    for m in p.managers:
        for t in (m.gpu, m.host, m.disk):
            fixed = m.fixed_bytes if t.tier == "gpu" else 0
            # the blocks fit their bytes; what is left is the padding
            assert t.padding_bytes >= 0
            assert fixed + t.blocks * m.block_bytes + t.padding_bytes == t.bytes
            assert t.tokens == t.blocks * m.tokens_per_block
    # every engine's capacity is what its GPU blocks hold, and its pools are whole
    cap = p.capacity
    assert 0 <= cap.tokens <= cap.gpu_blocks * cap.tokens_per_block
    assert cap.max_concurrency <= cap.max_batch_size
    for pool in p.engine.pools:
        assert pool.blocks >= 0 and pool.tokens >= 0 and pool.bytes >= pool.padding_bytes >= 0
    if p.engine.name == "kvbudget":
        # lockstep: every manager holds the plan's common block counts
        for m in p.managers:
            assert m.gpu.blocks == cap.gpu_blocks
            assert m.host.blocks == cap.host_blocks


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(KWARGS)
def test_plan_is_a_typed_error_or_consistent(kwargs: dict[str, Any]) -> None:
    try:
        p = kvbudget.plan(**kwargs)
    except KvBudgetError:
        return
    _check(p)


@settings(max_examples=300, deadline=None)
@given(SIZES)
def test_parse_bytes_is_a_typed_error_or_whole_bytes(value: Any) -> None:
    try:
        n = parse_bytes(value)
    except KvBudgetError:
        return
    assert type(n) is int and 0 <= n <= 2**64
