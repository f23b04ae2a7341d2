"""``simulate --dp N``: requests routed to data-parallel replicas, each replayed through
its own cache (kvbudget.sim.shards), the replicas' metrics merged."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_sim_cli import SMALL, run

import kvbudget
from kvbudget.sim import simulate
from kvbudget.sim.acceptance import AcceptanceModel
from kvbudget.sim.metrics import Percentiles
from kvbudget.sim.policies import policy_plans
from kvbudget.sim.replay import ReplayConfig, replay
from kvbudget.sim.roofline import gpu_rates, roofline_for
from kvbudget.sim.shards import ROUTERS, merge_shards, replay_shard, route, shard
from kvbudget.sim.trace import PrefixSynthesis, TraceRequest, default_trace_path, read_trace


def req(i: int, prompt: int, output: int, group: str | None = None) -> TraceRequest:
    return TraceRequest(
        index=i,
        arrival_s=float(i),
        prompt_tokens=prompt,
        output_tokens=output,
        prefix_group=group,
        prefix_tokens=1 if group else 0,
    )


def test_round_robin_deals_in_turn() -> None:
    trace = [req(i, 10, 1) for i in range(5)]
    assert [r for r, _ in route(trace, 3, "round-robin")] == [0, 1, 2, 0, 1]


def test_least_loaded_sends_to_the_fewest_tokens_routed() -> None:
    # tokens routed (prompt + output): [0, 0] -> r0 gets 100 -> [100, 0] -> r1 gets 10
    # -> [100, 10] -> r1 gets 10 -> [100, 20] -> r1 gets 95 -> [100, 115] -> r0
    trace = [req(0, 90, 10), req(1, 5, 5), req(2, 5, 5), req(3, 90, 5), req(4, 1, 1)]
    assert [r for r, _ in route(trace, 2, "least-loaded")] == [0, 1, 1, 1, 0]


def test_prefix_keeps_a_group_on_the_replica_its_first_request_went_to() -> None:
    # a -> r0 (loads [0, 0]); b -> r1 ([20, 0]); a stays on r0 however loaded; none -> r1
    trace = [req(0, 10, 10, "a"), req(1, 5, 5, "b"), req(2, 50, 50, "a"), req(3, 1, 1)]
    assert [r for r, _ in route(trace, 2, "prefix")] == [0, 1, 0, 1]


@given(
    sizes=st.lists(st.tuples(st.integers(1, 99), st.sampled_from([None, "a", "b", "c"]))),
    dp=st.integers(1, 4),
    router=st.sampled_from(ROUTERS),
)
def test_every_request_goes_to_exactly_one_replica_in_order(
    sizes: list[tuple[int, str | None]], dp: int, router: str
) -> None:
    trace = [req(i, n, 1, g) for i, (n, g) in enumerate(sizes)]
    shards = [list(shard(trace, dp, router, r)) for r in range(dp)]  # type: ignore[arg-type]
    assert sorted(x.index for s in shards for x in s) == list(range(len(trace)))
    for s in shards:
        assert [x.index for x in s] == sorted(x.index for x in s)  # arrival order kept
    if router == "prefix":
        homes = {(x.prefix_group, r) for r, s in enumerate(shards) for x in s if x.prefix_group}
        assert len(homes) == len({g for g, _ in homes})  # one replica per group


@pytest.fixture(scope="module")
def setting():  # type: ignore[no-untyped-def]
    plan = kvbudget.plan(kv_budget="4GiB", host_budget="8GiB", max_seq_len=16384)
    (variant,) = policy_plans(plan, ("kvbudget",))
    roof = roofline_for(plan, gpu_rates("H200"))
    trace = list(
        read_trace(default_trace_path(), prefixes=PrefixSynthesis(), rate_scale=10.0, limit=300)
    )
    return variant, roof, ReplayConfig(acceptance=AcceptanceModel(rates=(0.7,))), trace


def test_one_replica_merged_is_the_replay(setting) -> None:  # type: ignore[no-untyped-def]
    variant, roof, config, trace = setting
    alone = replay(variant, trace, roof, config)
    merged = merge_shards([replay_shard(variant, trace, roof, config)])
    assert merged.to_dict() == alone.to_dict()


def test_replicas_merge_into_sums_and_exact_percentiles(setting) -> None:  # type: ignore[no-untyped-def]
    variant, roof, config, trace = setting
    parts = [
        replay_shard(variant, shard(trace, 3, "least-loaded", r), roof, config, replica=r)
        for r in range(3)
    ]
    merged = merge_shards(parts[::-1])  # any order
    each = [p.metrics for p in parts]
    assert merged.requests == len(trace) == sum(m.requests for m in each)
    assert merged.completed == sum(m.completed for m in each)
    assert merged.output_tokens == sum(m.output_tokens for m in each)
    assert merged.hit_tokens == sum(m.hit_tokens for m in each)
    assert merged.max_running == max(m.max_running for m in each)
    samples = [t for p in parts for t in p.ttft_s]
    assert len(samples) == merged.completed
    assert merged.ttft_s == Percentiles.of(samples)
    first = min(p.first_arrival_s for p in parts if p.first_arrival_s is not None)
    assert merged.makespan_s == max(p.last_finish_s for p in parts) - first
    # a replica replays its requests as if alone: replica 1's requests replayed directly
    direct = replay(variant, list(shard(trace, 3, "least-loaded", 1)), roof, config)
    assert parts[1].metrics.to_dict() == direct.to_dict()


def test_simulate_dp_is_the_same_with_one_and_two_processes() -> None:
    plan = kvbudget.plan(kv_budget="4GiB", host_budget="8GiB", max_seq_len=16384, dp=2)
    assert plan.capacity.kv_groups == 2  # simulate's default dp is the plan's
    names = ("kvbudget", "no-host")
    one = simulate(plan, limit=60, rate_scale=20.0, policies=names, jobs=1, dp_router="prefix")
    two = simulate(plan, limit=60, rate_scale=20.0, policies=names, jobs=2, dp_router="prefix")
    assert one.policies == two.policies
    assert one.dp == 2 and one.to_dict()["settings"]["dp_router"] == "prefix"
    single = simulate(plan, limit=60, rate_scale=20.0, policies=names, dp=1)
    assert [p.requests for p in one.policies] == [p.requests for p in single.policies]
    assert "dp" not in single.to_dict()["settings"]


def test_simulate_dp_on_the_command_line() -> None:
    result = run(
        "simulate", *SMALL, "--dp", "2", "--dp-router", "least-loaded", "--limit", "30",
        "--policies", "kvbudget", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["settings"]["dp"] == 2 and doc["settings"]["dp_router"] == "least-loaded"
    assert doc["policies"][0]["requests"] == 30
    bad = run("simulate", *SMALL, "--dp-router", "random", "--limit", "3")
    assert bad.exit_code == 2
    assert "error: --dp-router must be one of round-robin, least-loaded, prefix" in bad.output
    assert "Traceback" not in bad.output
