"""Exact tests of ``kvbudget.plan``: managers, splits, blocks and capacity per spec mode.

Budgets are given with ``kv_budget`` so the numbers depend only on the cache geometry;
the weights path is tested separately. Every expected value carries its arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.model import list_presets, load_model
from kvbudget.planner import EAGLE3_DRAFTS, plan

GIB = 1024**3
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA1B = "meta-llama/Llama-3.2-1B-Instruct"
EAGLE8B = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DSV3 = "deepseek-ai/DeepSeek-V3"


def test_default_eagle3_split_blocks_and_capacity() -> None:
    p = plan(kv_budget="40GiB", host_budget="64GiB", max_seq_len=8192)
    target, draft = p.managers
    assert (p.target, p.draft, p.spec) == (LLAMA8B, EAGLE8B, "eagle3")
    # target: 32 layers x 2 (K,V) x 8 kv heads x 128 x 2 B (bf16) = 131072 B/token
    assert target.slope_bytes_per_token == 131072
    # draft: EAGLE3 head, 1 layer x 2 x 8 x 128 x 2 B (target's bf16, not its fp16 config)
    assert draft.slope_bytes_per_token == 4096
    assert p.kv_dtype == "bf16"
    # GPU: B = 40 x 2^30 = 42949672960; no fixed costs;
    # draft = floor(B x 4096 / 135168) = floor(B / 33) = 1301505241; target = B - draft
    assert draft.gpu.bytes == 1301505241
    assert target.gpu.bytes == 42949672960 - 1301505241 == 41648167719
    # blocks: 41648167719 // (131072 x 32 = 4194304) = 9929; 1301505241 // 131072 = 9929
    assert target.gpu.blocks == draft.gpu.blocks == 9929
    assert target.gpu.tokens == 9929 * 32 == 317728
    # padding: 41648167719 - 9929 x 4194304 = 2923303; 1301505241 - 9929 x 131072 = 91353
    assert target.gpu.padding_bytes == 2923303
    assert draft.gpu.padding_bytes == 91353
    # host: H = 64 x 2^30 = 68719476736; draft = floor(H / 33) = 2082408385
    assert draft.host.bytes == 2082408385
    assert target.host.bytes + draft.host.bytes == 68719476736
    # host blocks: 66637068351 // 4194304 = 15887; 2082408385 // 131072 = 15887
    assert target.host.blocks == draft.host.blocks == 15887
    c = p.capacity
    assert c.tokens == 317728
    assert c.host_tokens == 15887 * 32 == 508384
    assert c.lookahead_tokens == 3
    # a sequence needs ceil((8192 + 3) / 32) = 257 blocks: 9929 // 257 = 38
    assert c.max_concurrency == 38
    # at batch 256: 9929 // 256 = 38 blocks each = 1216 tokens - 3 lookahead = 1213
    assert c.max_seq_len_at_batch == 1213


def test_host_split_never_hands_the_whole_budget_to_each_manager() -> None:
    p = plan(kv_budget="40GiB", host_budget="192GiB", disk_budget="1TiB")
    for tier in ("host", "disk"):
        parts = [m.tier(tier).bytes for m in p.managers]
        total = {"host": 192 * GIB, "disk": 1024 * GIB}[tier]
        assert sum(parts) == total
        assert all(part < total for part in parts)


def test_ngram_has_one_manager_with_lookahead() -> None:
    p = plan(spec="ngram", kv_budget="40GiB", host_budget=0, max_seq_len=8192, max_draft_len=5)
    (target,) = p.managers
    assert p.draft is None
    # all 42949672960 B to the target: 42949672960 // 4194304 = 10240 blocks exactly
    assert target.gpu.bytes == 42949672960
    assert target.gpu.blocks == 10240
    assert target.gpu.padding_bytes == 0
    # a sequence never grows past max_seq_len, lookahead included (engines reserve
    # min(tokens + K, max_seq_len)): 8192 / 32 = 256 blocks per sequence: 10240 // 256 = 40
    assert p.capacity.max_concurrency == 40
    # at the full batch of 256: 10240 // 256 = 40 blocks = 1280 tokens, 5 of them lookahead
    assert p.capacity.max_seq_len_at_batch == 1275
    assert p.capacity.lookahead_tokens == 5


def test_none_has_no_lookahead() -> None:
    p = plan(spec="none", kv_budget="40GiB", host_budget=0, max_seq_len=8192)
    # 8192 / 32 = 256 blocks per sequence: 10240 // 256 = 40
    assert p.capacity.max_concurrency == 40
    assert p.capacity.lookahead_tokens == 0


def test_mtp_inside_the_target_manager_by_default() -> None:
    p = plan(DSV3, spec="mtp", kv_budget="40GiB", host_budget=0, max_seq_len=4096)
    (target,) = p.managers
    assert target.layers == "all"
    # (61 model + 1 MTP) layers x 576-value latent x 2 B = 71424 B/token
    assert target.slope_bytes_per_token == 71424
    # 42949672960 // (71424 x 32 = 2285568) = 18791 blocks
    assert target.gpu.blocks == 18791


def test_mtp_separate_draft_cache_splits_by_slope() -> None:
    p = plan(
        DSV3,
        spec="mtp",
        separate_draft_cache=True,
        kv_budget="40GiB",
        host_budget=0,
        max_seq_len=4096,
    )
    target, draft = p.managers
    assert (target.layers, draft.layers) == ("model", "mtp")
    # target 61 x 576 x 2 = 70272; draft 1 x 576 x 2 = 1152
    assert (target.slope_bytes_per_token, draft.slope_bytes_per_token) == (70272, 1152)
    # draft = floor(42949672960 x 1152 / 71424) = 692736660
    assert draft.gpu.bytes == 692736660
    assert target.gpu.bytes == 42949672960 - 692736660
    # 42256936300 // (70272 x 32) = 18791; 692736660 // (1152 x 32) = 18791
    assert target.gpu.blocks == draft.gpu.blocks == 18791


def test_mla_latent_is_replicated_across_tp() -> None:
    p1 = plan(DSV3, spec="mtp", kv_budget="40GiB", host_budget=0, weights_bytes=0)
    p8 = plan(DSV3, spec="mtp", kv_budget="40GiB", host_budget=0, tp=8, weights_bytes=0)
    assert p1.managers[0].slope_bytes_per_token == p8.managers[0].slope_bytes_per_token == 71424


def test_draft_target_uses_the_drafts_own_geometry() -> None:
    p = plan(
        LLAMA8B, LLAMA1B, spec="draft-target", kv_budget="40GiB", host_budget=0, max_seq_len=8192
    )
    _, draft = p.managers
    # Llama-3.2-1B: 16 layers x 2 x 8 kv heads x 64 head_dim x 2 B = 32768 (not 8B's 131072)
    assert draft.slope_bytes_per_token == 32768
    # draft = floor(42949672960 x 32768 / 163840) = floor(B / 5) = 8589934592
    assert draft.gpu.bytes == 8589934592
    # 34359738368 // 4194304 = 8192; 8589934592 // (32768 x 32) = 8192
    assert p.capacity.tokens == 8192 * 32


def test_draft_target_with_a_different_vocabulary_warns() -> None:
    # another family's tokenizer: planned (the bytes are right), with a warning
    p = plan("Qwen/Qwen3-8B", LLAMA1B, spec="draft-target", kv_budget="40GiB")
    assert any("vocab_size 128,256" in w for w in p.warnings)


def test_tp8_shards_kv_heads() -> None:
    p = plan(
        "meta-llama/Llama-3.3-70B-Instruct", spec="eagle3", kv_budget="40GiB", host_budget=0, tp=8
    )
    target, draft = p.managers
    # 80 layers x 2 x ceil(8/8)=1 kv head x 128 x 2 B = 40960
    assert target.slope_bytes_per_token == 40960
    # EAGLE3-70B head: 1 layer x 2 x 1 x 128 x 2 = 512
    assert draft.slope_bytes_per_token == 512


def test_pp2_reports_the_last_stage_with_the_draft() -> None:
    p = plan(kv_budget="40GiB", host_budget=0, pp=2, max_seq_len=8192)
    target, draft = p.managers
    # 32 layers over 2 stages: 16 each; 16 x 2 x 8 x 128 x 2 = 65536
    assert target.slope_bytes_per_token == 65536
    assert draft.slope_bytes_per_token == 4096
    assert p.pp_stage == 1
    # stage 0 holds only target layers: 42949672960 // (65536 x 32) = 20480 blocks;
    # stage 1: draft = floor(B x 4096 / 69632) = floor(B / 17) = 2526451350,
    # target 40423221610 // 2097152 = 19275 blocks -> stage 1 binds
    assert p.binding_pp_stage == 1
    assert target.gpu.blocks == 19275


def test_gpt_oss_window_layers_are_a_fixed_cost() -> None:
    p = plan(
        "openai/gpt-oss-120b", kv_budget="40GiB", host_budget=0, max_batch_size=64, max_seq_len=8192
    )
    target, draft = p.managers
    # kv auto: gpt-oss names no dtype -> the EAGLE3 head's bf16
    assert p.kv_dtype == "bf16"
    # 18 full layers x 2 x 8 x 64 x 2 B = 36864 B/token
    assert target.slope_bytes_per_token == 36864
    # 18 sliding layers (window 128, +3 lookahead): ceil((131 - 1) / 32) + 1 = 6 blocks
    # = 192 tokens x 18 x 2048 B = 7077888 B per sequence x 64 sequences = 452984832
    assert target.fixed_bytes == 452984832
    assert target.window_bytes == 452984832
    (group,) = target.window_groups
    assert (group.window_tokens, group.num_layers, group.blocks_per_seq) == (128, 18, 6)
    # the draft has no fixed cost: 1 layer x 2 x 8 x 64 x 2 = 2048 B/token
    assert (draft.slope_bytes_per_token, draft.fixed_bytes) == (2048, 0)
    # rest = 42949672960 - 452984832 = 42496688128; draft = floor(rest x 2048 / 38912)
    # = floor(rest / 19) = 2236667796; target = B - draft
    assert draft.gpu.bytes == 2236667796
    # blocks: (40713005164 - 452984832) // (36864 x 32) = 34128;
    # 2236667796 // 65536 = 34129 -> common 34128
    assert p.capacity.tokens == 34128 * 32


def test_qwen3_next_recurrent_state_is_a_fixed_cost() -> None:
    p = plan(
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        spec="ngram",
        kv_budget="40GiB",
        host_budget=0,
        max_batch_size=16,
        max_seq_len=8192,
    )
    (target,) = p.managers
    # 12 full layers x 2 x 2 kv heads x 256 x 2 B = 24576 B/token
    assert target.slope_bytes_per_token == 24576
    # one state: 36 linear layers x (32 x 128 x 128 + (3 + 3) conv rows x (2 x 16 x 128 +
    # 32 x 128)) x 2 B = 36 x (524288 + 49152) x 2 = 41287680 B; ngram keeps K=3 more for
    # rollback: (1 + 3) x 41287680 = 165150720 B per sequence; x 16 sequences = 2642411520
    assert target.state_bytes_per_seq == 165150720
    # a cached state (prefix reuse) is one state with conv_kernel - 1 = 3 conv rows:
    # 36 x (524288 + 3 x 8192) x 2 B = 39518208 B; 16 of them by default (max_batch_size)
    assert (target.cached_states, target.state_bytes_per_checkpoint) == (16, 39518208)
    # 2642411520 + 16 x 39518208 = 2642411520 + 632291328
    assert target.fixed_bytes == 3274702848
    off = plan(
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        spec="ngram",
        kv_budget="40GiB",
        host_budget=0,
        max_batch_size=16,
        max_seq_len=8192,
        cached_states=0,
    )
    assert off.managers[0].fixed_bytes == 2642411520  # running slots only


def test_nemotron_h_mamba_state_and_attention() -> None:
    p = plan(
        "nvidia/Nemotron-H-8B-Base-8K",
        spec="none",
        kv_budget="20GiB",
        host_budget=0,
        max_batch_size=8,
    )
    (target,) = p.managers
    # 4 attention layers x 2 x 8 x 128 x 2 B = 16384 B/token
    assert target.slope_bytes_per_token == 16384
    # 24 Mamba2 layers x (128 x 64 x 128 x 4 B (fp32 SSM state) + 3 x (128 x 64 + 2 x 8 x
    # 128) x 2 B) = 24 x (4194304 + 61440) = 102137856 per sequence; x 8 = 817102848;
    # no lookahead, so a cached state is the same size: 8 more (prefix reuse) = 817102848
    assert target.state_bytes_per_checkpoint == target.state_bytes_per_seq == 102137856
    assert target.fixed_bytes == 817102848 + 817102848 == 1634205696


def test_gemma3_fixed_cost_too_large_is_infeasible_with_advice() -> None:
    with pytest.raises(InfeasibleBudgetError) as err:
        plan("google/gemma-3-27b-it", spec="ngram", kv_budget="20GiB", max_batch_size=256)
    message = str(err.value)
    assert "fixed cost" in message and "--max-batch-size" in message
    assert "21474836480 bytes" in message  # the GPU budget, exact


def test_one_sequence_that_does_not_fit_is_infeasible_with_the_longest_that_fits() -> None:
    with pytest.raises(InfeasibleBudgetError) as err:
        plan(spec="none", kv_budget="1GiB", host_budget=0, max_seq_len=131072)
    # 2^30 // 4194304 = 256 blocks -> longest 256 x 32 = 8192 tokens
    assert "longest sequence that fits is 8192 tokens" in str(err.value)


def test_derived_budget_subtracts_weights_and_reserve() -> None:
    p = plan(weights_bytes="16GB", reserve="4GiB", memory_fraction=0.5, gpu="H200", host_budget=0)
    # H200 CUDA-visible total 150021734400 B (GPUS.md);
    # (150021734400 - 16000000000 - 4294967296) x 0.5 = 64863383552
    assert p.budget.gpu_bytes == 64863383552
    assert sum(m.gpu.bytes for m in p.managers) == 64863383552


def test_weights_larger_than_the_gpu_is_infeasible() -> None:
    with pytest.raises(InfeasibleBudgetError, match="weights"):
        plan(weights_bytes="200GB", gpu="H200")


def test_node_host_memory_warning() -> None:
    p = plan(
        kv_budget="40GiB",
        host_budget="192GiB",
        tp=8,
        gpus_per_node=8,
        host_memory="2TiB",
        target="meta-llama/Llama-3.3-70B-Instruct",
    )
    # 8 ranks x 192 GiB = 1536 GiB <= 2048 GiB: no warning
    assert not any("host memory" in w for w in p.warnings)
    p = plan(
        kv_budget="40GiB",
        host_budget="384GiB",
        tp=8,
        gpus_per_node=8,
        host_memory="2TiB",
        target="meta-llama/Llama-3.3-70B-Instruct",
    )
    # 8 x 384 GiB = 3072 GiB > 2048 GiB
    assert any("host memory" in w for w in p.warnings)
    assert p.to_dict()["budget"]["node_host_bytes"] == 8 * 384 * GIB


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tp": 0}, "tp must be >= 1"),
        ({"tp": 3}, "tp=3"),
        ({"kv_budget": "-1GiB"}, "negative"),
        ({"kv_budget": "lots"}, "byte size"),
        ({"kv_dtype": "fp6"}, "unknown kv_dtype"),
        ({"gpu": "H900", "kv_budget": None}, "unknown GPU"),
        ({"spec": "medusa"}, "unknown spec"),
        ({"spec": "ngram", "draft": EAGLE8B}, "no draft"),
        ({"spec": "mtp"}, "no MTP layers"),
        ({"memory_fraction": 1.5}, "memory_fraction"),
        ({"separate_draft_cache": True}, "--separate-draft-cache applies to --spec mtp only"),
        ({"target": EAGLE8B, "spec": "ngram"}, "EAGLE3 draft head, not a target model"),
        ({"state_dtype": "fp6"}, "unknown state_dtype"),  # checked even without state layers
    ],
)
def test_bad_input_is_a_typed_error(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"kv_budget": "40GiB", **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        plan(**args)  # type: ignore[arg-type]


def test_json_schema_is_stable_and_integer() -> None:
    data = json.loads(plan(kv_budget="40GiB").to_json())
    assert data["schema"] == 3
    assert data["engine"]["name"] == "kvbudget"
    # the plan's capacity is the engine's, one object
    assert data["engine"]["capacity"] == data["capacity"]
    assert {"name", "version", "source", "pools", "capacity", "settings", "log"} <= set(
        data["engine"]
    )
    assert {"warnings", "refusals", "detail"} <= set(data["engine"])
    for key in ("gpu_bytes", "host_bytes", "disk_bytes"):
        assert isinstance(data["budget"][key], int)
    expected = {
        "role",
        "model",
        "slope_bytes_per_token",
        "fixed_bytes",
        "gpu_bytes",
        "host_bytes",
        "disk_bytes",
        "block_bytes",
        "tokens_per_block",
    }
    for manager in data["managers"]:
        assert expected <= manager.keys()
    pool_keys = {"role", "kind", "tier", "tokens_per_block", "blocks", "bytes", "tokens"}
    for pool in data["engine"]["pools"]:
        assert pool_keys <= pool.keys()
        assert all(isinstance(pool[k], int) for k in ("blocks", "bytes", "tokens"))
    assert {"tokens", "max_concurrency", "max_seq_len_at_batch"} <= data["capacity"].keys()
    assert isinstance(data["warnings"], list)


def test_qwen3_next_mtp_adds_its_attention_layer_to_the_target_manager() -> None:
    p = plan(
        "Qwen/Qwen3-Next-80B-A3B-Instruct",
        spec="mtp",
        kv_budget="40GiB",
        host_budget=0,
        max_batch_size=16,
        max_seq_len=8192,
    )
    (target,) = p.managers
    # (12 full + 1 MTP) layers x 2 x 2 kv heads x 256 x 2 B = 26624 B/token
    assert target.slope_bytes_per_token == 26624


def test_gpt_oss_without_a_config_dtype_plans_with_an_explicit_kv_dtype() -> None:
    # openai/gpt-oss-120b's config names no torch_dtype (mxfp4 checkpoint); with ngram no
    # draft config supplies one, so "auto" is an error and an explicit dtype works:
    # 18 full layers x 2 x 8 kv heads x 64 x 2 B = 36864 B/token
    p = plan("openai/gpt-oss-120b", spec="ngram", kv_dtype="bf16", kv_budget="40GiB")
    assert p.managers[0].slope_bytes_per_token == 36864


def test_concurrency_is_capped_at_the_batch_size_with_a_warning() -> None:
    p = plan(spec="none", kv_budget="40GiB", host_budget=0, max_seq_len=8192, max_batch_size=16)
    # 10240 blocks // 256 blocks per sequence = 40 sequences fit, but only 16 run at once
    assert p.capacity.max_concurrency == 16
    # 10240 // 16 = 640 blocks each = 20480 tokens, capped at max_seq_len 8192
    assert p.capacity.max_seq_len_at_batch == 8192
    assert any("hold 40 sequences" in w and "max_batch_size is 16" in w for w in p.warnings)


def test_window_model_concurrency_never_exceeds_its_window_pools() -> None:
    # gpt-oss-120b's window pools exist for max_batch_size=8 sequences only
    p = plan(
        "openai/gpt-oss-120b",
        kv_budget="60GiB",
        max_batch_size=8,
        max_seq_len=8192,
        host_budget=0,
    )
    assert p.capacity.max_concurrency == 8


def test_given_kv_budget_larger_than_the_gpu_warns() -> None:
    p = plan(kv_budget="200GiB", gpu="H200", max_seq_len=8192)
    # 200 GiB + weights (8030261248 + 424817664 EAGLE3 params) x 2 B = 16910157824 B
    # + the non-KV estimate (1.96 GiB) = 217.71 GiB > H200's 150021734400 B (139.72 GiB)
    (warning,) = [w for w in p.warnings if "--kv-budget" in w]
    assert "217.71 GiB per rank" in warning and "139.72 GiB" in warning
    # 40 GiB + 15.75 GiB + 1.96 GiB fits in 139.72 GiB: no warning
    assert not any("--kv-budget" in w for w in plan(kv_budget="40GiB", gpu="H200").warnings)


def test_fixed_cost_error_when_not_even_one_sequence_fits() -> None:
    with pytest.raises(InfeasibleBudgetError) as err:
        plan("google/gemma-3-27b-it", spec="ngram", kv_budget="1GiB", max_seq_len=100000)
    message = str(err.value)
    assert "not even one sequence of 100000 tokens fits" in message
    assert "(to 0)" not in message and "PP stage" not in message


def test_node_warning_for_one_rank_says_rank() -> None:
    p = plan(kv_budget="40GiB", host_budget="64GiB", host_memory="32GiB")
    (warning,) = [w for w in p.warnings if "host memory" in w]
    assert warning.startswith("1 rank per node pins 64.00 GiB of host KV cache")


def test_given_kv_budget_plans_a_config_without_weight_fields(tmp_path: Path) -> None:
    # no intermediate_size: weights cannot be counted, but a given budget needs none
    config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 512,
        "max_position_embeddings": 4096,
        "torch_dtype": "bfloat16",
        "vocab_size": 1000,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    p = plan(str(tmp_path), spec="none", kv_budget="1GiB", host_budget=0)
    # 4 layers x 2 x 2 kv heads x 64 x 2 B = 2048 B/token
    assert p.managers[0].slope_bytes_per_token == 2048
    # 2^30 // (2048 x 32) = 16384 blocks; 4096 / 32 = 128 blocks a sequence -> 128 at once
    assert p.capacity.max_concurrency == 128
    assert not any("--kv-budget" in w for w in p.warnings)


def test_kv_dtype_auto_is_bf16_when_the_config_names_none() -> None:
    # gpt-oss-120b's config has no torch_dtype (MXFP4 checkpoint): engines run its KV in bf16
    p = plan("openai/gpt-oss-120b", spec="ngram", kv_budget="40GiB", max_seq_len=8192)
    assert p.kv_dtype == "bf16"
    # 18 full layers x 2 (K, V) x 8 KV heads x 64 x 2 B = 36,864 B per token
    assert p.managers[0].slope_bytes_per_token == 36_864


@pytest.mark.parametrize("name", [n for n in list_presets() if not load_model(n).is_head])
def test_spec_auto_plans_every_preset_target(name: str) -> None:
    p = plan(name, kv_budget="80GiB", tp=8, max_seq_len=4096, max_batch_size=8, host_budget=0)
    model = load_model(name)
    expected = "eagle3" if name in EAGLE3_DRAFTS else "mtp" if model.mtp_layers else "none"
    assert p.spec == expected
    assert p.spec_reason is not None and p.spec_reason.startswith(f"spec auto chose {expected}")


def test_spec_auto_follows_the_draft() -> None:
    small = plan(
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.2-1B-Instruct",
        kv_budget="40GiB",
        tp=8,
        max_seq_len=4096,
    )
    assert small.spec == "draft-target"
    given = plan(spec="eagle3", kv_budget="40GiB", max_seq_len=4096)
    assert given.spec_reason is None


def test_an_eagle3_head_is_not_a_draft_model_and_k0_is_no_speculation() -> None:
    with pytest.raises(InvalidArgumentError, match="is an EAGLE3 head, not a draft model"):
        plan(draft=EAGLE8B, spec="draft-target", kv_budget="40GiB", max_seq_len=4096)
    with pytest.raises(InvalidArgumentError, match="--max-draft-len 0 means no speculation"):
        plan(spec="eagle3", max_draft_len=0, kv_budget="40GiB", max_seq_len=4096)
    assert plan(spec="none", max_draft_len=0, kv_budget="40GiB", max_seq_len=4096).spec == "none"


def test_host_capacity_with_pp_is_the_smallest_stages() -> None:
    p = plan(
        "meta-llama/Llama-3.1-70B-Instruct",
        spec="none",
        pp=3,
        kv_budget="40GiB",
        host_budget="64GiB",
        max_seq_len=8192,
    )
    # 80 layers over 3 stages: 27, 27, 26; 64 GiB of host per rank at 27 x 4,096 B/token
    # = 110,592 B/token -> 68,719,476,736 // (110,592 x 32) = 19,418 blocks = 621,376
    # tokens (the last stage's 26 layers alone would hold 645,248)
    assert p.capacity.host_tokens == 621_376


def test_a_pp_stage_without_attention_layers_does_not_bind() -> None:
    p = plan(
        "nvidia/Nemotron-H-8B-Base-8K",
        spec="none",
        kv_budget="60GiB",
        pp=8,
        max_seq_len=4096,
        max_batch_size=8,
    )
    # some of the 8 stages hold only Mamba2 / MLP layers: they cache no token
    assert p.capacity.max_concurrency == 8
    assert p.capacity.gpu_blocks > 0


def test_a_size_copied_from_a_log_is_rounded_down_with_a_warning() -> None:
    p = plan(kv_budget="23.58 GiB", spec="none", max_seq_len=8192)
    # 23.58 x 2^30 = 25318832209.92 -> 25318832209 bytes
    assert p.budget.gpu_bytes == 25318832209
    assert any("kv_budget '23.58 GiB'" in w and "rounded down" in w for w in p.warnings)


def test_a_draft_with_a_shorter_context_warns_with_the_number() -> None:
    p = plan(kv_budget="40GiB", max_seq_len=8192)  # the Llama-3.1-8B EAGLE3 head
    (warning,) = [w for w in p.warnings if "trained on" in w]
    assert "2,048 positions" in warning and "max_seq_len 8,192" in warning
    assert not any("trained on" in w for w in plan(kv_budget="40GiB", max_seq_len=2048).warnings)


def test_a_draft_with_another_vocabulary_warns(tmp_path: Any) -> None:
    import json

    from kvbudget.model import _preset_dir

    config = json.loads((_preset_dir() / "meta-llama--Llama-3.2-1B-Instruct.json").read_text())
    config["vocab_size"] = 128000  # a padded (or another) tokenizer's table
    (tmp_path / "config.json").write_text(json.dumps(config))
    p = plan(
        "meta-llama/Llama-3.1-8B-Instruct", str(tmp_path), spec="draft-target",
        kv_budget="40GiB", max_seq_len=8192,
    )  # fmt: skip
    (warning,) = [w for w in p.warnings if "vocab_size" in w]
    assert "128,000" in warning and "128,256" in warning


def test_mtp_with_two_layers() -> None:
    from kvbudget.model import _preset_dir, parse_config

    cfg = json.loads((_preset_dir() / "deepseek-ai--DeepSeek-V3.json").read_text())
    model = parse_config({**cfg, "num_nextn_predict_layers": 2}, source="test", name="ds-mtp2")
    assert len(model.mtp_layers) == 2
    p = plan(model, spec="mtp", kv_budget="40GiB", max_seq_len=8192)
    # (61 + 2 MTP) MLA layers x (512 + 64) x 2 B = 72,576 B/token in the target's cache
    assert p.managers[0].slope_bytes_per_token == 72576 and p.managers[0].num_layers == 63


def test_a_tp_that_cannot_shard_the_heads_suggests_only_sizes_that_pass() -> None:
    # query heads split evenly (32 % tp == 0): 64 would fail too, so it is not offered
    with pytest.raises(InvalidArgumentError) as caught:
        plan("meta-llama/Llama-3.1-8B-Instruct", tp=64, kv_budget="8GiB", max_seq_len=4096)
    assert str(caught.value).endswith(
        "num_attention_heads=32 of meta-llama/Llama-3.1-8B-Instruct; use a tp that divides "
        "it, e.g. 1, 2, 4, 8, 16, 32"
    )
