"""``plan`` = ``build_plan(resolve_deployment(...))``: inputs as values, variants by replace."""

from __future__ import annotations

import dataclasses

import pytest

import kvbudget
from kvbudget.deployment import Parallelism, resolve_deployment
from kvbudget.errors import InvalidArgumentError
from kvbudget.planner import build_plan, plan
from kvbudget.spec_modes import SPEC_MODE_TABLE, SPEC_MODES


def test_plan_is_build_of_resolved_inputs() -> None:
    kwargs = {"spec": "eagle3", "kv_budget": "20GiB", "host_budget": "8GiB", "max_seq_len": 8192}
    assert build_plan(resolve_deployment(**kwargs)) == plan(**kwargs)  # type: ignore[arg-type]


def test_resolve_deployment_types_every_string() -> None:
    inputs = resolve_deployment(
        "meta-llama/Llama-3.1-8B-Instruct", kv_budget="1GiB", host_budget="2GiB", tp=2
    )
    assert inputs.target.name == "meta-llama/Llama-3.1-8B-Instruct"
    assert inputs.spec.name == "eagle3"  # auto: the EAGLE3 head preset exists
    assert inputs.draft is not None and inputs.draft.is_eagle3
    assert inputs.host_bytes == 2 * 1024**3  # 2 GiB = 2,147,483,648 B
    assert inputs.gpu_rule.given_bytes == 1024**3
    assert inputs.kv_dtype == "bf16"  # the config's torch_dtype bfloat16
    assert inputs.max_draft_len == 3  # the default
    assert inputs.lookahead_tokens == 3  # eagle3 speculates: K tokens of lookahead
    assert inputs.engine.id == f"kvbudget@{kvbudget.__version__}"  # the default engine
    assert inputs.parallel == Parallelism(tp=2, pp=1, draft_tp=2, dp=1, dp_attention=False, ep=1)


def test_a_variant_is_a_replace_of_the_inputs() -> None:
    """Doubling the host budget in the inputs doubles each manager's host bytes."""
    inputs = resolve_deployment(spec="eagle3", kv_budget="20GiB", host_budget="8GiB")
    base = build_plan(inputs)
    doubled = build_plan(dataclasses.replace(inputs, host_bytes=2 * inputs.host_bytes))
    assert doubled.budget.host_bytes == 2 * base.budget.host_bytes == 16 * 1024**3
    # the split is proportional to bytes per token, so each share doubles too (within
    # the one byte the integer split may round either way)
    for b, d in zip(base.managers, doubled.managers, strict=True):
        assert abs(d.host.bytes - 2 * b.host.bytes) <= 1
        assert d.host.blocks >= 2 * b.host.blocks


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 0}, "tp must be"),
        ({"tp": 4, "draft_tp": 3}, "draft_tp=3 must divide tp=4"),
        ({"tp": 4, "dp": 3, "dp_attention": True}, "dp=3 must be > 1 and divide tp"),
        ({"tp": 2, "ep": 4}, "ep=4 must divide the 2 ranks"),
    ],
)
def test_parallelism_names_the_parameter_at_fault(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        Parallelism.checked(**kwargs)  # type: ignore[arg-type]


def test_parallelism_derived_values() -> None:
    p = Parallelism.checked(tp=8, dp=4, dp_attention=True)
    assert p.attention_tp == 2  # 8 ranks / 4 attention groups
    assert p.kv_groups == 4
    assert p.ranks == 8  # attention DP lives inside the tp ranks
    assert Parallelism.checked(tp=2, pp=2, dp=3).ranks == 12  # 2 x 2 x 3


def test_every_spec_mode_has_one_table_row() -> None:
    assert SPEC_MODES == tuple(SPEC_MODE_TABLE) == kvbudget.SPEC_MODES
    heads = {m.name for m in SPEC_MODE_TABLE.values() if m.draft_prefix == "drop_last_block"}
    assert heads == {"eagle", "eagle3", "mtp"}  # drafts reading the next token's hidden state
    assert [m.name for m in SPEC_MODE_TABLE.values() if not m.lookahead] == ["none"]


def test_roles_not_positions_decide_the_shares() -> None:
    """The draft's share is the draft manager's, whatever the order managers are built."""
    p = plan(spec="eagle3", kv_budget="20GiB")
    target, draft = p.manager("target"), p.manager("draft")
    assert target is not None and draft is not None
    assert target.gpu.bytes + draft.gpu.bytes <= p.budget.gpu_bytes
    assert target.slope_bytes_per_token == 131072  # 32 layers x 2 x 8 heads x 128 x 2 B
    assert draft.slope_bytes_per_token == 4096  # 1 layer x 2 x 8 heads x 128 x 2 B
