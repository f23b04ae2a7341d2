"""vLLM releases side by side: ``vllm@0.29.0`` against ``vllm@0.33.0`` (the default).

Every expected value is hand arithmetic on the release's own rule, cited in
``kvbudget.engines.vllm_0_29``; the fidelity harness checks the same figures against each
release's code on CPU (``benchmarks/fidelity/README.md``).
"""

from __future__ import annotations

from typing import Any

import pytest

import kvbudget
from kvbudget.engines import emit, get_engine_model

OLD, NEW = "vllm@0.29.0", "vllm@0.33.0"


def _plan(engine: str, target: str, **kwargs: Any) -> kvbudget.Plan:
    args: dict[str, Any] = {"kv_budget": "40GiB", "tokens_per_block": 16, "host_budget": 0}
    args.update(kwargs)
    return kvbudget.plan(target, engine=engine, **args)


def _groups(p: kvbudget.Plan) -> list[tuple[str, int]]:
    return [(g["kind"], g["blocks_per_request"]) for g in p.engine.detail["kv_cache_groups"]]


def test_both_releases_are_registered_and_033_is_the_default() -> None:
    assert get_engine_model("vllm").id == NEW
    old = get_engine_model(OLD)
    assert old.source.ref.startswith("v0.29.0") and not old.default


def test_ngram_runs_without_async_scheduling_in_029() -> None:
    """gpt-oss-120b, ngram (K = 3), max_seq_len 32,768, block 16, 8,192 batched tokens.

    Sliding group (window 128): cdiv(min(128 - 1 + in_flight, 32,768), 16) + 1 blocks.
    0.33.0: async on, in_flight = (pp + 1) x 8,192 = 16,384 -> cdiv(16,511, 16) + 1 = 1,033.
    0.29.0: async off for ngram, in_flight = 1 x 8,192 -> cdiv(8,319, 16) + 1 = 521.
    """
    new = _plan(NEW, "openai/gpt-oss-120b", spec="ngram", max_seq_len=32768)
    old = _plan(OLD, "openai/gpt-oss-120b", spec="ngram", max_seq_len=32768)
    assert ("sliding_window", 1_033) in _groups(new)
    assert ("sliding_window", 521) in _groups(old)
    assert new.engine.detail["max_in_flight_tokens"] == 16_384
    assert old.engine.detail["max_in_flight_tokens"] == 8_192
    # the same pool (the page sizes do not change), more requests of max_model_len in 0.29
    assert old.engine.detail["num_gpu_blocks"] == new.engine.detail["num_gpu_blocks"]
    assert old.engine.detail["max_concurrency"] > new.engine.detail["max_concurrency"]
    # 0.29 refuses --async-scheduling with ngram: the emitted command turns it off
    assert "--no-async-scheduling" in emit(old) and "--async-scheduling \\" in emit(new)
    # with every other spec, 0.29 schedules asynchronously as 0.33 does
    eagle = _plan(OLD, "openai/gpt-oss-120b", spec="eagle3", max_seq_len=32768)
    assert eagle.engine.detail["max_in_flight_tokens"] == 16_384


def test_mamba_states_have_no_prefill_checkpoint_in_029() -> None:
    """Nemotron-H-8B (spec none, K = 0), max_seq_len 8,192: the attention block is raised
    to 1,040 tokens in both releases and the pool holds 2,520 blocks; six Mamba groups
    and one attention group of cdiv(8,192, 1,040) = 8 blocks per request.

    0.33.0: 2 + K + 1 = 3 states per Mamba group: 6 x 3 + 8 = 26, 2,520 / 26 = 96.92x.
    0.29.0: 2 + K = 2 states: 6 x 2 + 8 = 20, 2,520 / 20 = 126.00x.
    """
    new = _plan(NEW, "nvidia/Nemotron-H-8B-Base-8K", spec="none", max_seq_len=8192)
    old = _plan(OLD, "nvidia/Nemotron-H-8B-Base-8K", spec="none", max_seq_len=8192)
    for p in (new, old):
        assert p.engine.detail["block_size"] == 1_040
        assert p.engine.detail["num_gpu_blocks"] == 2_520
    assert new.engine.detail["blocks_per_request"] == 26
    assert old.engine.detail["blocks_per_request"] == 20
    assert f"{new.engine.detail['max_concurrency']:.2f}" == "96.92"
    assert f"{old.engine.detail['max_concurrency']:.2f}" == "126.00"


