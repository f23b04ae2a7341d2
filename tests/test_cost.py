"""Exact bytes of cache_cost and CacheCost (kvbudget.cost).

Every expected value is worked out by hand from the preset's config numbers in the
comment beside it. Per-layer K+V bytes per token are ``2 x kv_heads_per_rank x head_dim x
bytes per value``; sliding windows cost ``blocks x tokens_per_block`` tokens per sequence
with ``blocks = ceil((window + lookahead - 1) / tokens_per_block) + 1``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget import (
    CacheCost,
    InvalidArgumentError,
    WindowGroup,
    cache_cost,
    cache_cost_detail,
    load_model,
)
from kvbudget.cost import pp_stage_layers

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA_405B = "meta-llama/Llama-3.1-405B-Instruct"
MISTRAL = "mistralai/Mistral-7B-v0.1"
GPT_OSS = "openai/gpt-oss-120b"
GEMMA2 = "google/gemma-2-9b-it"
GEMMA3 = "google/gemma-3-27b-it"
DEEPSEEK = "deepseek-ai/DeepSeek-V3"
QWEN_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"
NEMOTRON = "nvidia/Nemotron-H-8B-Base-8K"


def cost(name: str, **kwargs: Any) -> CacheCost:
    return cache_cost(load_model(name), **kwargs)


# --------------------------------------------------------------------------- CacheCost


def test_cache_cost_defaults_and_equality() -> None:
    assert CacheCost(5) == CacheCost(5, 0)
    assert CacheCost(slope=5, intercept=7) == CacheCost(5, 7)
    assert hash(CacheCost(5, 7)) == hash(CacheCost(5, 7))
    assert CacheCost(0).is_zero
    assert not CacheCost(0, 1).is_zero


def test_cache_cost_is_frozen() -> None:
    c = CacheCost(3, 100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.slope = 4  # type: ignore[misc]


def test_add_and_sub() -> None:
    a, b = CacheCost(3, 100), CacheCost(1, 20)
    assert a + b == CacheCost(4, 120)  # 3+1, 100+20
    assert (a + b) - b == a
    assert a - a == CacheCost(0, 0)
    assert (a, b) == (CacheCost(3, 100), CacheCost(1, 20))  # operands unchanged


def test_sub_cannot_go_negative() -> None:
    with pytest.raises(InvalidArgumentError, match="negative"):
        CacheCost(1, 20) - CacheCost(3, 0)
    with pytest.raises(InvalidArgumentError):
        CacheCost(3, 0) - CacheCost(1, 20)


def test_arithmetic_with_non_costs_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        CacheCost(1) + 1  # type: ignore[operator]
    with pytest.raises(TypeError):
        CacheCost(1) - 1  # type: ignore[operator]


def test_bytes_for() -> None:
    c = CacheCost(3, 100)
    assert c.bytes_for(0) == 100  # 3 x 0 + 100
    assert c.bytes_for(10) == 130  # 3 x 10 + 100


def test_tokens_for_whole_tokens_never_negative() -> None:
    c = CacheCost(3, 100)
    assert c.tokens_for(130) == 10  # (130 - 100) // 3
    assert c.tokens_for(132) == 10  # (132 - 100) // 3 = 32 // 3 = 10
    assert c.tokens_for(133) == 11  # 33 // 3
    assert c.tokens_for(100) == 0  # only the intercept
    assert c.tokens_for(50) == 0  # below the intercept: 0, not negative
    assert c.tokens_for(0) == 0


def test_tokens_for_zero_slope_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match="slope 0"):
        CacheCost(0, 10).tokens_for(100)


@pytest.mark.parametrize("bad", [-1, 1.0, 1.5, True, False, "1", None])
def test_bytes_and_tokens_reject_bad_counts(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        CacheCost(3, 100).bytes_for(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        CacheCost(3, 100).tokens_for(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("slope", "intercept"),
    [(-1, 0), (0, -1), (1.0, 0), (1, 0.5), (True, 0), (1, False), ("1", 0), (None, 0)],
)
def test_cache_cost_validation(slope: object, intercept: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        CacheCost(slope, intercept)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------- full attention


@pytest.mark.parametrize(
    ("kv_dtype", "expected"),
    [
        ("fp32", 262144),  # 32 layers x 2 (K,V) x 8 kv heads x 128 dim x 4 B = 262144
        ("bf16", 131072),  # 32 x 2 x 8 x 128 x 2 B = 131072
        ("fp16", 131072),  # 32 x 2 x 8 x 128 x 2 B = 131072
        ("fp8", 65536),  # 32 x 2 x 8 x 128 x 1 B = 65536
        ("int8", 65536),  # 32 x 2 x 8 x 128 x 1 B = 65536
        ("nvfp4", 36864),  # 32 x 2 x (ceil(1024/2)=512 + ceil(1024/16)=64) = 32 x 2 x 576
        ("auto", 131072),  # config torch_dtype bfloat16 -> 32 x 2 x 8 x 128 x 2 B
    ],
)
def test_llama_dtypes(kv_dtype: str, expected: int) -> None:
    assert cost(LLAMA_8B, kv_dtype=kv_dtype) == CacheCost(expected, 0)


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (1, 131072),  # 32 layers x 2 x 8 kv heads x 128 x 2 B
        (2, 65536),  # 32 x 2 x (8/2 = 4) x 128 x 2 B
        (4, 32768),  # 32 x 2 x (8/4 = 2) x 128 x 2 B
        (8, 16384),  # 32 x 2 x (8/8 = 1) x 128 x 2 B
        (16, 16384),  # 32 x 2 x ceil(8/16) = 1 (replicated) x 128 x 2 B
        (32, 16384),  # 32 x 2 x ceil(8/32) = 1 (replicated) x 128 x 2 B
    ],
)
def test_llama_tp(tp: int, expected: int) -> None:
    assert cost(LLAMA_8B, tp=tp) == CacheCost(expected, 0)


def test_llama_nvfp4_tp8() -> None:
    # 1 kv head x 128 dim = 128 values: ceil(128/2)=64 + ceil(128/16)=8 = 72 B per K or V
    # 32 layers x 2 x 72 = 4608
    assert cost(LLAMA_8B, kv_dtype="nvfp4", tp=8) == CacheCost(4608, 0)


def test_full_attention_ignores_batch_block_and_lookahead() -> None:
    c = cost(LLAMA_8B, max_batch_size=64, tokens_per_block=16, lookahead_tokens=7)
    assert c == CacheCost(131072, 0)  # 32 x 2 x 8 x 128 x 2 B; no fixed cost


def test_llama_70b_fp8_tp8() -> None:
    # 80 layers x 2 x (8/8 = 1) kv head x 128 (8192/64) x 1 B = 20480
    assert cost("meta-llama/Llama-3.3-70B-Instruct", kv_dtype="fp8", tp=8) == CacheCost(20480)


def test_qwen3_explicit_head_dim() -> None:
    # head_dim 128 (not 1024/16 = 64): 28 layers x 2 x 8 x 128 x 2 B = 114688
    assert cost("Qwen/Qwen3-0.6B") == CacheCost(114688, 0)


@pytest.mark.parametrize(
    ("tp", "expected"),
    [
        (1, 192512),  # 94 layers x 2 x 4 kv heads x 128 x 2 B = 192512
        (2, 96256),  # 94 x 2 x (4/2 = 2) x 128 x 2 B = 96256
        (4, 48128),  # 94 x 2 x 1 x 128 x 2 B = 48128
        (8, 48128),  # 94 x 2 x ceil(4/8) = 1 (replicated) x 128 x 2 B = 48128
    ],
)
def test_qwen3_moe_tp_beyond_kv_heads(tp: int, expected: int) -> None:
    assert cost("Qwen/Qwen3-235B-A22B", tp=tp) == CacheCost(expected, 0)


def test_mha_and_mqa_tiny_configs(tmp_path: Path) -> None:
    base = {
        "model_type": "llama",
        "torch_dtype": "float32",
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_hidden_layers": 4,
        "max_position_embeddings": 1024,
        "vocab_size": 100,
    }
    mha_dir, mqa_dir = tmp_path / "mha", tmp_path / "mqa"
    mha_dir.mkdir()
    mqa_dir.mkdir()
    (mha_dir / "config.json").write_text(json.dumps(base))
    (mqa_dir / "config.json").write_text(json.dumps({**base, "num_key_value_heads": 1}))
    mha, mqa = load_model(mha_dir), load_model(mqa_dir)
    # MHA: 8 kv heads, head_dim 256/8 = 32
    assert cache_cost(mha) == CacheCost(4096)  # 4 layers x 2 x 8 x 32 x 2 B (bf16)
    assert cache_cost(mha, kv_dtype="auto") == CacheCost(8192)  # 4 x 2 x 8 x 32 x 4 B (fp32)
    assert cache_cost(mha, tp=2) == CacheCost(2048)  # 4 x 2 x (8/2 = 4) x 32 x 2 B
    # MQA: 1 kv head, replicated on every rank
    assert cache_cost(mqa) == CacheCost(512)  # 4 x 2 x 1 x 32 x 2 B
    assert cache_cost(mqa, tp=8) == CacheCost(512)  # 4 x 2 x ceil(1/8) = 1 x 32 x 2 B


def test_window_blocks_are_capped_at_what_a_whole_sequence_spans(tmp_path: Path) -> None:
    config = {
        "model_type": "mistral",
        "torch_dtype": "bfloat16",
        "hidden_size": 64,
        "num_attention_heads": 8,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "max_position_embeddings": 4096,
        "vocab_size": 100,
        "sliding_window": 100,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    model = load_model(path)
    # per token: 1 layer x 2 x 1 kv head x (64/8 = 8) x 2 B = 32 B
    # max_seq_len 1000: worst case ceil(99/32) + 1 = 5 blocks = 160 tokens x 32 B = 5120
    assert cache_cost(model, max_seq_len=1000) == CacheCost(0, 5120)
    # max_seq_len 101: a sequence spans at most ceil(101/32) = 4 blocks = 128 x 32 B = 4096
    assert cache_cost(model, max_seq_len=101) == CacheCost(0, 4096)
    # max_seq_len 100: the window covers the sequence -> full attention, 32 B/token
    assert cache_cost(model, max_seq_len=100) == CacheCost(32)


@pytest.mark.parametrize(
    ("name", "tp", "expected"),
    [
        ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 1, 4096),  # 1 layer x 2 x 8 x 128 x 2 B
        ("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", 8, 512),  # 1 x 2 x 1 x 128 x 2 B
        ("lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B", 1, 4096),  # 1 x 2 x 8 x 128 x 2 B
        ("nvidia/gpt-oss-120b-Eagle3-long-context", 1, 2048),  # 1 x 2 x 8 x 64 x 2 B
        ("nvidia/gpt-oss-120b-Eagle3-long-context", 8, 256),  # 1 x 2 x 1 x 64 x 2 B
    ],
)
def test_eagle3_heads(name: str, tp: int, expected: int) -> None:
    assert cost(name, kv_dtype="auto", tp=tp) == CacheCost(expected, 0)


def test_eagle3_fp8() -> None:
    # auto would be fp16; fp8: 1 layer x 2 x 8 x 128 x 1 B = 2048
    assert cost("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", kv_dtype="fp8") == CacheCost(2048)


# --------------------------------------------------------------------------- pipeline parallel


@pytest.mark.parametrize(
    ("num_layers", "pp", "sizes"),
    [
        (32, 1, [32]),
        (32, 2, [16, 16]),
        (32, 3, [11, 11, 10]),  # 32 // 3 = 10, remainder 2 -> stages 1 and 0 (from the back)
        (126, 4, [31, 32, 32, 31]),  # 126 // 4 = 31, remainder 2 -> stages 2, 1
        (61, 4, [15, 15, 16, 15]),  # 61 // 4 = 15, remainder 1 -> stage 2
        (7, 7, [1] * 7),
    ],
)
def test_pp_stage_layers(num_layers: int, pp: int, sizes: list[int]) -> None:
    ranges = pp_stage_layers(num_layers, pp)
    assert [len(r) for r in ranges] == sizes
    assert [i for r in ranges for i in r] == list(range(num_layers))


def test_pp_two_stages() -> None:
    # 16 layers per stage x (2 x 8 x 128 x 2 B = 4096) = 65536
    assert cost(LLAMA_8B, pp=2) == CacheCost(65536, 0)


def test_pp_largest_stage_and_named_stage() -> None:
    model = load_model(LLAMA_8B)
    detail = cache_cost_detail(model, pp=3)
    # stages of 11, 11, 10 layers; the largest (first of the two 11s) is reported
    assert detail.pp_stage == 0
    assert detail.cost == CacheCost(45056, 0)  # 11 layers x 4096
    assert detail.num_layers == 11
    assert cache_cost(model, pp=3, pp_stage=1) == CacheCost(45056, 0)  # 11 x 4096
    assert cache_cost(model, pp=3, pp_stage=2) == CacheCost(40960, 0)  # 10 x 4096


def test_pp_405b_middle_stages_are_largest() -> None:
    model = load_model(LLAMA_405B)
    detail = cache_cost_detail(model, pp=4)
    assert detail.pp_stage == 1  # stages 31, 32, 32, 31 layers
    assert detail.cost == CacheCost(131072, 0)  # 32 layers x (2 x 8 x 128 x 2 B = 4096)
    assert cache_cost(model, pp=4, pp_stage=0) == CacheCost(126976)  # 31 x 4096
    assert cache_cost(model, pp=4, pp_stage=3) == CacheCost(126976)  # 31 x 4096
    # with tp 8 as well: 32 layers x 2 x 1 x 128 x 2 B = 16384
    assert cache_cost(model, pp=4, tp=8) == CacheCost(16384)


def test_pp_stage_slopes_add_up() -> None:
    model = load_model(LLAMA_8B)
    for pp in (1, 2, 3, 5, 7, 32):
        total = sum(cache_cost(model, pp=pp, pp_stage=s).slope for s in range(pp))
        assert total == 131072  # 32 x 2 x 8 x 128 x 2 B, however it is staged


# --------------------------------------------------------------------------- sliding window


@pytest.mark.parametrize(
    ("kwargs", "intercept"),
    [
        # 32 sliding layers x (2 x 8 x 128 x 2 B = 4096) = 131072 B per token;
        # blocks = ceil((4096 - 1)/32) + 1 = 128 + 1 = 129 -> 129 x 32 = 4128 tokens
        ({}, 541065216),  # 4128 x 131072
        ({"max_batch_size": 4}, 2164260864),  # 4 x 4128 x 131072
        # ceil(4095/16) + 1 = 256 + 1 = 257 blocks x 16 = 4112 tokens x 131072
        ({"tokens_per_block": 16}, 538968064),
        # ceil(4095/1) + 1 = 4096 blocks of one token x 131072
        ({"tokens_per_block": 1}, 536870912),
        # ceil(4095/4096) + 1 = 2 blocks x 4096 = 8192 tokens x 131072
        ({"tokens_per_block": 4096}, 1073741824),
        # window 4096 < max_seq_len 4097: still a window
        ({"max_seq_len": 4097}, 541065216),  # 4128 x 131072
        # lookahead 1: ceil((4096 + 1 - 1)/32) + 1 = 128 + 1 = 129 blocks (unchanged)
        ({"lookahead_tokens": 1}, 541065216),  # 4128 x 131072
        # lookahead 2: ceil(4097/32) + 1 = 129 + 1 = 130 blocks = 4160 tokens
        ({"lookahead_tokens": 2}, 545259520),  # 4160 x 131072
        # lookahead 33: ceil(4128/32) + 1 = 129 + 1 = 130 blocks = 4160 tokens
        ({"lookahead_tokens": 33}, 545259520),  # 4160 x 131072
        # lookahead 34: ceil(4129/32) + 1 = 130 + 1 = 131 blocks = 4192 tokens
        ({"lookahead_tokens": 34}, 549453824),  # 4192 x 131072
        # fp8, tp 8: 32 x 2 x 1 x 128 x 1 B = 8192 B per token x 4128 tokens
        ({"kv_dtype": "fp8", "tp": 8}, 33816576),
    ],
)
def test_mistral_window_is_fixed_cost(kwargs: dict[str, Any], intercept: int) -> None:
    assert cost(MISTRAL, **kwargs) == CacheCost(0, intercept)


def test_mistral_window_at_least_max_seq_len_is_full_attention() -> None:
    # window 4096 >= max_seq_len 4096: 32 x 2 x 8 x 128 x 2 B per token, no fixed cost
    assert cost(MISTRAL, max_seq_len=4096) == CacheCost(131072, 0)
    assert cost(MISTRAL, max_seq_len=1000, max_batch_size=8) == CacheCost(131072, 0)


def test_mistral_window_detail() -> None:
    detail = cache_cost_detail(load_model(MISTRAL), max_batch_size=2)
    assert detail.window_groups == (
        WindowGroup(window_tokens=4096, num_layers=32, bytes_per_token=131072, blocks_per_seq=129),
    )
    assert detail.window_bytes == 1082130432  # 2 seqs x 129 blocks x 32 x 131072
    assert (detail.state_bytes_per_seq, detail.state_bytes) == (0, 0)
    assert detail.cost.intercept == detail.window_bytes + detail.state_bytes
    assert detail.num_layers == 32


@pytest.mark.parametrize(
    ("kwargs", "slope", "intercept"),
    [
        # per layer 2 x 8 kv heads x 64 x 2 B = 2048; 18 full + 18 sliding (window 128)
        # slope 18 x 2048 = 36864; blocks ceil(127/32) + 1 = 4 + 1 = 5 -> 160 tokens
        ({"kv_dtype": "bf16"}, 36864, 5898240),  # 160 x 36864
        # tp 8: per layer 2 x 1 x 64 x 2 B = 256; slope 18 x 256 = 4608; 160 x 4608
        ({"kv_dtype": "bf16", "tp": 8}, 4608, 737280),
        # fp8: per layer 2 x 8 x 64 x 1 B = 1024 -> 18432; tokens_per_block 16:
        # ceil(127/16) + 1 = 8 + 1 = 9 blocks = 144 tokens; 8 seqs x 144 x 18432
        ({"kv_dtype": "fp8", "tokens_per_block": 16, "max_batch_size": 8}, 18432, 21233664),
        # lookahead 4: ceil((128 + 4 - 1)/32) + 1 = 5 + 1 = 6 blocks = 192 tokens x 36864
        ({"kv_dtype": "bf16", "lookahead_tokens": 4}, 36864, 7077888),
        # window 128 >= max_seq_len 128: all 36 layers grow: 36 x 2048 = 73728
        ({"kv_dtype": "bf16", "max_seq_len": 128}, 73728, 0),
        # max_seq_len 129 > window: windows again (160 x 36864)
        ({"kv_dtype": "bf16", "max_seq_len": 129}, 36864, 5898240),
    ],
)
def test_gpt_oss_layer_types(kwargs: dict[str, Any], slope: int, intercept: int) -> None:
    assert cost(GPT_OSS, **kwargs) == CacheCost(slope, intercept)


def test_gpt_oss_20b_nvfp4() -> None:
    # K per layer: 8 x 64 = 512 values -> ceil(512/2)=256 + ceil(512/16)=32 = 288 B; K+V 576
    # 12 full layers x 576 = 6912; 12 sliding x 576 = 6912 B per token x 160 tokens
    assert cost("openai/gpt-oss-20b", kv_dtype="nvfp4") == CacheCost(6912, 1105920)


def test_gpt_oss_has_no_auto_dtype() -> None:
    with pytest.raises(InvalidArgumentError, match="auto"):
        cost(GPT_OSS, kv_dtype="auto")


@pytest.mark.parametrize(
    ("kwargs", "slope", "intercept"),
    [
        # per layer 2 x 8 x 256 x 2 B = 8192; 21 full -> 21 x 8192 = 172032;
        # 21 sliding (window 4096 < 8192): 129 blocks x 32 = 4128 tokens x 172032
        ({}, 172032, 710148096),
        # tp 2: per layer 2 x 4 x 256 x 2 B = 4096; 21 x 4096 = 86016; 4128 x 86016
        ({"tp": 2}, 86016, 355074048),
        # window 4096 >= max_seq_len 4096: 42 x 8192 = 344064
        ({"max_seq_len": 4096}, 344064, 0),
    ],
)
def test_gemma2(kwargs: dict[str, Any], slope: int, intercept: int) -> None:
    assert cost(GEMMA2, **kwargs) == CacheCost(slope, intercept)


@pytest.mark.parametrize(
    ("kwargs", "slope", "intercept"),
    [
        # per layer 2 x 16 x 128 x 2 B = 8192; 10 global -> 81920; 52 local (window 1024):
        # 52 x 8192 = 425984 B per token; ceil(1023/32) + 1 = 32 + 1 = 33 blocks = 1056
        ({}, 81920, 449839104),  # 1056 x 425984
        # tp 2: per layer 2 x 8 x 128 x 2 B = 4096 -> 40960; 1056 x 52 x 4096 = 1056 x 212992
        ({"tp": 2}, 40960, 224919552),
        # fp8, tp 16: per layer 2 x 1 x 128 x 1 B = 256 -> 10 x 256 = 2560; 1056 x 52 x 256
        ({"kv_dtype": "fp8", "tp": 16}, 2560, 14057472),
        # window 1024 >= max_seq_len 1024: all 62 layers grow: 62 x 8192
        ({"max_seq_len": 1024, "max_batch_size": 2}, 507904, 0),
    ],
)
def test_gemma3(kwargs: dict[str, Any], slope: int, intercept: int) -> None:
    assert cost(GEMMA3, **kwargs) == CacheCost(slope, intercept)


def test_gemma3_detail() -> None:
    detail = cache_cost_detail(load_model(GEMMA3))
    assert detail.window_groups == (
        WindowGroup(window_tokens=1024, num_layers=52, bytes_per_token=425984, blocks_per_seq=33),
    )
    assert detail.window_bytes == 449839104  # 33 x 32 x 425984
    assert detail.num_layers == 62


# --------------------------------------------------------------------------- MLA and MTP


@pytest.mark.parametrize(
    ("kv_dtype", "expected"),
    [
        ("fp32", 140544),  # 61 layers x (512 + 64 = 576) x 4 B
        ("bf16", 70272),  # 61 x 576 x 2 B
        ("fp8", 35136),  # 61 x 576 x 1 B
        ("int8", 35136),  # 61 x 576 x 1 B
        ("nvfp4", 19764),  # 61 x (ceil(576/2)=288 + ceil(576/16)=36 = 324)
        ("auto", 70272),  # torch_dtype bfloat16: 61 x 576 x 2 B
    ],
)
def test_deepseek_mla_dtypes(kv_dtype: str, expected: int) -> None:
    assert cost(DEEPSEEK, kv_dtype=kv_dtype) == CacheCost(expected, 0)


@pytest.mark.parametrize("tp", [1, 2, 8, 16])
def test_deepseek_latent_replicated_on_every_rank(tp: int) -> None:
    assert cost(DEEPSEEK, tp=tp) == CacheCost(70272, 0)  # 61 x 576 x 2 B on each rank


def test_deepseek_mtp_layers() -> None:
    assert cost(DEEPSEEK, layers="mtp") == CacheCost(1152, 0)  # 1 MTP layer x 576 x 2 B
    assert cost(DEEPSEEK, layers="all") == CacheCost(71424, 0)  # (61 + 1) x 576 x 2 B
    assert cost(DEEPSEEK, layers="mtp", kv_dtype="fp8", tp=8) == CacheCost(576, 0)  # 576 x 1 B


def test_deepseek_pp_with_mtp_on_last_stage() -> None:
    model = load_model(DEEPSEEK)
    # stages of 15, 15, 16, 15 layers; one layer is 576 x 2 B = 1152
    model_only = cache_cost_detail(model, pp=4)
    assert (model_only.pp_stage, model_only.cost) == (2, CacheCost(18432))  # 16 x 1152
    assert cache_cost(model, pp=4, pp_stage=3) == CacheCost(17280)  # 15 x 1152
    # the MTP layer lives on the last stage: 15 + 1 = 16 layers there
    assert cache_cost(model, pp=4, pp_stage=3, layers="all") == CacheCost(18432)  # 16 x 1152
    assert cache_cost(model, pp=4, pp_stage=0, layers="all") == CacheCost(17280)  # 15 x 1152
    # MTP alone: only the last stage has any
    mtp = cache_cost_detail(model, pp=4, layers="mtp")
    assert (mtp.pp_stage, mtp.cost) == (3, CacheCost(1152))
    assert cache_cost(model, pp=4, pp_stage=0, layers="mtp") == CacheCost(0, 0)


def test_mtp_of_a_model_without_mtp_is_zero() -> None:
    assert cost(LLAMA_8B, layers="mtp") == CacheCost(0, 0)
    assert cost(LLAMA_8B, layers="all") == CacheCost(131072, 0)


# --------------------------------------------------------------------------- recurrent state

# Qwen3-Next, one Gated DeltaNet layer at tp 1 (16 k heads, 32 v heads, dims 128, kernel 4):
#   recurrent = 32 x 128 x 128 = 524288 values
#   conv      = (4 - 1) x (2 x 16 x 128 + 32 x 128) = 3 x 8192 = 24576 values
#   548864 values x 2 B (bf16) = 1097728 B; 36 layers -> 39518208 B per sequence
# full attention: 12 layers x 2 x 2 kv heads x 256 x 2 B = 24576 B per token


@pytest.mark.parametrize(
    ("kwargs", "slope", "intercept"),
    [
        ({}, 24576, 39518208),
        ({"max_batch_size": 4}, 24576, 158072832),  # 4 x 39518208
        # tp 2: hk 8, hv 16: 16 x 128 x 128 = 262144; 3 x (2 x 8 x 128 + 16 x 128) = 12288;
        # 274432 x 2 B = 548864 x 36 = 19759104; attention 12 x 2 x 1 x 256 x 2 B = 12288
        ({"tp": 2}, 12288, 19759104),
        # tp 8: hk 2, hv 4: 4 x 128 x 128 = 65536; 3 x (2 x 2 x 128 + 4 x 128) = 3072;
        # 68608 x 2 B = 137216 x 36 = 4939776; kv heads ceil(2/8) = 1 -> 12288
        ({"tp": 8}, 12288, 4939776),
        # kv fp8: 12 x 2 x 2 x 256 x 1 B = 12288; state fp32: 548864 x 4 B x 36 = 79036416
        ({"kv_dtype": "fp8", "state_dtype": "fp32"}, 12288, 79036416),
        # state is not a window: max_seq_len and tokens_per_block do not change it
        ({"max_seq_len": 1024, "tokens_per_block": 16}, 24576, 39518208),
    ],
)
def test_qwen3_next(kwargs: dict[str, Any], slope: int, intercept: int) -> None:
    assert cost(QWEN_NEXT, **kwargs) == CacheCost(slope, intercept)


def test_qwen3_next_detail() -> None:
    detail = cache_cost_detail(load_model(QWEN_NEXT), max_batch_size=2)
    assert detail.state_bytes_per_seq == 39518208  # 36 x 1097728
    assert detail.state_bytes == 79036416  # 2 x 39518208
    assert detail.window_groups == ()
    assert detail.num_layers == 48


# Nemotron-H-8B, one Mamba2 layer at tp 1 (128 heads x 64, 8 groups, state 128, kernel 4),
# SSM state in float32 (mamba_ssm_cache_dtype default for Nemotron-H), conv in bf16:
#   ssm  = 128 x 64 x 128 = 1048576 values x 4 B = 4194304 B
#   conv = (4 - 1) x (128 x 64 + 2 x 8 x 128) = 3 x 10240 = 30720 values x 2 B = 61440 B
#   4255744 B; 24 M layers -> 102137856 B per sequence
# attention: 4 layers x 2 x 8 kv heads x 128 x 2 B = 16384 B per token


@pytest.mark.parametrize(
    ("kwargs", "slope", "intercept"),
    [
        ({}, 16384, 102137856),
        ({"max_batch_size": 8}, 16384, 817102848),  # 8 x 102137856
        # tp 8: h 16, g 1: 16 x 64 x 128 = 131072 x 4 B = 524288; 3 x (16 x 64 + 2 x 1 x 128)
        # = 3840 x 2 B = 7680; 531968 x 24 = 12767232; attention 4 x 2 x 1 x 128 x 2 B = 2048
        ({"tp": 8}, 2048, 12767232),
        # tp 16: h 8, g ceil(8/16) = 1: 8 x 64 x 128 = 65536 x 4 B = 262144; 3 x (8 x 64 +
        # 2 x 128) = 2304 x 2 B = 4608; 266752 x 24 = 6402048; kv heads ceil(8/16) = 1 -> 2048
        ({"tp": 16}, 2048, 6402048),
        # kv fp8: 4 x 2 x 8 x 128 x 1 B = 8192; state fp32 (both): 1079296 x 4 B x 24 = 103612416
        ({"kv_dtype": "fp8", "state_dtype": "fp32"}, 8192, 103612416),
        # state bf16 (both, overriding the config): 1079296 x 2 B x 24 = 51806208
        ({"state_dtype": "bf16"}, 16384, 51806208),
        # pp 2: 26 layers each; stage 0 has 12 M + 2 attention (7, 18), as has stage 1:
        # 2 x 4096 = 8192; 12 x 4255744 = 51068928
        ({"pp": 2}, 8192, 51068928),
    ],
)
def test_nemotron_h(kwargs: dict[str, Any], slope: int, intercept: int) -> None:
    assert cost(NEMOTRON, **kwargs) == CacheCost(slope, intercept)


def test_nemotron_h_detail() -> None:
    detail = cache_cost_detail(load_model(NEMOTRON), pp=2)
    assert detail.pp_stage == 0  # both stages cost the same: the first is reported
    assert detail.num_layers == 14  # 12 M + 2 attention; the 12 MLP layers cache nothing


def test_state_dtype_only_checked_for_recurrent_models() -> None:
    assert cost(LLAMA_8B, state_dtype="fp6") == CacheCost(131072, 0)
    with pytest.raises(InvalidArgumentError, match="state_dtype"):
        cost(NEMOTRON, state_dtype="fp6")


# --------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize(
    ("name", "kwargs", "match"),
    [
        (LLAMA_8B, {"kv_dtype": "fp6"}, "kv_dtype"),
        (LLAMA_8B, {"tp": 3}, "tp=3"),  # 32 heads, 8 kv heads
        (LLAMA_8B, {"tp": 12}, "tp=12"),
        (LLAMA_8B, {"tp": 64}, "num_attention_heads"),  # more ranks than heads
        (DEEPSEEK, {"tp": 3}, "num_attention_heads"),
        (QWEN_NEXT, {"tp": 3}, "tp=3"),
        (NEMOTRON, {"tp": 3}, "tp=3"),
        (LLAMA_8B, {"tp": 0}, "tp"),
        (LLAMA_8B, {"tp": 2.0}, "tp"),
        (LLAMA_8B, {"tp": True}, "tp"),
        (LLAMA_8B, {"pp": 0}, "pp"),
        (LLAMA_8B, {"pp": 33}, "pp=33"),  # 32 layers
        (LLAMA_8B, {"pp": 2, "pp_stage": 2}, "pp_stage"),
        (LLAMA_8B, {"pp": 2, "pp_stage": -1}, "pp_stage"),
        (LLAMA_8B, {"tokens_per_block": 0}, "tokens_per_block"),
        (LLAMA_8B, {"max_batch_size": 0}, "max_batch_size"),
        (LLAMA_8B, {"max_batch_size": 1.5}, "max_batch_size"),
        (LLAMA_8B, {"max_seq_len": 0}, "max_seq_len"),
        (LLAMA_8B, {"lookahead_tokens": -1}, "lookahead_tokens"),
        (LLAMA_8B, {"layers": "draft"}, "layers"),
    ],
)
def test_bad_arguments(name: str, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as info:
        cost(name, **kwargs)
    assert isinstance(info.value, ValueError)


def test_bad_tp_suggests_working_sizes() -> None:
    with pytest.raises(InvalidArgumentError, match=r"e\.g\. 1, 2, 4, 8"):
        cost(LLAMA_8B, tp=3)


def test_recurrent_state_keeps_one_copy_per_rollback_point() -> None:
    model = load_model("nvidia/Nemotron-H-8B-Base-8K")
    detail = cache_cost_detail(model, max_batch_size=2, lookahead_tokens=3)
    # one state: 24 Mamba2 layers x (128 x 64 x 128 x 4 B (fp32 SSM) + (3 + 3) conv rows x
    # (128 x 64 + 2 x 8 x 128) x 2 B) = 24 x (4194304 + 122880) = 103612416 B; with 3
    # lookahead tokens (1 + 3) copies = 414449664
    assert detail.state_bytes_per_seq == 414449664
    # x 2 sequences = 828899328; attention layers add no fixed cost
    assert detail.state_bytes == 828899328
    assert detail.cost == CacheCost(16384, 828899328)  # slope: 4 x 2 x 8 x 128 x 2 B
