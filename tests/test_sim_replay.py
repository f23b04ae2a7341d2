"""The replay loop on small traces, with the hand arithmetic beside every expectation.

Plans: Llama-3.1-8B-Instruct + its EAGLE3 head (131,072 + 4,096 B/token, no fixed
cost), 16 tokens per block, budgets in whole block pairs so each tier holds exactly the
blocks named. K = 3 draft tokens: every decode step reserves K + 1 = 4 slots.
The EAGLE3 draft's K/V at a position reads the next token (``drop_last_block``): the
cache hashes each block with the token after it, so a block is hashed (and can be hit,
offloaded as cached) once that token is verified.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

import kvbudget
from kvbudget.sim.acceptance import AcceptanceModel
from kvbudget.sim.policies import policy_plans
from kvbudget.sim.replay import ReplayConfig, replay
from kvbudget.sim.roofline import GpuRates, Roofline
from kvbudget.sim.trace import PrefixSynthesis, read_trace

TPB = 16
PAIR = (131072 + 4096) * TPB  # bytes of one block in both roles


def small_plan(gpu_blocks: int, host_blocks: int = 0, max_seq_len: int = 128) -> kvbudget.Plan:
    built = kvbudget.plan(
        kv_budget=gpu_blocks * PAIR,
        host_budget=host_blocks * PAIR,
        tokens_per_block=TPB,
        max_seq_len=max_seq_len,
        max_batch_size=2,
    )
    assert (built.capacity.gpu_blocks, built.capacity.host_blocks) == (gpu_blocks, host_blocks)
    return built


def flat_roofline(plan: kvbudget.Plan) -> Roofline:
    """Round numbers: 1 GB of target weights, 0.1 GB of draft, 1 TB/s, no FLOPs roof."""
    return Roofline(
        rates=GpuRates(
            name="test",
            hbm_bytes_per_s=1e12,
            host_link_bytes_per_s=1e10,
            peak_flops_per_s=None,
            source="test",
        ),
        draft_len=plan.capacity.lookahead_tokens,
        target_weights_bytes=10**9,
        draft_weights_bytes=10**8,
        target_kv_bytes_per_token=131072,
        draft_kv_bytes_per_token=4096,
        target_flops_per_token=0.0,
        draft_flops_per_token=0.0,
        target_attention_flops=0.0,
        draft_attention_flops=0.0,
    )


def write_trace(path: Path, rows: list[str]) -> Path:
    path.write_text("arrival_s,prompt_tokens,output_tokens,prefix_group\n" + "\n".join(rows))
    return path


def run(plan: kvbudget.Plan, trace: Path, policy: str = "kvbudget", rate: float = 0.0, **kw):  # type: ignore[no-untyped-def]
    (variant,) = policy_plans(plan, (policy,))
    config = ReplayConfig(acceptance=AcceptanceModel(rates=(rate,)), sample_steps=1, **kw)
    requests = read_trace(trace, prefixes=PrefixSynthesis(share=0.0, base_tokens=48))
    return replay(variant, requests, flat_roofline(plan), config, check_every=1)


def test_group_p4_has_the_base_prefix_length() -> None:
    # a trace's own group gets base x (1 + crc32 mod 4) tokens; "p4" is the base length
    assert zlib.crc32(b"p4") % 4 == 0


def test_prefix_hit_on_the_gpu(tmp_path: Path) -> None:
    # two 64-token prompts sharing group p4's 48-token prefix, the second after the first
    # has finished. Prompt = 3 prefix blocks + 1 block of its own.
    # r1's match: max_hit = (64 - 1) // 16 = 3 blocks; prefix blocks 0 and 1 are
    # followed by prefix tokens, block 2 by each prompt's own token 48, so its hash
    # differs: 2 blocks = 32 hit tokens.
    trace = write_trace(tmp_path / "t.csv", ["0,64,1,p4", "10,64,1,p4"])
    m = run(small_plan(8), trace)
    assert (m.requests, m.completed, m.not_finished) == (2, 2, {})
    assert m.hit_tokens == 32
    assert m.hit_tokens_by_tier == {"gpu": 32, "host": 0}
    assert m.prompt_tokens == 128  # 64 + 64
    assert m.output_tokens == 2  # one token each, from prefill
    assert m.preemptions == 0


def test_prefix_hit_from_the_host_tier(tmp_path: Path) -> None:
    # GPU 8 blocks, host 16. r0 (64 tokens, p4) hashes blocks 0..2 (block 3 waits for
    # token 64, never verified: r0's one output token comes from prefill) and leaves
    # them cached; r1 (127-token prompt, no group, arrives at 10) takes all 8 GPU
    # blocks: r0's 3 hashed blocks are evicted to the host. r2 (p4, at 20): blocks 0, 1
    # are found on the host (block 2 is followed by r2's own token 48) = 32 host-hit
    # tokens, onboarded.
    trace = write_trace(tmp_path / "t.csv", ["0,64,1,p4", "10,127,1,", "20,64,1,p4"])
    m = run(small_plan(8, host_blocks=16), trace)
    assert (m.completed, m.not_finished) == (3, {})
    assert m.hit_tokens_by_tier == {"gpu": 0, "host": 32}
    # onboarded: the 2 hit blocks, each a block pair
    assert m.host_onboarded_bytes == 2 * PAIR
    # offloaded: r0's 3 hashed blocks when r1 took them; r1's 127 tokens hash
    # (127 - 1) // 16 = 7 blocks (0..6; block 7 is partial). r2 needs 4 blocks, 2 come
    # from onboarding and 2 fresh: 4 of r1's cached blocks are evicted (LRU, tail
    # first), of which the partial block has no hash: 3 hashed ones move to the host.
    assert m.host_offloaded_bytes == (3 + 3) * PAIR


def test_no_host_never_touches_the_host_tier(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.csv", ["0,64,1,p4", "10,127,1,", "20,64,1,p4"])
    m = run(small_plan(8, host_blocks=16), trace, policy="no-host")
    assert m.host_blocks == 0
    assert (m.host_offloaded_bytes, m.host_onboarded_bytes) == (0, 0)
    assert m.hit_tokens_by_tier["host"] == 0
    assert m.pinned_host_bytes == 0
    # r0's prefix blocks were evicted with nowhere to go: r2 hits nothing
    assert m.hit_tokens == 0


def test_preemption_by_recompute(tmp_path: Path) -> None:
    # GPU 8 blocks, no host. r0, r1: 16-token prompts, 100 output tokens, both at t=0.
    # Acceptance 0: every decode step commits 1 token. Step 1 admits and prefills both
    # (1 block each) and emits their first tokens. Decode step j: each request holds
    # 16 + j - 1 cached tokens and reserves 4: ceil((19 + j) / 16) blocks while the other
    # holds ceil((15 + j) / 16) (r1, not yet reserved) -> at j = 46: 5 + 4 = 9 > 8:
    # r0's reserve fails, the newest (r1) is preempted by recompute with 16 + 45 = 61
    # verified tokens, hashed (61 - 1) // 16 = 3 blocks. Re-admitting r1 needs 4 blocks
    # (its 3 cached ones, pinned by the hit, + 1 new) with r0 holding 5 and nothing else
    # free: refused until r0 finishes (its 99th decode step), by when r0 has reused every
    # block: no hit.
    trace = write_trace(tmp_path / "t.csv", ["0,16,100,", "0,16,100,"])
    m = run(small_plan(8), trace)
    assert (m.completed, m.not_finished) == (2, {})
    assert (m.preempted_requests, m.preemptions) == (1, 1)
    assert (m.swapped_out, m.recomputed) == (0, 1)
    assert m.prompt_tokens == 16 + 16 + 61  # the re-admission counts its 61 tokens
    assert m.hit_tokens == 0
    assert m.output_tokens == 200
    assert m.max_waiting == 1


def test_preemption_by_swap_with_a_host_tier(tmp_path: Path) -> None:
    # the same, with 16 host blocks: r1 is swapped out (its 4 blocks: 61 tokens, 3 full
    # + 1 partial) instead, and resumes when r0 has finished.
    trace = write_trace(tmp_path / "t.csv", ["0,16,100,", "0,16,100,"])
    m = run(small_plan(8, host_blocks=16), trace)
    assert (m.completed, m.preempted_requests) == (2, 1)
    assert (m.swapped_out, m.recomputed) == (1, 0)
    assert m.prompt_tokens == 32  # no re-admission
    # out: r1's 4 blocks on the swap; in: the same 4 on resume
    assert m.host_onboarded_bytes == 4 * PAIR


def test_step_times_follow_the_roofline(tmp_path: Path) -> None:
    # one request, 64-token prompt, 3 output tokens, acceptance 1.0 (all 3 drafts kept).
    # step 1 (prefill, no decoder): weights 1e9 + 1e8 (the draft runs its prefill too),
    # KV 64 tokens x 135,168 B = 8,650,752 B -> (1.1e9 + 8,650,752) / 1e12 s = TTFT.
    # step 2: one decoder, context 64: weights 1e9 + 3 x 1e8, KV 64 x (131,072 + 3 x
    # 4,096) = 9,175,040 B; commits min(4, 3 - 1) = 2 tokens and finishes.
    trace = write_trace(tmp_path / "t.csv", ["0,64,3,"])
    m = run(small_plan(8), trace, rate=1.0)
    step1 = (1.1e9 + 64 * 135168) / 1e12
    step2 = (1.3e9 + 64 * (131072 + 3 * 4096)) / 1e12
    assert m.ttft_s.p50 == pytest.approx(step1, rel=1e-12)
    assert m.tpot_s.p50 == pytest.approx(step2 / 2, rel=1e-12)  # 2 tokens after the first
    assert m.makespan_s == pytest.approx(step1 + step2, rel=1e-12)
    assert m.output_tokens == 3
    assert m.steps == 2


def test_requests_that_can_never_run_are_reported(tmp_path: Path) -> None:
    # max_seq_len 128: a 128-token prompt can never run; a 200-output request is cut at
    # 128 - 20 = 108 tokens.
    trace = write_trace(tmp_path / "t.csv", ["0,128,5,", "1,20,200,"])
    m = run(small_plan(8), trace)
    assert m.not_finished == {"prompt_exceeds_max_seq_len": 1}
    assert (m.completed, m.truncated_outputs, m.output_tokens) == (1, 1, 108)


def test_a_request_swapped_out_is_not_resumed_in_the_same_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four requests for two batch slots and 8 GPU blocks: victims go to the host tier.
    A step that preempted resumes and admits nothing (vLLM's rule), so between a swap-out
    and the resume of the same request at least one step commits."""
    from kvbudget.sim import replay_cache

    events: list[tuple[str, object]] = []

    class Recording(replay_cache.SpecDecodeCache):  # type: ignore[misc, name-defined]
        def preempt(self, request_id, *, mode):  # type: ignore[no-untyped-def]
            kept = super().preempt(request_id, mode=mode)
            events.append((f"out:{mode}", request_id))
            return kept

        def resume(self, request_id):  # type: ignore[no-untyped-def]
            super().resume(request_id)  # a refused resume (no room) changes nothing
            events.append(("in", request_id))

        def commit(self, request_id, accepted_token_ids):  # type: ignore[no-untyped-def]
            events.append(("commit", request_id))
            return super().commit(request_id, accepted_token_ids)

    monkeypatch.setattr(replay_cache, "SpecDecodeCache", Recording)
    trace = write_trace(tmp_path / "t.csv", ["0,16,100,"] * 4)
    m = run(small_plan(8, host_blocks=16), trace)
    assert m.completed == 4 and m.swapped_out > 0
    out_at = {}
    for i, (kind, rid) in enumerate(events):
        if kind == "out:swap":
            out_at[rid] = i
        elif kind == "in":
            between = events[out_at.pop(rid) + 1 : i]
            assert any(k == "commit" for k, _ in between), f"{rid} came straight back"


