"""vLLM 0.34.0 (``vllm@0.34.0``) against 0.33.0 (the default ``vllm``).

Every expected value is hand arithmetic on the release's own rule, cited in
``kvbudget.engines.vllm_0_34`` (the 0.34.0 wheel's files and lines); the fidelity harness
checks the pools, groups and ``draft_embedding`` against 0.34.0's code on CPU
(``benchmarks/fidelity/README.md``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import DEEPSEEK_V4, folder

import kvbudget
from kvbudget import EngineRefusedError
from kvbudget.engines import emit, get_engine_model

OLD, NEW = "vllm@0.33.0", "vllm@0.34.0"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"


def _plan(engine: str, target: str, **kwargs: Any) -> kvbudget.Plan:
    args: dict[str, Any] = {"kv_budget": "40GiB", "tokens_per_block": 16, "host_budget": 0}
    args.update(kwargs)
    return kvbudget.plan(target, engine=engine, **args)


def _embedding_warnings(p: kvbudget.Plan) -> list[str]:
    return [w for w in p.warnings if "embed_tokens" in w]


def test_034_is_registered_and_033_stays_the_default() -> None:
    model = get_engine_model(NEW)
    assert model.id == NEW and not model.default
    assert model.source.ref == "v0.34.0 (the PyPI wheel)"
    assert get_engine_model("vllm").id == OLD


@pytest.mark.parametrize(
    ("target", "kwargs"),
    [
        (LLAMA, {"spec": "eagle3", "draft": EAGLE3, "max_seq_len": 32768}),
        ("openai/gpt-oss-120b", {"spec": "ngram", "max_seq_len": 32768}),
        ("nvidia/Nemotron-H-8B-Base-8K", {"spec": "none", "max_seq_len": 8192}),
        ("Qwen/Qwen3-Next-80B-A3B-Instruct", {"spec": "mtp", "max_seq_len": 32768}),
        ("mistralai/Mistral-7B-v0.1", {"spec": "draft-target", "pp": 2, "max_seq_len": 32768,
                                       "draft": "mistralai/Mistral-7B-v0.1"}),
    ],
)  # fmt: skip
def test_the_pools_are_033s(target: str, kwargs: dict[str, Any]) -> None:
    # kv_cache_planning.py, kv_cache_interface.py and the layers' specs size these the
    # same in both wheels (the harness: 0 differ over every case)
    old, new = _plan(OLD, target, **kwargs), _plan(NEW, target, **kwargs)
    assert new.engine.detail == old.engine.detail
    assert new.capacity.tokens == old.capacity.tokens
    assert "vLLM 0.34.0" in emit(new) and "vLLM 0.33.0" in emit(old)


def test_the_eagle3_pool_by_hand() -> None:
    """Llama-3.1-8B + EAGLE3, PP 1: one uniform group of 32 + 1 layers, 8 KV heads of 128
    in bf16: 16 x 2 x 8 x 128 x 2 = 65,536 B a layer's block; 40 GiB //
    (33 x 65,536) = 42,949,672,960 // 2,162,688 = 19,859 blocks."""
    p = _plan(NEW, LLAMA, spec="eagle3", draft=EAGLE3, max_seq_len=32768)
    assert p.engine.detail["num_gpu_blocks"] == 42_949_672_960 // (33 * 65_536) == 19_859


def test_an_untied_llama_lends_its_embedding_to_the_head_at_pp_2() -> None:
    """Both releases' LlamaModel builds embed_tokens on the last rank for the drafter
    (spec_decode_needs_target_embed, llama.py:377-381; 0.34.0 asks the drafter's class,
    utils.py:934-947, 0.33.0 the method, utils.py:863-883): shared, and the last stage
    holds 128,256 x 4,096 x 2 B (bf16, TP 1) = 1,050,673,152 B more."""
    args = {"spec": "eagle3", "draft": EAGLE3, "max_seq_len": 8192, "pp": 2}
    old = _plan(OLD, LLAMA, **args)
    assert old.engine.detail["draft_embedding"] == "shared"
    p = _plan(NEW, LLAMA, **args)
    assert p.engine.detail == old.engine.detail
    assert p.engine.detail["draft_embedding"] == "shared"
    assert not p.engine.refusals
    extra = 128_256 * 4_096 * 2
    assert extra == 1_050_673_152
    (warning,) = _embedding_warnings(p)
    assert "spec_decode_needs_target_embed" in warning
    assert f"({extra:,} B) more weights per last-stage rank" in warning
    # TP 2 splits the vocabulary: half the rows on each rank
    half = _plan(NEW, LLAMA, tp=2, **args)
    (warning,) = _embedding_warnings(half)
    assert f"({extra // 2:,} B)" in warning