def test_gdn_block_size_is_not_aligned_to_64_in_029() -> None:
    """Qwen3-Next, MTP (K = 1), TP 1, bf16: one attention layer's page is 2 x 2 heads x
    256 x 2 B = 2,048 B per token; a state page (conv + recurrent, K = 1) is 1,146,880 B.

    0.29.0: 16 x cdiv(1,146,880, 16 x 2,048) = 16 x 35 = 560 tokens a block.
    0.33.0: lcm(16, 64) = 64 first: 64 x cdiv(1,146,880, 64 x 2,048) = 64 x 9 = 576.
    """
    new = _plan(NEW, "Qwen/Qwen3-Next-80B-A3B-Instruct", spec="mtp")
    old = _plan(OLD, "Qwen/Qwen3-Next-80B-A3B-Instruct", spec="mtp")
    assert new.engine.detail["block_size"] == 576
    assert old.engine.detail["block_size"] == 560


def test_a_drafter_under_pp_is_refused_by_029_only() -> None:
    # (0.33.0 runs MTP layers under PP; an EAGLE3 head beside Llama's untied embeddings
    # it refuses for another reason, tests/test_vllm_pp_draft.py)
    args = {"spec": "mtp", "pp": 2, "max_seq_len": 32768}
    assert _plan(NEW, "Qwen/Qwen3-Next-80B-A3B-Instruct", **args).capacity.tokens > 0
    with pytest.raises(kvbudget.EngineRefusedError, match="SupportsPP") as info:
        _plan(OLD, "meta-llama/Llama-3.1-8B-Instruct", spec="eagle3", pp=2, max_seq_len=32768)
    refused = info.value.plan
    assert isinstance(refused, kvbudget.Plan)
    assert refused.engine.version == "0.29.0" and refused.engine.refusals
    # a draft model is a SupportsPP class: 0.29 runs it under PP
    draft = _plan(OLD, "meta-llama/Llama-3.1-70B-Instruct", spec="draft-target",
                  draft="meta-llama/Llama-3.2-1B-Instruct", tp=4, pp=2)  # fmt: skip
    assert draft.capacity.tokens > 0


def test_without_these_differences_the_releases_agree() -> None:
    """Llama-3.1-8B + EAGLE3, PP 1: one uniform group; 40 GiB // (33 x 16 x 4,096 B) =
    42,949,672,960 // 2,162,688 = 19,859 blocks in both releases."""
    new = _plan(NEW, "meta-llama/Llama-3.1-8B-Instruct", spec="eagle3", max_seq_len=32768)
    old = _plan(OLD, "meta-llama/Llama-3.1-8B-Instruct", spec="eagle3", max_seq_len=32768)
    assert new.engine.detail == old.engine.detail
    assert new.engine.detail["num_gpu_blocks"] == 19_859
    assert "vLLM 0.29.0" in emit(old) and "vLLM 0.33.0" in emit(new)


def test_draft_target_under_pp_keeps_pp_batches_in_flight_in_029() -> None:
    """Mistral-7B (sliding window 4,096) drafting for itself, TP 1, PP 2, 8,192 batched
    tokens. 0.33.0 runs draft-target on Model Runner V2: (pp + 1) x 8,192 = 24,576 tokens
    in flight; 0.29.0 on V1, which overlaps no steps across PP stages: pp x 8,192 =
    16,384. vLLM's own code on CPU gives 249,515 tokens (7.61x) and 349,243 (10.66x)."""
    args = {"draft": "mistralai/Mistral-7B-v0.1", "spec": "draft-target", "pp": 2,
            "max_seq_len": 32768}  # fmt: skip
    new = _plan(NEW, "mistralai/Mistral-7B-v0.1", **args)
    old = _plan(OLD, "mistralai/Mistral-7B-v0.1", **args)
    assert new.engine.detail["max_in_flight_tokens"] == 24_576
    assert old.engine.detail["max_in_flight_tokens"] == 16_384
    assert (new.capacity.tokens, f"{new.engine.detail['max_concurrency']:.2f}") == (
        249_515,
        "7.61",
    )
    assert (old.capacity.tokens, f"{old.engine.detail['max_concurrency']:.2f}") == (
        349_243,
        "10.66",
    )
