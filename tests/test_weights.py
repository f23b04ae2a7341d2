"""Weights: parameter counts against published figures, exact bytes per rank.

Published figures: ``HF safetensors.total`` is the exact total the Hugging Face model API
reports for a checkpoint (``https://huggingface.co/api/models/<id>``, field
``safetensors``); model cards and papers give rounded figures, checked with a tolerance
of half their last digit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget import (
    ConfigError,
    InvalidArgumentError,
    UnsupportedArchitectureError,
    list_presets,
    load_model,
    parse_config,
)
from kvbudget.weights import ParamCounts, WeightsBytes, count_params, weights_bytes

BILLION = 10**9

# --------------------------------------------------------------------------- published counts

# Exact totals: HF safetensors.total of the checkpoint (or of its base checkpoint, for the
# Instruct presets whose architecture fields are identical; see data/models/SOURCES.md).
EXACT_TOTALS = {
    # HF safetensors.total, meta-llama/Llama-3.1-8B
    "meta-llama/Llama-3.1-8B": 8_030_261_248,
    # HF safetensors.total, meta-llama/Llama-3.1-8B-Instruct
    "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248,
    # HF safetensors.total, meta-llama/Llama-3.1-70B
    "meta-llama/Llama-3.1-70B": 70_553_706_496,
    "meta-llama/Llama-3.1-70B-Instruct": 70_553_706_496,
    # HF safetensors.total, meta-llama/Llama-3.3-70B-Instruct
    "meta-llama/Llama-3.3-70B-Instruct": 70_553_706_496,
    # HF safetensors.total, meta-llama/Llama-3.1-405B
    "meta-llama/Llama-3.1-405B": 405_853_388_800,
    "meta-llama/Llama-3.1-405B-Instruct": 405_853_388_800,
    # HF safetensors.total, meta-llama/Llama-3.2-1B and -1B-Instruct (tied embeddings)
    "meta-llama/Llama-3.2-1B": 1_235_814_400,
    "meta-llama/Llama-3.2-1B-Instruct": 1_235_814_400,
    # HF safetensors.total, mistralai/Mistral-7B-v0.1
    "mistralai/Mistral-7B-v0.1": 7_241_732_096,
    # HF safetensors.total, Qwen/Qwen3-8B
    "Qwen/Qwen3-8B": 8_190_735_360,
    # HF safetensors.total, Qwen/Qwen3-32B
    "Qwen/Qwen3-32B": 32_762_123_264,
    # HF safetensors.total, Qwen/Qwen3-235B-A22B
    "Qwen/Qwen3-235B-A22B": 235_093_634_560,
    # HF safetensors.total, Qwen/Qwen3-Next-80B-A3B-Instruct (its one MTP layer included)
    "Qwen/Qwen3-Next-80B-A3B-Instruct": 81_324_862_720,
    "Qwen/Qwen3-Next-80B-A3B-Thinking": 81_324_862_720,
    # HF safetensors.total, google/gemma-2-9b-it (tied embeddings)
    "google/gemma-2-9b-it": 9_241_705_984,
    # HF safetensors.total of gemma-3-27b-it (vision tower and projector included)
    "google/gemma-3-27b-it": 27_432_406_640,
    # gpt-oss model card (arXiv 2508.10925) Table 1: 116.83B; exact figure as reported by
    # llama.cpp's general.parameter_count for the checkpoint (logical parameters)
    "openai/gpt-oss-120b": 116_829_156_672,
    # gpt-oss model card Table 1: 20.91B; llama.cpp general.parameter_count of gpt-oss-20b
    "openai/gpt-oss-20b": 20_914_757_184,
}


@pytest.mark.parametrize(("name", "expected"), sorted(EXACT_TOTALS.items()))
def test_total_matches_published_exact_count(name: str, expected: int) -> None:
    assert count_params(load_model(name)).total == expected


def test_qwen3_0_6b_counts_tied_embedding_once() -> None:
    counts = count_params(load_model("Qwen/Qwen3-0.6B"))
    # HF safetensors.total of Qwen/Qwen3-0.6B is 751,632,384: the checkpoint stores
    # lm_head.weight although tie_word_embeddings is true, so it holds the
    # 151,936 x 1,024 embedding twice; the model has it once.
    assert counts.lm_head == 0
    assert counts.total + 151_936 * 1_024 == 751_632_384
    # Qwen3-0.6B model card: "Number of Parameters (Non-Embedding): 0.44B"
    assert abs((counts.total - counts.embeddings) - 0.44 * BILLION) <= 0.005 * BILLION


def test_deepseek_v3_matches_checkpoint_dtype_breakdown() -> None:
    counts = count_params(load_model("deepseek-ai/DeepSeek-V3"))
    # HF safetensors of deepseek-ai/DeepSeek-V3: F8_E4M3 680,571,043,840 (the quantized
    # linears), BF16 3,918,786,560, F32 41,555,600 (weight_scale_inv blocks plus 59 MoE
    # layers x 256 e_score_correction_bias), total 684,531,386,000. The BF16 part includes
    # layer 61's own copies of embed_tokens and shared_head.head (129,280 x 7,168 each),
    # which the MTP layer shares with the main model; scales are not parameters.
    expected = 680_571_043_840 + (3_918_786_560 - 2 * 129_280 * 7_168) + 59 * 256
    assert counts.total == expected == 682_636_487_424
    # DeepSeek-V3 technical report (arXiv 2412.19437): "671B total parameters"
    assert abs(counts.language_model - 671 * BILLION) <= 0.5 * BILLION
    # the MTP layer: one MoE decoder layer 11,507,286,272
    #   (MLA 187,107,328 + experts 256 x 3 x 7,168 x 2,048 = 11,274,289,152
    #    + shared 44,040,192 + gate 1,835,008 + bias 256 + 2 norms 14,336)
    # + eh_proj 2 x 7,168 x 7,168 = 102,760,448 + enorm/hnorm/shared_head.norm 21,504
    assert counts.mtp == 11_507_286_272 + 102_760_448 + 21_504


def test_gpt_oss_components_match_model_card_table() -> None:
    counts = count_params(load_model("openai/gpt-oss-120b"))
    # gpt-oss model card Table 1 (120b): MLP 114.71B, Attention 0.96B, Embed+Unembed 1.16B
    assert abs(counts.routed_experts + counts.routers - 114.71 * BILLION) <= 0.005 * BILLION
    assert abs(counts.attention - 0.96 * BILLION) <= 0.005 * BILLION
    assert abs(counts.embeddings + counts.lm_head - 1.16 * BILLION) <= 0.005 * BILLION
    # HF safetensors of openai/gpt-oss-120b: BF16 2,167,371,072 = everything but the
    # MXFP4 expert weights, 36 x 128 x (5,760 x 2,880 + 2,880 x 2,880) values
    assert counts.total - 36 * 128 * (5_760 * 2_880 + 2_880 * 2_880) == 2_167_371_072


def test_nemotron_h_against_published_rounded_counts() -> None:
    small = count_params(load_model("nvidia/Nemotron-H-8B-Base-8K")).total
    # 8.101B: model.safetensors.index.json metadata.total_size / 2 (bf16) of
    # nvidia/Nemotron-H-8B-Base-8K as tabulated to three decimals; tolerance half a digit
    assert abs(small - 8.101 * BILLION) <= 0.0005 * BILLION
    large = count_params(load_model("nvidia/Nemotron-H-56B-Base-8K")).total
    # model card: "This model has 56B model parameters" (rounded to 1B)
    assert abs(large - 56 * BILLION) <= 0.5 * BILLION


def test_qwen3_next_language_model_and_mtp() -> None:
    counts = count_params(load_model("Qwen/Qwen3-Next-80B-A3B-Instruct"))
    # model card: "80B in total" (rounded to 1B) for the model proper
    assert abs(counts.language_model - 80 * BILLION) <= 0.5 * BILLION
    # MTP layer: gated attention (q 2,048 x 8,192 + k, v 2,048 x 512 each + o 4,096 x
    # 2,048 + q/k norms 512 = 27,263,488) + MoE (router 2,048 x 512 = 1,048,576, experts
    # 512 x 3 x 2,048 x 512 = 1,610,612,736, shared expert 3,145,728, shared gate 2,048)
    # + 2 layer norms 4,096 + fc 4,096 x 2,048 = 8,388,608 + 3 norms 6,144
    assert counts.mtp == (
        27_263_488 + 1_048_576 + 1_610_612_736 + 3_145_728 + 2_048 + 4_096 + 8_388_608 + 6_144
    )


# No published counts exist for the EAGLE3 heads; these are the tensors their checkpoints
# ship (SafeAILab/EAGLE issue #265: midlayer.*, fc, norm, lm_head, d2t, t2d).
def test_eagle3_llama_8b_head() -> None:
    counts = count_params(load_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"))
    assert counts.embeddings == 0  # the target's embedding is used
    # q 4,096 x 8,192 + k, v 1,024 x 8,192 each + o 4,096 x 4,096 (q/k/v read 2 x hidden)
    assert counts.attention == 33_554_432 + 2 * 8_388_608 + 16_777_216
    assert counts.dense_mlp == 3 * 4_096 * 14_336
    assert counts.norms == 4 * 4_096  # input, hidden, post-attention, final
    assert counts.eagle3_fc == 4_096 * 3 * 4_096
    assert counts.lm_head == 32_000 * 4_096  # draft_vocab_size rows
    assert counts.total == 424_689_664


def test_eagle3_heads_without_draft_vocab_share_the_target_lm_head() -> None:
    counts = count_params(load_model("nvidia/gpt-oss-120b-Eagle3-long-context"))
    assert counts.lm_head == 0 and counts.embeddings == 0
    # q 4,096 x 5,760 + k, v 512 x 5,760 + o 2,880 x 4,096 = 41,287,680
    # + mlp 3 x 2,880 x 17,280 = 149,299,200 + 4 norms 11,520 + fc 2,880 x 8,640 = 24,883,200
    assert counts.total == 41_287_680 + 149_299_200 + 11_520 + 24_883_200
    big = count_params(load_model("lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B"))
    # q 8,192 x 16,384 + k, v 1,024 x 16,384 + o 8,192 x 8,192 = 234,881,024
    # + mlp 3 x 8,192 x 28,672 = 704,643,072 + norms 32,768 + fc 8,192 x 24,576
    # + lm_head 32,000 x 8,192
    assert big.total == 234_881_024 + 704_643_072 + 32_768 + 201_326_592 + 262_144_000


def test_every_preset_is_counted() -> None:
    for name in list_presets():
        counts = count_params(load_model(name))
        assert isinstance(counts, ParamCounts)
        assert counts.total > 0
        assert counts.total == counts.language_model + counts.mtp + counts.vision


# --------------------------------------------------------------------------- bytes per rank


def test_llama_8b_bytes_per_tp_rank() -> None:
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    # tp=1: 8,030,261,248 bf16 parameters x 2 bytes
    assert weights_bytes(model).total_bytes == 16_060_522_496
    # tp=2: embed and lm_head 64,128 rows x 4,096 x 2 B = 525,336,576 each;
    # per layer q 2,048 + k 512 + v 512 rows x 4,096, o 4,096 x 2,048 (20,971,520),
    # gate/up/down 3 x 7,168 x 4,096 (88,080,384), norms 8,192: 109,060,096 x 32 x 2 B
    # = 6,979,846,144; final norm 8,192 B
    assert weights_bytes(model, tp=2).total_bytes == 2 * 525_336_576 + 6_979_846_144 + 8_192
    # tp=8: embed and lm_head 16,032 x 4,096 x 2 B = 131,334,144 each; per layer q 512 +
    # k 128 + v 128 rows x 4,096, o 4,096 x 512 (5,242,880), mlp 3 x 1,792 x 4,096
    # (22,020,096), norms 8,192: 27,271,168 x 32 x 2 B = 1,745,354,752; final norm 8,192 B
    tp8 = weights_bytes(model, tp=8)
    assert tp8.total_bytes == 2 * 131_334_144 + 1_745_354_752 + 8_192 == 2_008_031_232
    assert tp8.embeddings_bytes == tp8.lm_head_bytes == 131_334_144
    assert (tp8.tp, tp8.pp, tp8.pp_stage, tp8.weights_dtype) == (8, 1, 0, "bf16")


def test_llama_8b_bytes_per_pp_stage() -> None:
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    layer_bytes = 218_112_000 * 2  # q/k/v/o 41,943,040 + mlp 176,160,768 + norms 8,192
    first = weights_bytes(model, pp=2, pp_stage=0)
    last = weights_bytes(model, pp=2, pp_stage=1)
    # stage 0: embeddings 128,256 x 4,096 x 2 B = 1,050,673,152 + layers 0-15
    assert first.total_bytes == 1_050_673_152 + 16 * layer_bytes == 8_030_257_152
    assert first.lm_head_bytes == 0
    # stage 1: layers 16-31 + final norm 8,192 B + lm_head 1,050,673,152
    assert last.total_bytes == 16 * layer_bytes + 8_192 + 1_050_673_152 == 8_030_265_344
    assert last.embeddings_bytes == 0
    largest = weights_bytes(model, pp=2)
    assert largest.pp_stage == 1 and largest.total_bytes == 8_030_265_344


def test_tied_embeddings_are_copied_to_the_last_stage() -> None:
    model = load_model("meta-llama/Llama-3.2-1B")
    # tp=1, pp=1: one copy of everything, 1,235,814,400 x 2 B
    assert weights_bytes(model).total_bytes == 2_471_628_800
    # per layer q/k/v/o 10,485,760 + mlp 3 x 2,048 x 8,192 = 50,331,648 + norms 4,096
    # = 60,821,504 params; 8 layers per stage x 2 B = 973,144,064 B
    # stage 0: embedding 128,256 x 2,048 x 2 B = 525,336,576 + its layers
    assert weights_bytes(model, pp=2, pp_stage=0).total_bytes == 525_336_576 + 973_144_064
    # stage 1: its layers + final norm 4,096 B + its own copy of the tied embedding
    last = weights_bytes(model, pp=2, pp_stage=1)
    assert last.total_bytes == 973_144_064 + 4_096 + 525_336_576
    assert last.lm_head_bytes == 525_336_576


def test_deepseek_v3_fp8_bytes_match_the_checkpoint() -> None:
    model = load_model("deepseek-ai/DeepSeek-V3")
    got = weights_bytes(model, include_mtp=True)
    # the whole checkpoint (HF dtype counts above) loaded on one rank: F8 x 1 B
    # + (BF16 less layer 61's duplicate embedding and head) x 2 B + F32 x 4 B
    bf16 = 3_918_786_560 - 2 * 129_280 * 7_168
    assert got.total_bytes == 680_571_043_840 + bf16 * 2 + 41_555_600 * 4 == 684_868_123_200
    assert got.quantization == "fp8-block128x128"
    without = weights_bytes(model)
    assert got.total_bytes - without.total_bytes == got.mtp_bytes > 0
    assert without.mtp_bytes == 0


def test_deepseek_v3_fp8_bytes_per_rank_tp8() -> None:
    got = weights_bytes(load_model("deepseek-ai/DeepSeek-V3"), tp=8)
    # embed / lm_head: 129,280 / 8 = 16,160 rows x 7,168 x 2 B (bf16) each
    assert got.embeddings_bytes == got.lm_head_bytes == 231_669_760
    # MLA per layer (fp8 + one fp32 scale per 128 x 128 block):
    #   q_a_proj replicated 1,536 x 7,168 = 11,010,048 + 12 x 56 x 4 = 11,012,736
    #   q_a_layernorm 1,536 x 2 = 3,072
    #   q_b_proj 16 heads x 192 = 3,072 rows x 1,536 = 4,718,592 + 24 x 12 x 4 = 4,719,744
    #   kv_a_proj_with_mqa replicated 576 x 7,168 = 4,128,768 + 5 x 56 x 4 = 4,129,888
    #   kv_a_layernorm 512 x 2 = 1,024
    #   kv_b_proj 16 x 256 = 4,096 rows x 512 = 2,097,152 + 32 x 4 x 4 = 2,097,664
    #   o_proj 7,168 x (16 x 128 = 2,048) = 14,680,064 + 56 x 16 x 4 = 14,683,648
    mla = 11_012_736 + 3_072 + 4_719_744 + 4_129_888 + 1_024 + 2_097_664 + 14_683_648
    assert got.attention_bytes == 61 * mla == 2_235_514_336
    # dense layers 0-2: gate/up 2,304 x 7,168 and down 7,168 x 2,304, each
    # 16,515,072 + 18 x 56 x 4 = 16,519,104
    assert got.dense_mlp_bytes == 3 * 3 * 16_519_104
    # one expert per rank: gate/up 256 x 7,168 and down 7,168 x 256, each
    # 1,835,008 + 2 x 56 x 4 = 1,835,456 -> 5,506,368; 256 experts x 58 MoE layers
    assert got.routed_experts_bytes == 58 * 256 * 5_506_368 == 81_758_552_064
    assert got.shared_experts_bytes == 58 * 5_506_368
    # router 256 x 7,168 x 2 B replicated + e_score_correction_bias 256 x 4 B (fp32)
    assert got.routers_bytes == 58 * (3_670_016 + 1_024)
    # 2 norms x 7,168 x 2 B per layer + final norm
    assert got.norms_bytes == 61 * 28_672 + 14_336
    assert got.total_bytes == 85_140_130_848


def test_gpt_oss_mxfp4_bytes() -> None:
    model = load_model("openai/gpt-oss-120b")
    tp1 = weights_bytes(model)
    # the config has no torch_dtype; the unquantized tensors are bf16
    assert (tp1.weights_dtype, tp1.quantization) == ("bf16", "mxfp4")
    # BF16 2,167,371,072 params x 2 B + expert values 114,661,785,600 stored as
    # 16 bytes of nibbles + 1 e8m0 scale byte per 32 values (x 17 / 32)
    assert tp1.total_bytes == 2_167_371_072 * 2 + 114_661_785_600 * 17 // 32 == 65_248_815_744
    # (HF: the 15 shards hold 65,248,893,184 bytes, 77,440 more: safetensors headers)
    tp2 = weights_bytes(model, tp=2)
    # per expert on a rank: gate_up 2 x 1,440 = 2,880 rows x 2,880 -> 2,880 x 90 x 17
    # = 4,406,400 + bias 2,880 x 2 B; down 2,880 x 1,440 -> 2,880 x 45 x 17 = 2,203,200
    # + replicated bias 2,880 x 2 B; x 128 experts x 36 layers
    per_expert = 4_406_400 + 5_760 + 2_203_200 + 5_760
    assert tp2.routed_experts_bytes == 36 * 128 * per_expert == 30_510_120_960


def test_nemotron_h_mamba_bytes_tp8() -> None:
    got = weights_bytes(load_model("nvidia/Nemotron-H-8B-Base-8K"), tp=8)
    # per Mamba2 layer on a rank: 16 of 128 heads x 64, 1 of 8 groups x 128 state:
    #   in_proj (z 1,024 + x 1,024 + B 128 + C 128 + dt 16 = 2,320) x 4,096 = 9,502,720
    #   conv1d (1,024 + 128 + 128 = 1,280) x 4 = 5,120 + bias 1,280
    #   dt_bias, A_log, D 3 x 16 = 48; gated norm 1,024; out_proj 4,096 x 1,024
    per_layer = 9_502_720 + 5_120 + 1_280 + 48 + 1_024 + 4_194_304
    assert got.recurrent_bytes == 24 * per_layer * 2 == 657_815_808


def test_gemma3_vision_tower_on_first_stage() -> None:
    model = load_model("google/gemma-3-27b-it")
    counts = count_params(model)
    # SigLIP: patch conv 3 x 14 x 14 x 1,152 + bias 1,152, positions 4,096 x 1,152,
    # 27 layers x 15,239,504, post LayerNorm 2,304; projector 1,152 x 5,376 + norm 1,152
    assert counts.vision == 678_528 + 4_718_592 + 27 * 15_239_504 + 2_304 + 6_194_304
    first = weights_bytes(model, pp=2, pp_stage=0)
    last = weights_bytes(model, pp=2, pp_stage=1)
    assert first.vision_bytes == counts.vision * 2 and last.vision_bytes == 0
    # stage 0: vision + embedding 262,208 x 5,376 x 2 B + 31 layers x 412,898,560 x 2 B
    assert first.total_bytes == 846_120_672 + 2_819_260_416 + 25_599_710_720
    # stage 1: 31 layers + final norm + the tied embedding's copy as lm_head
    assert last.total_bytes == 25_599_710_720 + 10_752 + 2_819_260_416


def test_eagle3_head_lives_on_the_last_stage() -> None:
    model = load_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    # 424,689,664 fp16 params x 2 B + d2t 32,000 x 8 B (int64)
    assert weights_bytes(model).total_bytes == 849_379_328 + 256_000
    assert weights_bytes(model, pp=2, pp_stage=0).total_bytes == 0
    assert weights_bytes(model, pp=2).total_bytes == 849_635_328
    tp2 = weights_bytes(model, tp=2)
    # fc is replicated: 4,096 x 12,288 x 2 B on every rank
    assert tp2.eagle3_fc_bytes == 100_663_296
    # lm_head 16,000 rows x 4,096 x 2 B + d2t 256,000 B (replicated)
    assert tp2.lm_head_bytes == 131_072_000 + 256_000


def test_qwen3_next_mtp_bytes_only_when_asked() -> None:
    model = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    assert weights_bytes(model).mtp_bytes == 0
    assert weights_bytes(model, include_mtp=True).mtp_bytes == 1_650_471_424 * 2


def test_weights_dtype_override() -> None:
    model = load_model("meta-llama/Llama-3.1-8B")
    got = weights_bytes(model, weights_dtype="fp32")
    assert got.weights_dtype == "fp32"
    assert got.total_bytes == 8_030_261_248 * 4


# --------------------------------------------------------------------------- synthetic configs


def _tiny(**extra: Any) -> dict[str, Any]:
    """A two-layer Llama: hidden 64, 4 heads of 16 (2 KV heads), MLP 128, vocab 256."""
    return {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "vocab_size": 256,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        **extra,
    }


def _tiny_bytes(**extra: Any) -> int:
    return weights_bytes(parse_config(_tiny(**extra), source="test", name="tiny")).total_bytes


# embeddings and lm_head 256 x 64 x 2 B each + final norm 64 x 2 B
_TINY_FIXED = 2 * 32_768 + 128


def test_tiny_bf16() -> None:
    # per layer q 64 x 64 + k, v 32 x 64 + o 64 x 64 + mlp 3 x 128 x 64 + norms 128
    assert _tiny_bytes() == 2 * (4_096 + 2_048 + 2_048 + 4_096 + 24_576 + 128) * 2 + _TINY_FIXED


def test_tiny_nvfp4() -> None:
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16}
    # rows x (cols / 2 nibble bytes + cols / 16 fp8 scales) + 8 B of fp32 per-tensor scales:
    # q 64 x (32 + 4) + 8 = 2,312; k, v 32 x 36 + 8 = 1,160; o 2,312;
    # gate, up 128 x 36 + 8 = 4,616; down 64 x (64 + 8) + 8 = 4,616; norms 256 B
    layer = 2_312 + 2 * 1_160 + 2_312 + 3 * 4_616 + 256
    assert _tiny_bytes(quantization_config=quant) == 2 * layer + _TINY_FIXED


def test_tiny_fp8_per_tensor_and_excluded_modules() -> None:
    # 1 B per weight + one fp32 scale per tensor: q 4,100; k, v 2,052; o 4,100;
    # gate, up, down 8,196; norms 256 B
    layer = 4_100 + 2 * 2_052 + 4_100 + 3 * 8_196 + 256
    assert _tiny_bytes(quantization_config={"quant_method": "fp8"}) == 2 * layer + _TINY_FIXED
    # the MLP kept in bf16 (3 x 8,192 x 2 B) instead of 3 x 8,196
    quant = {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.*.mlp"]}
    excluded = layer - 3 * 8_196 + 3 * 16_384
    assert _tiny_bytes(quantization_config=quant) == 2 * excluded + _TINY_FIXED


def test_tiny_fp8_blocks_round_up() -> None:
    quant = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    # every weight fits one block: 1 B per weight + 4 B per tensor
    layer = 4_100 + 2 * 2_052 + 4_100 + 3 * 8_196 + 256
    assert _tiny_bytes(quantization_config=quant) == 2 * layer + _TINY_FIXED


# --------------------------------------------------------------------------- errors


def test_unknown_architecture_names_the_model() -> None:
    base = load_model("meta-llama/Llama-3.1-8B")
    model = dataclasses.replace(base, name="tiiuae/falcon-7b", model_type="falcon")
    with pytest.raises(UnsupportedArchitectureError, match="tiiuae/falcon-7b"):
        count_params(model)
    with pytest.raises(UnsupportedArchitectureError, match="falcon"):
        weights_bytes(model)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tp": 0},
        {"tp": -2},
        {"tp": True},
        {"tp": 2.0},
        {"pp": 0},
        {"pp": 2, "pp_stage": 2},
        {"pp_stage": -1},
        {"pp": 33},
        {"weights_dtype": "int4"},
        {"weights_dtype": "fp8"},
        {"weights_dtype": "nvfp4"},
        {"include_mtp": "yes"},
    ],
)
def test_bad_arguments_raise_invalid_argument(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        weights_bytes(load_model("meta-llama/Llama-3.1-8B"), **kwargs)


def test_auto_dtype_without_a_config_dtype_is_an_error() -> None:
    model = parse_config(_tiny(torch_dtype=None), source="test", name="tiny")
    with pytest.raises(InvalidArgumentError, match="weights_dtype"):
        weights_bytes(model)
    assert weights_bytes(model, weights_dtype="bf16").weights_dtype == "bf16"


def test_unmodelled_quantization_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="quant_method"):
        _tiny_bytes(quantization_config={"quant_method": "bitsandbytes", "bits": 4})
    with pytest.raises(ConfigError, match="bits"):
        _tiny_bytes(quantization_config={"quant_method": "awq", "bits": 3})
    with pytest.raises(ConfigError, match="weight_block_size"):
        _tiny_bytes(quantization_config={"quant_method": "fp8", "weight_block_size": [128]})


def test_missing_field_is_a_config_error() -> None:
    cfg = _tiny(model_type="qwen3_moe", num_experts=4, decoder_sparse_step=1)
    model = parse_config(cfg, source="test", name="tiny-moe")  # no moe_intermediate_size
    with pytest.raises(ConfigError, match="moe_intermediate_size"):
        count_params(model)


# --------------------------------------------------------------------------- invariants


@settings(max_examples=25, deadline=None)
@given(pp=st.integers(min_value=1, max_value=8), tp=st.sampled_from([1, 2, 4, 8]))
def test_stages_partition_the_weights(pp: int, tp: int) -> None:
    model = load_model("Qwen/Qwen3-8B")  # untied: every tensor lives on exactly one stage
    stages = [weights_bytes(model, tp=tp, pp=pp, pp_stage=s) for s in range(pp)]
    assert sum(s.total_bytes for s in stages) == weights_bytes(model, tp=tp).total_bytes
    assert max(s.total_bytes for s in stages) == weights_bytes(model, tp=tp, pp=pp).total_bytes


@pytest.mark.parametrize("name", list_presets())
def test_sharding_never_loses_weights(name: str) -> None:
    model = load_model(name)
    whole = weights_bytes(model, weights_dtype="bf16").total_bytes
    for tp in (2, 8):
        per_rank = weights_bytes(model, tp=tp, weights_dtype="bf16")
        assert isinstance(per_rank, WeightsBytes)
        assert whole / tp <= per_rank.total_bytes <= whole


def test_a_multi_layer_eagle3_head() -> None:
    import json

    from kvbudget.model import _preset_dir, parse_config
    from kvbudget.weights import count_params

    cfg = json.loads((_preset_dir() / "yuhuili--EAGLE3-LLaMA3.1-Instruct-8B.json").read_text())
    one = parse_config(cfg, source="test", name="one")
    three = parse_config({**cfg, "num_hidden_layers": 3}, source="test", name="three")
    # each layer past the first reads hidden (not 2 x hidden): attention (4096 + 1024 + 1024
    # + 4096) x 4096 = 41,943,040, MLP 3 x 4096 x 14336 = 176,160,768, 3 norms of 4096:
    # 218,116,096 params each (vLLM llama_eagle3.py builds num_hidden_layers layers)
    assert count_params(three).total - count_params(one).total == 2 * 218116096
    # KV: 3 layers x 2 x 8 kv heads x 128 x 2 B
    from kvbudget import cache_cost

    assert cache_cost(three).slope == 12288
    assert three.is_eagle3


def _llama8b_with(qc: dict[str, object], dtype: str = "float16") -> Any:
    import json

    from kvbudget.model import _preset_dir, parse_config

    base = json.loads((_preset_dir() / "meta-llama--Llama-3.1-8B-Instruct.json").read_text())
    return parse_config(
        {**base, "torch_dtype": dtype, "quantization_config": qc}, source="test", name="q8b"
    )


# Llama-3.1-8B's quantized linears per layer: q, o 4096 x 4096; k, v 1024 x 4096; gate,
# up, down 14336 x 4096: 218,103,808 values; x 32 layers. Unquantized: embeddings and
# lm_head 128,256 x 4,096 each, 65 norms of 4,096, 2 B each
LINEAR = 32 * 218103808
PLAIN = (2 * 128256 * 4096 + 65 * 4096) * 2


def test_awq_int4_matches_the_published_checkpoint() -> None:
    from kvbudget.model import load_model

    w = weights_bytes(load_model("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"))
    # per value: int4 (1/2 B) + fp16 scale per 128 (2/128) + int4 zero per 128 (1/256)
    # = 0.51953125 B: 6,979,321,856 x 0.51953125 = 3,625,975,808
    assert w.total_bytes == LINEAR * 133 // 256 + PLAIN == 5727854592
    assert w.quantization == "awq-int4-g128"
    # published: shard 1 = 4,677,265,296 B + shard 2 "1.05 GB" = 5.727-5.732 GB
    assert abs(w.total_bytes / 5.73e9 - 1) < 0.01


def test_gptq_int4_adds_the_act_order_index() -> None:
    from kvbudget.model import load_model

    w = weights_bytes(load_model("hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4"))
    # as AWQ, plus g_idx int32 per input: per layer (4 x 4096 + 2 x 4096 ... ) inputs =
    # 6 x 4,096 + 14,336 = 38,912 x 4 B = 155,648; x 32 = 4,980,736
    assert w.total_bytes == 5727854592 + 32 * 155648 == 5732835328


def test_compressed_tensors_schemes() -> None:
    w8a8 = {
        "quant_method": "compressed-tensors",
        "format": "int-quantized",
        "ignore": ["lm_head"],
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
            "input_activations": {"num_bits": 8, "type": "int", "strategy": "tensor",
                                  "dynamic": False},
        }},
    }  # fmt: skip
    w = weights_bytes(_llama8b_with(w8a8, "bfloat16"))
    # int8 values + one bf16 scale per output row + one static input scale per linear:
    # rows per layer 4096 + 1024 + 1024 + 4096 + 2 x 14336 + 4096 = 43,008; 7 linears
    assert w.total_bytes == LINEAR + 32 * (43008 + 7) * 2 + PLAIN
    assert w.quantization == "compressed-tensors-int8-channel"
    w4a16 = {
        "quant_method": "compressed-tensors",
        "format": "pack-quantized",
        "config_groups": {"group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                        "symmetric": True},
        }},
    }  # fmt: skip
    w = weights_bytes(_llama8b_with(w4a16, "bfloat16"))
    # int4 packed (128/256 B) + bf16 scale per 128 (4/256), no zeros, weight_shape int64 [2]
    assert w.total_bytes == LINEAR * 132 // 256 + 32 * 7 * 16 + PLAIN == 5700595200
    with pytest.raises(ConfigError, match="asymmetric"):
        bad = json_copy(w4a16)
        bad["config_groups"]["group_0"]["weights"]["symmetric"] = False
        weights_bytes(_llama8b_with(bad))


def json_copy(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value))
