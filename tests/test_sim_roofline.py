"""The roofline's constants from the presets, and its formula by hand."""

from __future__ import annotations

import pytest

import kvbudget
from kvbudget.errors import InvalidArgumentError
from kvbudget.sim.roofline import GpuRates, Roofline, gpu_rates, roofline_for
from kvbudget.weights import count_params


def test_h200_rates_come_from_the_data_files() -> None:
    r = gpu_rates("H200")
    # gpus.csv: 4.8 TB/s HBM, PCIe Gen5 x16 64 GB/s per direction; gpu_flops.csv: 989
    assert (r.hbm_bytes_per_s, r.host_link_bytes_per_s, r.peak_flops_per_s) == (
        4.8e12,
        64e9,
        989e12,
    )
    assert gpu_rates("H200", peak_tflops=500).peak_flops_per_s == 500e12


def test_a_gpu_without_a_flops_figure() -> None:
    assert gpu_rates("gb200").peak_flops_per_s is None
    with pytest.raises(InvalidArgumentError, match="--peak-tflops"):
        gpu_rates("H200", peak_tflops=0)


def test_dense_model_constants() -> None:
    plan = kvbudget.plan(kv_budget="20GiB", max_seq_len=4096, tp=2)
    r = roofline_for(plan, gpu_rates("H200"))
    params = count_params(kvbudget.load_model("meta-llama/Llama-3.1-8B-Instruct"))
    assert params.language_model == 8_030_261_248  # Llama-3.1-8B: 8.03 B parameters
    assert r.target_flops_per_token == 2 * 8_030_261_248 / 2  # over tp = 2
    # KV per token per rank: 32 layers x 2 x 8 heads / 2 ranks x 128 x 2 B = 65,536
    assert (r.target_kv_bytes_per_token, r.draft_kv_bytes_per_token) == (65536, 2048)
    # attention: 4 x 32 heads x 128 x 32 layers per (query, context) pair, over 2 ranks
    assert r.target_attention_flops == 4 * 32 * 128 * 32 / 2


def test_moe_counts_the_experts_a_token_runs_through() -> None:
    plan = kvbudget.plan("openai/gpt-oss-120b", kv_budget="20GiB", max_seq_len=4096)
    r = roofline_for(plan, gpu_rates("H200"))
    p = count_params(kvbudget.load_model("openai/gpt-oss-120b"))
    # 4 of 128 experts per token (num_experts_per_tok, num_local_experts)
    active = p.language_model - p.routed_experts + p.routed_experts * 4 // 128
    assert r.target_flops_per_token == 2 * active
    assert 5.0e9 < active < 6.0e9  # the model card: 5.1 B active, plus embeddings


def test_step_formula_by_hand() -> None:
    r = Roofline(
        rates=GpuRates(
            name="t", hbm_bytes_per_s=1e12, host_link_bytes_per_s=1e9, peak_flops_per_s=1e15,
            source="t",
        ),
        draft_len=3,
        target_weights_bytes=1_000,
        draft_weights_bytes=100,
        target_kv_bytes_per_token=10,
        draft_kv_bytes_per_token=1,
        target_flops_per_token=1e6,
        draft_flops_per_token=1e5,
        target_attention_flops=10.0,
        draft_attention_flops=1.0,
    )  # fmt: skip
    # 2 decoders over 100 context tokens: memory (1,000 + 3 x 100 + 100 x (10 + 3 x 1))
    # = 2,600 B -> 2.6e-9 s; compute 2 x (1e6 x 4 + 1e5 x 3) + 100 x (10 x 4 + 1 x 3)
    # = 8,604,300 FLOPs -> 8.6043e-9 s: compute bound
    got = r.step_seconds(
        decoding=2,
        decode_context_tokens=100,
        prefill_tokens=0,
        prefill_attention_pairs=0,
        prefill_kv_tokens=0,
        host_bytes=0,
    )
    assert got == pytest.approx(8.6043e-9, rel=1e-12)
    # a host copy of 1e3 bytes takes 1e-6 s: the longest of the three roofs
    host = r.step_seconds(
        decoding=2,
        decode_context_tokens=100,
        prefill_tokens=0,
        prefill_attention_pairs=0,
        prefill_kv_tokens=0,
        host_bytes=1000,
    )
    assert host == pytest.approx(1e-6)
