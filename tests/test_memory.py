"""Memory that is not KV: the estimate per part, and the three engines' fraction knobs."""

from __future__ import annotations

import pytest

import kvbudget
from kvbudget import InvalidArgumentError
from kvbudget.memory import capture_sizes, estimate_non_kv, recurrent_scratch_bytes

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


def test_gated_deltanet_prefill_scratch() -> None:
    # Qwen3.5-27B (64 layers: 48 Gated DeltaNet, 16 attention), TP1, a 2048-token chunk
    # of 4 sequences; per GDN layer h = 48 value heads, k = v = 128, fp32 SSM state
    model = kvbudget.load_model("Qwen/Qwen3.5-27B")
    # per token: 48 x (4 g + 2 x 64 A + 2 x 128 w + 3 x 2 x 128 u, v_new, o) = 55,488;
    # x 2048 = 113,639,424. Chunks: 2048 / 64 + 4 - 1 = 35, each 48 x 128 x 128 x 2 B
    # = 1,572,864: 55,050,240. States: 4 x 48 x 128 x 128 x (4 gathered + 4 final)
    # = 25,165,824
    got = recurrent_scratch_bytes(model, model.layers, tp=1, tokens=2048, seqs=4)
    assert got == 113639424 + 55050240 + 25165824 == 193855488
    # vllm#54775: "h + v_new = 36 KiB/token" for 48 value heads of 128 (bf16):
    # h 48 x 128 x 128 x 2 / 64 = 24,576 a token, v_new 48 x 128 x 2 = 12,288
    one_chunk = recurrent_scratch_bytes(model, model.layers, tp=1, tokens=64, seqs=1)
    h_and_v_new = (one_chunk - 64 * 55488 - 48 * 128 * 128 * 8) // 64 + 48 * 128 * 2
    assert h_and_v_new == 36 * 1024
    # TP2 halves the heads (24): every term halves
    assert recurrent_scratch_bytes(model, model.layers, tp=2, tokens=2048, seqs=4) == (
        193855488 // 2
    )
    # no recurrent layer, no scratch
    dense = kvbudget.load_model("meta-llama/Llama-3.1-8B-Instruct")
    assert recurrent_scratch_bytes(dense, dense.layers, tp=1, tokens=2048, seqs=4) == 0


def test_mamba2_prefill_scratch() -> None:
    # Nemotron-H-8B: 24 Mamba2 layers of 128 heads x 64, 8 groups, state 128, chunk 128,
    # fp32 SSM state; TP1, an 8192-token chunk of 2 sequences: chunks 8192 / 128 + 1 = 65
    model = kvbudget.load_model("nvidia/Nemotron-H-8B-Base-8K")
    state = 128 * 64 * 128  # 1,048,576 values
    # dA_cumsum and dt: 2 x 65 x 128 x 128 heads x 4 = 8,519,680; passed states (bf16)
    # 65 x state x 2 = 136,314,880; gathered initial states 2 x state x 4 = 8,388,608
    common = 8519680 + 136314880 + 8388608
    # then the larger of the fp32 chunk states (65 x state x 4 = 272,629,760) and C^T B
    # (65 x 8 x 128 x 128 x 4 = 34,078,720) with the final states (8,388,608)
    assert 65 * state * 4 == 272629760 > 34078720 + 8388608
    got = recurrent_scratch_bytes(model, model.layers, tp=1, tokens=8192, seqs=2)
    assert got == common + 272629760 == 425852928


def test_the_estimate_of_a_hybrid_model() -> None:
    model = kvbudget.load_model("Qwen/Qwen3.5-27B")
    est = estimate_non_kv(
        model, None, eagle3=False, tp=1, max_num_batched_tokens=2048, max_batch_size=4,
        num_layers=64,
    )  # fmt: skip
    # per token (4 x 5120 + (24 + 2 x 4) x 256 + 3 x 17408) x 2 B = 161,792; x 2048 =
    # 331,350,016; + logits 4 x 248,320 x 4 = 3,973,120; + the GDN scratch 193,855,488
    assert est.activation_bytes == 331350016 + 3973120 + 193855488 == 529178624
    # 4 captured sizes (1, 2, 4, 8) x (64 layers + 48 recurrent) x 256 KiB
    assert est.cuda_graph_bytes == 4 * 112 * 262144 == 117440512
    # a PP stage of 16 attention-only layers: no scratch, no recurrent graph share
    attention = [x for x in model.layers if x.kind == "attention"]
    stage = estimate_non_kv(
        model, None, eagle3=False, tp=1, max_num_batched_tokens=2048, max_batch_size=4,
        num_layers=16, layers=attention,
    )  # fmt: skip
    assert stage.activation_bytes == 331350016 + 3973120
    assert stage.cuda_graph_bytes == 4 * 16 * 262144


def test_a_plan_charges_its_stage_and_state_dtype() -> None:
    kw = {"max_batch_size": 4, "max_num_batched_tokens": 2048, "max_seq_len": 8192}
    p = kvbudget.plan(target="Qwen/Qwen3.5-27B", pp=2, **kw)
    nk = p.budget.non_kv
    assert p.pp_stage == 1 and nk is not None
    # the last PP stage holds layers 32-63: 24 Gated DeltaNet + 8 attention layers;
    # 4 captured sizes x (32 + 24) x 256 KiB
    assert nk.cuda_graph_bytes == 4 * 56 * 262144 == 58720256
    assert nk.activation_bytes == 529178624  # as the whole model: one GDN layer's scratch
    # --mamba-ssm-cache-dtype bf16: the 4 gathered states take 4 x 48 x 128 x 128 x 2 B
    # instead of x 4 B, 6,291,456 less
    half = kvbudget.plan(target="Qwen/Qwen3.5-27B", pp=2, state_dtype="bf16", **kw)
    assert half.budget.non_kv is not None
    assert nk.activation_bytes - half.budget.non_kv.activation_bytes == 6291456
