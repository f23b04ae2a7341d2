"""The replay's counted cache (kvbudget.sim.counted_cache) against the engine's cache it
stands in for (SpecDecodeCache fed the same synthetic ids): the same hits, refusals and
block counts after every operation, and the counts worked by hand."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from test_sim_replay import PAIR, TPB

import kvbudget
from kvbudget.cache import RequestId
from kvbudget.errors import OutOfBlocksError
from kvbudget.sim.counted_cache import CountedCache, counted_cache_fits
from kvbudget.sim.prompt_ids import PromptIds
from kvbudget.sim.replay_cache import EngineCache, ReplayCache
from kvbudget.sim.trace import TraceRequest

K = 3  # the default plan's EAGLE3 lookahead: reservations of K + 1 = 4 slots


def small(gpu_blocks: int, spec: str = "eagle3") -> kvbudget.Plan:
    """``gpu_blocks`` of 16 tokens; the longest sequence that fits them with its
    lookahead."""
    return kvbudget.plan(
        kv_budget=gpu_blocks * PAIR,
        tokens_per_block=TPB,
        max_seq_len=gpu_blocks * TPB - K - 1,
        max_batch_size=8,
        spec=spec,
    )


def request(index: int, prompt: int, group: str | None = None, prefix: int = 0) -> TraceRequest:
    return TraceRequest(
        index=index,
        arrival_s=0.0,
        prompt_tokens=prompt,
        output_tokens=1,
        prefix_group=group,
        prefix_tokens=prefix if group else 0,
    )


def test_counted_cache_fits_gpu_only_kv_plans() -> None:
    assert counted_cache_fits(small(20))
    host = kvbudget.plan(
        kv_budget=20 * PAIR, host_budget=8 * PAIR, tokens_per_block=TPB, max_seq_len=256
    )
    assert not counted_cache_fits(host)  # a host tier: swaps and offloads, the engine's
    gemma = kvbudget.plan(
        target="google/gemma-3-27b-it",
        spec="none",
        kv_budget="8GiB",
        max_batch_size=4,
        max_seq_len=8192,
    )
    assert not counted_cache_fits(gemma)  # sliding-window pools


def test_group_blocks_are_shared_and_own_blocks_cached_as_one_extent() -> None:
    """20 GPU blocks of 16 tokens, EAGLE3 (a hash covers the token after its block).
    r0 and r1: group "a", 40-token prefix, 60-token prompts. Group blocks: block i is
    one while (i + 1) * 16 + 1 <= 40, so blocks 0 and 1; r0's blocks 2 and 3 hold its
    markers (its own)."""
    cache = CountedCache(small(20), PromptIds(128256, 0))
    r0, r1 = RequestId("r0"), RequestId("r1")
    # r0: ceil(60 / 16) = 4 blocks, (60 - 1) // 16 = 3 hashed, no hit
    assert cache.admit(r0, request(0, 60, "a", 40), 60) == 0
    assert (cache.used, cache.cached, cache.free_blocks) == (4, 0, 16)
    # r1 hits the two group blocks r0 owns: 32 tokens; takes 4 - 2 = 2 blocks
    assert cache.admit(r1, request(1, 60, "a", 40), 60) == 32
    assert (cache.used, cache.cached, cache.free_blocks) == (6, 0, 14)
    cache.reserve(r0, 4)  # 64 tokens fit its 4 blocks: nothing taken
    cache.commit(r0, 4)  # 64 tokens: (64 - 1) // 16 = 3 hashed still
    cache.reserve(r0, 4)  # 68 tokens: a 5th block
    assert (cache.used, cache.free_blocks) == (7, 13)
    cache.commit(r0, 1)  # 65 tokens, ceil(65 / 16) = 5 blocks kept, 4 hashed
    cache.free(r0)
    # r0's unhashed 5th block to the free list, its own hashed blocks 2 and 3 cached
    # (one extent); the group blocks keep r1 as owner
    assert (cache.used, cache.cached, cache.free_blocks) == (4, 2, 14)
    cache.free(r1)  # its own block 2 cached, 3 free (unhashed); the group blocks cached
    assert (cache.used, cache.cached, cache.free_blocks) == (0, 5, 15)
    cache.check()
    # a new group-"a" request hits both group blocks: 2 x 16 = 32 tokens
    assert cache.admit(RequestId("r2"), request(2, 50, "a", 40), 50) == 32
    assert cache.hit_blocks == 4 and cache.prompt_tokens == 170 and cache.collisions == 0


def test_an_extent_is_evicted_tail_first_and_hit_by_its_request() -> None:
    """8 blocks. r0 (no group, 100 tokens): 7 blocks, (100 - 1) // 16 = 6 hashed; preempted,
    its 6 hashed blocks are one extent and its 7th goes free. r1 (40 tokens, 3 blocks)
    takes 2 free blocks and evicts r0's last 1 (the tail first); r0 comes back and hits
    its blocks 0 .. 4: 5 x 16 = 80 tokens."""
    cache = CountedCache(small(8), PromptIds(128256, 0))
    r0, r1 = RequestId("r0"), RequestId("r1")
    assert cache.admit(r0, request(0, 100), 100) == 0
    assert cache.preempt(r0, False) == ("recompute", 100)
    assert (cache.used, cache.cached, cache.free_blocks) == (0, 6, 2)
    assert cache.admit(r1, request(1, 40), 40) == 0
    assert (cache.used, cache.cached, cache.free_blocks) == (3, 5, 0)
    with pytest.raises(OutOfBlocksError, match="needs 2 more GPU blocks, 0 are free"):
        cache.admit(r0, request(0, 100), 100)  # 7 - 5 hits = 2 blocks; none besides them
    assert (cache.used, cache.cached, cache.free_blocks) == (3, 5, 0)  # nothing changed
    cache.free(r1)  # 2 hashed blocks cached, its 3rd free
    assert cache.admit(r0, request(0, 100), 100) == 80
    cache.check()


def test_a_possible_collision_is_counted_and_noted() -> None:
    """With a vocabulary of 5, markers are 1 + index % 4: requests 0 and 4 of one group
    and prefix length have the same first marker token, so their prompts could share a
    block past the group; the counted cache counts it and says so."""
    cache = CountedCache(small(20), PromptIds(5, 0))
    cache.admit(RequestId("r0"), request(0, 41, "a", 40), 41)
    assert cache.collisions == 0 and cache.notes() == ()
    cache.admit(RequestId("r4"), request(4, 41, "a", 40), 41)
    assert cache.collisions == 1
    assert "--step-by-step" in cache.notes()[0]


class CountedAgainstEngine(RuleBasedStateMachine):
    """Random admissions (four groups, prefixes, prompts), reservations, commits, frees,
    recompute preemptions and re-admissions, on both caches at once."""

    def __init__(self) -> None:
        super().__init__()
        self.caches: tuple[ReplayCache, ReplayCache] = ()  # type: ignore[assignment]
        self.running: dict[RequestId, tuple[TraceRequest, int]] = {}  # req, reserved
        self.parked: dict[RequestId, tuple[TraceRequest, int]] = {}  # req, tokens
        self.next = 0
        self.slots = 1  # the most tokens one reservation holds: lookahead + 1
        self.max_seq = 1

    @initialize(
        blocks=st.integers(8, 40), spec=st.sampled_from(["eagle3", "none"]), vocab=st.just(128256)
    )
    def build(self, blocks: int, spec: str, vocab: int) -> None:
        plan = small(blocks, spec)
        self.slots = plan.capacity.lookahead_tokens + 1
        self.max_seq = plan.capacity.max_seq_len
        self.caches = (
            EngineCache(plan, PromptIds(vocab, 0), self.slots),
            CountedCache(plan, PromptIds(vocab, 0)),
        )

    def both(self, op: str, *args: object) -> object:
        results, errors = [], []
        for cache in self.caches:
            try:
                results.append(getattr(cache, op)(*args))
                errors.append(None)
            except OutOfBlocksError as e:
                results.append(None)
                errors.append(type(e))
        assert results[0] == results[1] and errors[0] == errors[1], (op, args, results)
        if errors[0] is not None:
            raise OutOfBlocksError("both refused")
        return results[0]

    @rule(
        prompt=st.integers(1, 120),
        group=st.sampled_from([None, "a", "b", "c"]),
        prefix=st.integers(1, 119),
    )
    def admit(self, prompt: int, group: str | None, prefix: int) -> None:
        prompt = min(prompt, self.max_seq - 1)
        req = request(self.next, prompt, group, min(prefix, prompt - 1))
        if req.prefix_tokens == 0:
            req = request(self.next, prompt)
        rid = RequestId(f"r{self.next}")
        self.next += 1
        try:
            self.both("admit", rid, req, prompt)
        except OutOfBlocksError:
            return
        self.running[rid] = (req, 0)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), slots=st.integers(0, K + 1))
    def reserve(self, data: st.DataObject, slots: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.running)))
        req, held = self.running[rid]
        if held + slots > self.slots:
            return
        try:
            self.both("reserve", rid, slots)
        except OutOfBlocksError:
            return
        self.running[rid] = (req, held + slots)

    @precondition(lambda self: self.running)
    @rule(data=st.data(), accepted=st.integers(0, K + 1))
    def commit(self, data: st.DataObject, accepted: int) -> None:
        rid = data.draw(st.sampled_from(sorted(self.running)))
        req, held = self.running[rid]
        accepted = min(accepted, held)
        self.both("commit", rid, accepted)
        self.running[rid] = (req, 0)

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.running)))
        self.both("free", rid)
        del self.running[rid]

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def preempt(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.running)))
        req, _ = self.running.pop(rid)
        mode, tokens = self.both("preempt", rid, False)  # type: ignore[misc]
        assert mode == "recompute"
        self.parked[rid] = (req, tokens)

    @precondition(lambda self: self.parked)
    @rule(data=st.data())
    def readmit(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.parked)))
        req, tokens = self.parked[rid]
        try:
            self.both("admit", rid, req, tokens)
        except OutOfBlocksError:
            return
        del self.parked[rid]
        self.running[rid] = (req, 0)

    @invariant()
    def same_counts(self) -> None:
        if not self.caches:
            return
        engine, counted = self.caches
        assert engine.available_gpu_blocks == counted.available_gpu_blocks
        assert engine.sample_counts() == counted.sample_counts()
        assert engine.totals() == counted.totals()
        counted.check()
        engine.check()


CountedAgainstEngine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_counted_cache_against_the_engine_cache = CountedAgainstEngine.TestCase


def test_a_readmission_cut_below_its_extent_hits_its_head() -> None:
    """No speculation (a hash covers its block only), 8 blocks. r0: 64 tokens, 4 blocks,
    all 4 hashed; preempted, they are one extent. r2 takes the 4 free blocks and r1
    (16 tokens, 1 block) evicts r0's tail block 3. r0 again: at most (64 - 1) // 16 = 3
    blocks may hit (one token is left to compute), and its blocks 0 .. 2 are cached:
    48 tokens; its 4th block evicts r1's (cached once r1 is freed)."""
    cache = CountedCache(small(8, "none"), PromptIds(128256, 0))
    r0, r1, r2 = RequestId("r0"), RequestId("r1"), RequestId("r2")
    cache.admit(r0, request(0, 64), 64)
    cache.preempt(r0, False)
    assert (cache.used, cache.cached, cache.free_blocks) == (0, 4, 4)
    cache.admit(r2, request(2, 64), 64)
    assert cache.admit(r1, request(1, 16), 16) == 0
    assert (cache.used, cache.cached, cache.free_blocks) == (5, 3, 0)
    cache.free(r1)  # its one block, hashed (16 // 16 = 1), cached after r0's
    assert cache.admit(r0, request(0, 64), 64) == 48
    assert (cache.used, cache.cached, cache.free_blocks) == (8, 0, 0)
    cache.check()
