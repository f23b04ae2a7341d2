"""The replay's fast path (kvbudget.sim.fast_decode) against the step-by-step loop it
replaces: the same metrics, bit for bit, on the shipped trace and on random small ones."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sim_properties import MAX_SEQ, build, requests
from test_sim_replay import PAIR, TPB, flat_roofline

import kvbudget
from kvbudget.sim.acceptance import AcceptanceModel
from kvbudget.sim.policies import POLICIES, policy_plans
from kvbudget.sim.replay import ReplayConfig, replay
from kvbudget.sim.roofline import gpu_rates, roofline_for
from kvbudget.sim.trace import PrefixSynthesis, default_trace_path, read_trace


def both(variant, trace, roof, config, **kw):  # type: ignore[no-untyped-def]
    """(step by step, fast) metrics as plain dicts."""
    slow = replay(variant, trace, roof, replace(config, fast_forward=False), **kw)
    fast = replay(variant, trace, roof, replace(config, fast_forward=True), **kw)
    return slow.to_dict(), fast.to_dict()


@pytest.mark.parametrize(
    ("kv_budget", "host_budget", "rate_scale", "limit", "policy"),
    [
        # the default plan, as benchmarks/bench_sim.py runs it
        (None, "0", 1.0, 2500, "kvbudget"),
        # a full GPU: evictions, offloads to the host tier, swaps
        ("3GiB", "6GiB", 8.0, 600, "kvbudget"),
        ("3GiB", "6GiB", 8.0, 600, "equal-split"),
        ("3GiB", "0", 8.0, 600, "no-host"),  # recompute preemptions
    ],
)
def test_fast_path_equals_step_by_step_on_the_shipped_trace(
    kv_budget: str | None, host_budget: str, rate_scale: float, limit: int, policy: str
) -> None:
    plan = kvbudget.plan(kv_budget=kv_budget, host_budget=host_budget, max_seq_len=16384)
    (variant,) = policy_plans(plan, (policy,))
    roof = roofline_for(plan, gpu_rates("H200"))
    trace = list(
        read_trace(
            default_trace_path(), prefixes=PrefixSynthesis(), rate_scale=rate_scale, limit=limit
        )
    )
    config = ReplayConfig(acceptance=AcceptanceModel(rates=(0.7,)))
    slow, fast = both(variant, trace, roof, config)
    assert slow["completed"] > 0 and slow["steps"] > 3_000  # the fast path had work
    if kv_budget is not None:
        assert slow["preemptions"] > 0  # and the step-by-step loop preempted in between
    assert fast == slow


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=requests,
    gpu_blocks=st.integers(8, 16),
    host_blocks=st.sampled_from([0, 4, 16]),
    policy=st.sampled_from(POLICIES),
    rate=st.sampled_from([0.0, 0.6, 1.0]),
    preempt=st.sampled_from(["auto", "recompute", "swap"]),
    sample_steps=st.sampled_from([1, 3, 64]),
    check_every=st.sampled_from([0, 5]),
    seed=st.integers(0, 3),
)
def test_fast_path_equals_step_by_step_on_random_traces(
    rows: list[tuple[float, int, int, str | None]],
    gpu_blocks: int,
    host_blocks: int,
    policy: str,
    rate: float,
    preempt: str,
    sample_steps: int,
    check_every: int,
    seed: int,
) -> None:
    plan = kvbudget.plan(
        kv_budget=gpu_blocks * PAIR,
        host_budget=host_blocks * PAIR,
        tokens_per_block=TPB,
        max_seq_len=MAX_SEQ,
        max_batch_size=4,
    )
    (variant,) = policy_plans(plan, (policy,))
    config = ReplayConfig(
        acceptance=AcceptanceModel(rates=(rate,)),
        preempt=preempt,  # type: ignore[arg-type]
        sample_steps=sample_steps,
        max_num_batched_tokens=64,
        seed=seed,
    )
    slow, fast = both(variant, build(rows), flat_roofline(plan), config, check_every=check_every)
    assert fast == slow


@given(
    decoding=st.integers(1, 512),
    context=st.integers(0, 10**8),
    peak=st.sampled_from([None, 1e15, 1e9]),
)
def test_decode_terms_are_the_stepper_bit_for_bit(
    decoding: int, context: int, peak: float | None
) -> None:
    plan = kvbudget.plan()
    roof = roofline_for(plan, gpu_rates("H200"))
    roof = replace(roof, rates=replace(roof.rates, peak_flops_per_s=peak))
    w, s, b, f_d, f_c, p = roof.decode_terms()
    memory_s = (w + context * s) / b
    expected = roof.stepper()(decoding, context, 0, 0, 0)
    if p is None:
        assert memory_s == expected
    else:
        assert max(memory_s, (f_d * decoding + f_c * context) / p) == expected


def test_fast_path_equals_step_by_step_when_runs_fill_twin_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every prompt the same ids (so running requests fill blocks of equal hashes, and
    a finished one leaves cached twins of a running one's next blocks): the batched end
    of a run refuses them and the run's events go one by one; the metrics stay the
    step-by-step loop's."""
    from kvbudget.cache.tokens import CheckedIds
    from kvbudget.sim import fast_decode
    from kvbudget.sim.prompt_ids import PromptIds
    from kvbudget.sim.trace import TraceRequest

    same = CheckedIds.of(list(range(2, 22)))  # 20 tokens: one full block and a part
    monkeypatch.setattr(PromptIds, "prompt", lambda self, req: same)
    one_by_one = []
    events = fast_decode._cache_events

    def spy(*args):  # type: ignore[no-untyped-def]
        one_by_one.append(args[2])
        return events(*args)

    monkeypatch.setattr(fast_decode, "_cache_events", spy)
    plan = kvbudget.plan(
        kv_budget=24 * PAIR, tokens_per_block=TPB, max_seq_len=MAX_SEQ, max_batch_size=4
    )
    (variant,) = policy_plans(plan, ("kvbudget",))
    trace = [
        TraceRequest(index=i, arrival_s=0.001 * (i // 2) * 40, prompt_tokens=20, output_tokens=50)
        for i in range(6)
    ]
    # the engine's cache on both sides: these ids are not the replay's own, which the
    # counted cache counts
    config = ReplayConfig(
        acceptance=AcceptanceModel(rates=(0.7,)), max_num_batched_tokens=64, counted_cache=False
    )
    slow, fast = both(variant, trace, flat_roofline(plan), config)
    assert one_by_one  # the event-by-event path ran
    assert fast == slow
    assert slow["completed"] == 6


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=requests,
    tpb=st.sampled_from([1, 2, 3, 8]),
    extra_blocks=st.integers(0, 40),
    draft=st.sampled_from([1, 3, 7]),
    rate=st.sampled_from([0.0, 0.5, 1.0]),
    sample_steps=st.sampled_from([1, 3, 64]),
    seed=st.integers(0, 3),
)
def test_fast_path_equals_step_by_step_when_a_reservation_spans_blocks(
    rows: list[tuple[float, int, int, str | None]],
    tpb: int,
    extra_blocks: int,
    draft: int,
    rate: float,
    sample_steps: int,
    seed: int,
) -> None:
    """Blocks of 1-8 tokens and up to 7 drafts: a reservation of K + 1 slots may need
    several new blocks and a commit keep only some (the fast path's counts of taken,
    kept and evicted blocks), still the step-by-step loop's metrics."""
    pair = 131072 + 4096  # bytes of one token in both roles (test_sim_replay.PAIR / TPB)
    blocks = -(-(MAX_SEQ + 8) // tpb) + extra_blocks  # one longest sequence and its slots
    plan = kvbudget.plan(
        kv_budget=blocks * tpb * pair,
        tokens_per_block=tpb,
        max_seq_len=MAX_SEQ,
        max_batch_size=4,
        max_draft_len=draft,
    )
    assert plan.capacity.lookahead_tokens == draft
    (variant,) = policy_plans(plan, ("kvbudget",))
    config = ReplayConfig(
        acceptance=AcceptanceModel(rates=(rate,)),
        sample_steps=sample_steps,
        max_num_batched_tokens=64,
        seed=seed,
    )
    slow, fast = both(variant, build(rows), flat_roofline(plan), config)
    assert fast == slow
