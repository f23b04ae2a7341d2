"""Invariants of any replay (hypothesis): conservation, hits by tier, the no-host policy,
and the cache's own integrity check after every step."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_replay import PAIR, TPB, flat_roofline

import kvbudget
from kvbudget.sim.acceptance import AcceptanceModel
from kvbudget.sim.policies import POLICIES, policy_plans
from kvbudget.sim.replay import ReplayConfig, replay
from kvbudget.sim.trace import TraceRequest

MAX_SEQ = 128

requests = st.lists(
    st.tuples(
        st.floats(0.0, 0.02),  # gap to the previous arrival, s
        st.integers(1, 140),  # prompt tokens (some past max_seq_len 128)
        st.integers(1, 60),  # output tokens
        st.sampled_from([None, "a", "b"]),  # prefix group
    ),
    min_size=1,
    max_size=8,
)


def build(rows: list[tuple[float, int, int, str | None]]) -> list[TraceRequest]:
    out, clock = [], 0.0
    for i, (gap, prompt, output, group) in enumerate(rows):
        clock += gap
        shared = min(32, prompt - 1) if group else 0
        out.append(
            TraceRequest(
                index=i,
                arrival_s=clock,
                prompt_tokens=prompt,
                output_tokens=output,
                prefix_group=group if shared else None,
                prefix_tokens=shared,
            )
        )
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=requests,
    gpu_blocks=st.integers(8, 16),
    host_blocks=st.sampled_from([0, 4, 16]),
    policy=st.sampled_from(POLICIES),
    rate=st.sampled_from([0.0, 0.6, 1.0]),
    preempt=st.sampled_from(["auto", "recompute", "swap"]),
)
def test_every_request_is_accounted_for(
    rows: list[tuple[float, int, int, str | None]],
    gpu_blocks: int,
    host_blocks: int,
    policy: str,
    rate: float,
    preempt: str,
) -> None:
    plan = kvbudget.plan(
        kv_budget=gpu_blocks * PAIR,
        host_budget=host_blocks * PAIR,
        tokens_per_block=TPB,
        max_seq_len=MAX_SEQ,
        max_batch_size=4,
    )
    (variant,) = policy_plans(plan, (policy,))
    trace = build(rows)
    config = ReplayConfig(
        acceptance=AcceptanceModel(rates=(rate,)),
        preempt=preempt,  # type: ignore[arg-type]
        sample_steps=1,
        max_num_batched_tokens=64,
    )
    m = replay(variant, trace, flat_roofline(plan), config, check_every=1)
    # conservation: every request finished or is counted with a reason
    assert m.requests == len(trace)
    assert m.completed + sum(m.not_finished.values()) == m.requests
    too_long = sum(1 for r in trace if r.prompt_tokens >= MAX_SEQ)
    assert m.not_finished.get("prompt_exceeds_max_seq_len", 0) == too_long
    if not m.not_finished or set(m.not_finished) == {"prompt_exceeds_max_seq_len"}:
        runnable = [r for r in trace if r.prompt_tokens < MAX_SEQ]
        assert m.output_tokens == sum(
            min(r.output_tokens, MAX_SEQ - r.prompt_tokens) for r in runnable
        )
    assert m.completed <= m.ttft_s.count <= m.requests  # a first token, finished or not
    # hits are served from some tier, never more than the prompts admitted
    assert m.hit_tokens == m.hit_tokens_by_tier["gpu"] + m.hit_tokens_by_tier["host"]
    assert m.hit_tokens <= m.prompt_tokens
    if policy == "no-host" or host_blocks == 0:
        assert m.host_offloaded_bytes == m.host_onboarded_bytes == 0
        assert m.hit_tokens_by_tier["host"] == 0
        assert m.swapped_out == 0
    if policy == "doubled-host" and host_blocks:
        assert m.pinned_host_bytes == 2 * m.host_budget_bytes