def test_prefix_group_ids_are_bounded_and_drawn_again_the_same() -> None:
    from kvbudget.sim.prompt_ids import MAX_KEPT_PREFIX_TOKENS, PromptIds
    from kvbudget.sim.trace import TraceRequest

    def req(i: int, group: str) -> TraceRequest:
        return TraceRequest(
            index=i, arrival_s=0.0, prompt_tokens=600, output_tokens=1, prefix_group=group,
            prefix_tokens=512,
        )  # fmt: skip

    # each group keeps max(512, 1024) = 1024 ids; a bound of 2048 holds two groups
    tokens = PromptIds(32000, seed=0, max_tokens=2048)
    first = tokens.prompt(req(0, "a"))
    tokens.prompt(req(1, "b"))
    tokens.prompt(req(2, "a"))  # "a" used again: "b" is now the oldest
    tokens.prompt(req(3, "c"))  # 3 x 1024 > 2048: "b" is dropped
    assert tokens.kept() == (2, 2048)
    tokens.prompt(req(4, "b"))  # drawn again from its seed; "a" is dropped
    tokens.prompt(req(5, "c"))
    again = tokens.prompt(req(6, "a"))  # and "a" drawn again: the same 512 prefix ids
    assert again.ids[:512] == first.ids[:512]
    assert again.bound <= 32000 and len(again) == 600
    assert tokens.kept() == (2, 2048)
    # the default: 2^20 tokens = 1,024 groups of 1,024 ids (8 MiB as int64)
    assert MAX_KEPT_PREFIX_TOKENS == 1024 * 1024
