"""Greedy speculative decoding through the paged cache equals the target alone.

Every scenario runs ten prompts (six sharing a three-block prefix) at once and compares
each output, token for token, with the target decoding that prompt alone. The budgets
are chosen so that the events named in each case really happen (asserted from the
engine's and the cache's counters), and the cache's integrity check runs at the end.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_engine_support import (
    TARGET_BYTES_PER_TOKEN,
    demo,
    make_plan,
    shared_prefix_prompts,
    target_only,
)

from kvbudget.engine import DemoModels, Engine, SamplingParams, noisy_copy

__all__ = ["demo"]  # the session fixture, imported for pytest

MAX_NEW = 24
# one sequence of max_seq_len 64 is 16 blocks of 4 tokens per manager; with a draft of
# the target's geometry (noisy copy) a token costs 2 x 1024 B, so 140_000 B hold
# floor(140_000 / 2048) = 68 tokens = 17 blocks: one sequence at a time, plus one block
TIGHT_BYTES = 140_000
assert TIGHT_BYTES // (2 * TARGET_BYTES_PER_TOKEN) // 4 == 17


@pytest.fixture(scope="module")
def expected(demo: DemoModels) -> list[list[int]]:
    return target_only(demo.target, shared_prefix_prompts(), MAX_NEW)


def _draft(demo: DemoModels, kind: str) -> tuple[str, str]:
    return {
        "noisy": (demo.draft, "draft-target"),
        "small": (demo.small_draft, "draft-target"),
        "eagle3": (demo.eagle3, "eagle3"),
    }[kind]


def _run(demo: DemoModels, kind: str, mode: str, **plan_kw: Any) -> tuple[Engine, list[list[int]]]:
    draft, spec = _draft(demo, kind)
    plan = make_plan(demo.target, draft, spec, **plan_kw)
    engine = Engine(plan, target=demo.target, draft=draft, preempt_mode=mode)  # type: ignore[arg-type]
    outs = engine.generate(shared_prefix_prompts(), SamplingParams(max_new_tokens=MAX_NEW))
    engine.cache.check_invariants()
    assert len(engine.cache) == 0  # every request finished and was freed
    return engine, [o.token_ids for o in outs]


@pytest.mark.parametrize("kind", ["noisy", "small", "eagle3"])
def test_roomy_budget_equals_target_and_reuses_prefixes(
    demo: DemoModels, kind: str, expected: list[list[int]]
) -> None:
    engine, got = _run(demo, kind, "swap")
    assert got == expected
    stats = engine.stats()
    assert stats["prefix_hit_tokens"] > 0
    assert stats["proposed_tokens"] > 0
    assert stats["generated_tokens"] == 10 * MAX_NEW


def test_the_target_alone_is_not_trivial(expected: list[list[int]]) -> None:
    # outputs that vary make the equality meaningful: no prompt repeats one token
    assert all(len(set(out)) > 5 for out in expected)
    assert len({tuple(out) for out in expected}) == 10


@pytest.mark.parametrize("kind", ["noisy", "eagle3"])
def test_tight_budget_swaps_offloads_and_onboards(
    demo: DemoModels, kind: str, expected: list[list[int]]
) -> None:
    engine, got = _run(demo, kind, "swap", kv_budget=TIGHT_BYTES, host_budget=TIGHT_BYTES)
    assert got == expected
    stats = engine.stats()
    assert stats["preemptions_swap"] > 0
    assert stats["resumed"] == stats["preemptions_swap"]
    assert stats["offloaded_blocks"] > 0
    assert stats["onboarded_blocks"] > 0


@pytest.mark.parametrize("kind", ["noisy", "eagle3"])
def test_tight_budget_recomputes(demo: DemoModels, kind: str, expected: list[list[int]]) -> None:
    engine, got = _run(demo, kind, "recompute", kv_budget=TIGHT_BYTES)
    assert got == expected
    stats = engine.stats()
    assert stats["preemptions_recompute"] > 0
    assert stats["preemptions_swap"] == 0


def test_a_budget_of_one_sequence_runs_every_request_to_max_seq_len(demo: DemoModels) -> None:
    # 16 blocks x 4 tokens = 64 = max_seq_len: exactly one full sequence fits
    budget = 16 * 4 * 2 * TARGET_BYTES_PER_TOKEN
    plan = make_plan(demo.target, demo.draft, "draft-target", kv_budget=budget)
    assert plan.capacity.gpu_blocks == 16 and plan.capacity.max_concurrency == 1
    engine = Engine(plan, target=demo.target, draft=demo.draft, preempt_mode="recompute")
    prompts = shared_prefix_prompts()[:4]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=100))
    for p, o in zip(prompts, outs, strict=True):
        assert o.finish_reason == "max_seq_len"
        # prompt + output = max_seq_len 64 (the last token is never fed back: the cache
        # holds at most 63 of them)
        assert len(p) + len(o.token_ids) == 64
    expected = target_only(demo.target, prompts, 100)
    assert [o.token_ids for o in outs] == expected
    assert engine.stats()["preemptions"] > 0


@pytest.mark.parametrize(("mode", "host"), [("swap", 0), ("swap", TIGHT_BYTES), ("recompute", 0)])
def test_a_draft_equal_to_the_target_is_always_accepted(
    demo: DemoModels,
    tmp_path_factory: pytest.TempPathFactory,
    expected: list[list[int]],
    mode: str,
    host: int,
) -> None:
    # the draft's K/V go through the same pages, offloads, swaps and prefix hits as the
    # target's: any misplaced draft K/V would make it disagree and be rejected
    same = str(noisy_copy(demo.target, tmp_path_factory.mktemp("same"), noise_std=0.0, seed=0))
    budget = TIGHT_BYTES if host or mode == "recompute" else 400_000
    plan = make_plan(demo.target, same, "draft-target", kv_budget=budget, host_budget=host)
    engine = Engine(plan, target=demo.target, draft=same, preempt_mode=mode)  # type: ignore[arg-type]
    outs = engine.generate(shared_prefix_prompts(), SamplingParams(max_new_tokens=MAX_NEW))
    assert [o.token_ids for o in outs] == expected
    stats = engine.stats()
    assert stats["acceptance_rate"] == 1.0
    assert stats["proposed_tokens"] > 0 and stats["prefix_hit_tokens"] > 0
    if budget == TIGHT_BYTES:
        assert stats["preemptions"] > 0


def test_preemption_takes_the_youngest_request(demo: DemoModels) -> None:
    """Two requests in a budget for about one: the younger one (id 1) is the victim,
    never the older one (vLLM's rule; the scheduler's docstring)."""
    plan = make_plan(demo.target, demo.draft, "draft-target", kv_budget=TIGHT_BYTES)
    engine = Engine(plan, target=demo.target, draft=demo.draft, preempt_mode="recompute")
    victims: list[tuple[str, list[str]]] = []
    preempt = engine.scheduler._preempt

    def spy(victim: Any) -> None:
        victims.append((victim.request_id, [s.request_id for s in engine.scheduler.running]))
        preempt(victim)

    engine.scheduler._preempt = spy  # type: ignore[method-assign]
    prompts = [list(range(1, 11)), list(range(21, 32))]
    engine.generate(prompts, SamplingParams(max_new_tokens=40))
    assert victims  # 10 + 40 and 11 + 40 tokens do not fit together in 68
    for victim, running in victims:
        assert victim == running[-1]  # the youngest running request
