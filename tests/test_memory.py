"""Memory that is not KV: the estimate per part, and the three engines' fraction knobs."""

from __future__ import annotations

import pytest

import kvbudget
from kvbudget import InvalidArgumentError
from kvbudget.memory import capture_sizes, estimate_non_kv

# Llama-3.1-8B-Instruct + its EAGLE3 head on an H200 (150,021,734,400 B CUDA-visible),
# weights (8,030,261,248 + 424,817,664 params) x 2 B = 16,910,157,824 B
H200, WEIGHTS = 150021734400, 16910157824


def test_the_estimate_per_part() -> None:
    target = kvbudget.load_model("meta-llama/Llama-3.1-8B-Instruct")
    draft = kvbudget.load_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    est = estimate_non_kv(
        target, draft, eagle3=True, tp=1, max_num_batched_tokens=8192, max_batch_size=256,
        num_layers=32,
    )  # fmt: skip
    # per token: (4 x 4096 + (32 + 2 x 8) x 128 + 3 x 14336) x 2 B = 65,536 x 2 = 131,072;
    # x 8192 tokens = 1,073,741,824; + logits 256 x 128,256 x 4 B = 131,334,144
    assert est.activation_bytes == 1073741824 + 131334144 == 1205075968
    # the EAGLE3 head holds 3 hidden states per token: 8192 x 3 x 4096 x 2 B
    assert est.draft_activation_bytes == 201326592
    # vLLM's capture sizes up to min(2 x 256, 512) = 512: 1, 2, 4 (3), 8..248 (31),
    # 256..512 by 16 (17) = 51; x 32 layers x 256 KiB
    assert capture_sizes(256) == 51 and capture_sizes(2) == 3
    assert est.cuda_graph_bytes == 51 * 32 * 262144 == 427819008
    assert est.runtime_bytes == 268435456  # 256 MiB x tp 1
    assert est.total_bytes == 2102657024


def test_each_engine_knob_has_its_own_semantics() -> None:
    non_kv = 2102657024
    trt = kvbudget.plan(max_seq_len=8192)  # memory_fraction 0.9 by default
    # (150,021,734,400 - 16,910,157,824 - 2,102,657,024) x 0.9 = 117,908,027,596.8
    assert trt.budget.gpu_bytes == 117908027596
    assert trt.budget.memory_rule == "memory_fraction"
    assert trt.budget.non_kv is not None and trt.budget.non_kv.total_bytes == non_kv
    vllm = kvbudget.plan(max_seq_len=8192, gpu_memory_utilization=0.9)
    # floor(150,021,734,400 x 0.9) - weights - non-KV = 135,019,560,960 - 16,910,157,824
    # - 2,102,657,024
    assert vllm.budget.gpu_bytes == 116006746112
    sglang = kvbudget.plan(max_seq_len=8192, mem_fraction_static="0.88")
    # floor((150,021,734,400 - 268,435,456 runtime) x 0.88) - weights =
    # 131,782,903,070 - 16,910,157,824
    assert sglang.budget.gpu_bytes == 114872745246


def test_parts_can_be_given() -> None:
    p = kvbudget.plan(
        max_seq_len=8192, activation_bytes="1GiB", cuda_graph_bytes=0, runtime_bytes="512MiB"
    )
    nk = p.budget.non_kv
    assert nk is not None
    # given parts replace the estimate's; the EAGLE3 head's states stay estimated
    assert (nk.activation_bytes, nk.cuda_graph_bytes, nk.runtime_bytes) == (
        1073741824,
        0,
        536870912,
    )
    assert nk.draft_activation_bytes == 201326592
    whole = kvbudget.plan(max_seq_len=8192, reserve="4GiB").budget
    assert whole.non_kv is not None and whole.non_kv.total_bytes == 4294967296
    # (150,021,734,400 - 16,910,157,824 - 4,294,967,296) x 0.9 = 115,934,948,352
    assert whole.gpu_bytes == 115934948352


def test_a_larger_prefill_chunk_leaves_less_kv() -> None:
    small = kvbudget.plan(max_seq_len=8192, max_num_batched_tokens=2048).budget
    large = kvbudget.plan(max_seq_len=8192, max_num_batched_tokens=32768).budget
    assert small.non_kv is not None and large.non_kv is not None
    assert large.non_kv.activation_bytes > 4 * small.non_kv.activation_bytes // 2
    assert large.gpu_bytes < small.gpu_bytes


def test_two_fractions_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="give one of them"):
        kvbudget.plan(gpu_memory_utilization=0.9, memory_fraction=0.8)
    with pytest.raises(InvalidArgumentError, match=r"must be in \(0, 1\]"):
        kvbudget.plan(mem_fraction_static=1.5)


def test_a_tight_static_fraction_warns_about_activations() -> None:
    p = kvbudget.plan(max_seq_len=8192, mem_fraction_static="0.995")
    assert any("--mem-fraction-static 0.995 leaves" in w for w in p.warnings)