def test_a_target_class_that_builds_nothing_still_refuses_the_head() -> None:
    # gpt-oss (GptOssModel) calls no spec_decode_needs_target_embed and does not tie
    args = {"spec": "eagle3", "max_seq_len": 8192, "pp": 2}
    for engine in (OLD, NEW):
        with pytest.raises(EngineRefusedError, match="unavailable on this PP stage"):
            _plan(engine, "openai/gpt-oss-120b", **args)


def test_deepseek_v4_mtp_shares_the_targets_embedding_at_pp_2(tmp_path: Path) -> None:
    """DeepSeekV4MTP.has_own_embed_tokens = False (0.34.0 mtp.py:300-302) and
    DeepseekV4Model builds embed_tokens on the last rank for it (model.py:866): shared;
    0.33.0's class declares nothing and 0.33.0 builds the target's for heads only, so
    its MTP keeps its own. Either way the last stage
    holds 129,280 x 4,096 x 2 B (bf16, TP 1) = 1,059,061,760 B the weights do not count."""
    path = folder(tmp_path / "v4", DEEPSEEK_V4)
    args = {"spec": "mtp", "max_seq_len": 32768, "pp": 2, "tokens_per_block": 256}
    old, new = _plan(OLD, path, **args), _plan(NEW, path, **args)
    assert old.engine.detail["draft_embedding"] == "kept"
    assert new.engine.detail["draft_embedding"] == "shared"
    extra = 129_280 * 4_096 * 2
    assert extra == 1_059_061_760
    for p in (old, new):
        (warning,) = _embedding_warnings(p)
        assert f"({extra:,} B)" in warning
    # the KV pool is the same
    assert new.engine.detail["num_gpu_blocks"] == old.engine.detail["num_gpu_blocks"]
    one = _plan(NEW, path, **{**args, "pp": 1})
    assert one.engine.detail["draft_embedding"] == "shared" and not _embedding_warnings(one)


def test_another_mtp_class_keeps_its_own_embedding_at_pp_2() -> None:
    # DeepSeek-V3's MTP class (deepseek_mtp.py) declares no has_own_embed_tokens in 0.34.0
    p = _plan(NEW, "deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, pp=2, max_seq_len=8192)
    assert p.engine.detail["draft_embedding"] == "kept"
    # vocab 129,280 / TP 8 = 16,160 rows x 7,168 x 2 B
    (warning,) = _embedding_warnings(p)
    assert f"({16_160 * 7_168 * 2:,} B)" in warning and "MTP drafter's own" in warning


def test_the_default_memory_knob_is_1_0() -> None:
    """No --kv-budget on an H100 (85,045,477,376 B): 0.34.0 leaves --gpu-memory-utilization
    at 1.0 with its extensible KV cache (CacheConfig.resolved_gpu_memory_utilization), so
    the budget is M - W - N; 0.33.0 defaults to 0.92 (vllm/config/cache.py:215):
    floor(0.92 x M) - W - N."""
    args = {"gpu": "H100", "kv_budget": None, "spec": "none", "max_seq_len": 8192}
    old, new = _plan(OLD, LLAMA, **args), _plan(NEW, LLAMA, **args)
    memory = 85_045_477_376
    assert new.budget.gpu_memory_bytes == memory
    fixed = new.budget.weights_bytes + new.budget.reserve_bytes
    assert new.budget.gpu_bytes == memory - fixed
    assert old.budget.gpu_bytes == int(memory * 0.92) - fixed
    assert get_engine_model(NEW).memory_default == ("gpu_memory_utilization", "1.0")
    # the plan still emits the bytes, which turns the extensible cache off
    # (_resolve_extensible_kv_cache, config/vllm.py:3203-3207)
    assert f"--kv-cache-memory-bytes {new.budget.gpu_bytes}" in emit(new)
