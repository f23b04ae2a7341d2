"""TensorRT-LLM's V1 managers per PP stage: exact values, each TensorRT-LLM's own.

Every expected value below is what TensorRT-LLM's sizing code gives for the plan's
emitted settings, as ``benchmarks/fidelity/trtllm/trtllm_fidelity.py`` runs it (the code
transcribed in ``shared/trtllm-src``; files and commits in its SOURCES.md:
``tensorrt_llm/_torch/pyexecutor/_util.py`` @ 38198e34, ``resource_manager.py`` @
1fe0b08f, ``llmapi/llm_args.py`` @ 00043967). The arithmetic is beside each value.
"""

from __future__ import annotations

from typing import Any

import pytest

import kvbudget
from kvbudget import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.engines import trtllm as trt
from kvbudget.engines import trtllm_v2 as v2
from kvbudget.plan_types import Plan

GIB = 1024**3


def plan(target: str, **kwargs: Any) -> Plan:
    args: dict[str, Any] = {"spec": "none", "engine": "trtllm", "max_seq_len": 32768}
    args.update(kwargs)
    return kvbudget.plan(target, **args)


def stage(p: Plan, index: int) -> dict[str, dict[str, Any]]:
    """The managers of PP stage ``index`` in the plan's detail, by role."""
    (entry,) = [s for s in p.engine.detail["stages"] if s["pp_stage"] == index]
    return {m["role"]: m for m in entry["managers"]}


def window(manager: dict[str, Any], size: int | None) -> dict[str, Any]:
    (w,) = [w for w in manager["windows"] if w["window"] == size]
    return w


def test_pp_layers_split_like_tensor_split() -> None:
    # Mapping.pp_layers: torch.tensor_split(arange(n), pp) gives the first n % pp stages
    # one more layer: 61 over 4 -> 16, 15, 15, 15 (vLLM's split would be 15, 15, 16, 15)
    assert [len(trt.pp_layers(61, 4, s)) for s in range(4)] == [16, 15, 15, 15]
    assert [trt.pp_layers(80, 3, s) for s in range(3)] == [range(0, 27), range(27, 54),
                                                           range(54, 80)]  # fmt: skip
    assert list(trt.pp_layers(1, 2, 1)) == []


def test_sliding_windows_under_pp_hold_the_smallest_stage_count() -> None:
    p = plan("google/gemma-2-9b-it", tp=4, pp=2, kv_budget="8GiB", max_seq_len=8192)
    s = p.engine.settings
    # 42 layers, sliding on even ones; 2 KV heads x 256 x 2 x 2 B = 2,048 B per layer and
    # rank. Stage 0 (layers 0-20): 11 sliding (22,528 B/token) + 10 full (20,480);
    # stage 1 (21-41): 10 sliding + 11 full. max_tokens = 8 GiB // 43,008 -> 199,712
    assert s["kv_cache_config.max_tokens"] == 199_712
    p_bytes = 43_008 * 199_712  # min(price x max_tokens, max_gpu_total_bytes)
    assert s["kv_cache_config.max_gpu_total_bytes"] == p_bytes == 8_589_213_696
    assert s["env.TRTLLM_WINDOW_SIZE_SHARES"] == "0.305141,0.694859"
    # calculate_max_num_blocks_for_vswa per stage, int(P x share / bytes // 32):
    # window 4096: stage 0 int(8,589,213,696 x 0.305141 / 22,528 // 32) = 3,635, stage 1
    # 3,999; full: stage 0 9,106, stage 1 8,278; allreduce(MIN) leaves 3,635 and 8,278
    for index in (0, 1):
        target = stage(p, index)["target"]
        assert window(target, 4096)["primary_blocks"] == 3_635
        assert window(target, None)["primary_blocks"] == 8_278
    # so the sliding pool binds: 3,635 // (4,096 / 32 + 1) = 28 sequences (the full
    # pool would hold 8,278 // 256 = 32)
    assert p.capacity.max_concurrency == 28
    assert window(stage(p, 0)["target"], 4096)["bytes_per_token"] == 22_528
    assert window(stage(p, 1)["target"], 4096)["bytes_per_token"] == 20_480
    # the full window is TensorRT-LLM's max_seq_len: 8,192 + 1 (overlap scheduler)
    assert window(stage(p, 1)["target"], None)["attention_window"] == 8_193


def test_a_window_longer_than_its_pool_is_cut_to_it() -> None:
    p = plan("meta-llama/Llama-3.1-8B-Instruct", kv_budget="2GiB", engine="trtllm@v1")
    # 2 GiB // 131,072 B/token = 16,384 tokens = 512 blocks < the 32,769-token window:
    # _validate_and_adjust_attention_windows cuts it (and max_seq_len) to 16,384
    (target,) = p.engine.detail["managers"]
    assert window(target, None)["primary_blocks"] == 512
    assert window(target, None)["attention_window"] == 16_384
    assert "[KVCacheManager] blocks_per_window: {16384: (512, 0)}  (target)" in p.engine.log
    assert any("cuts the target manager's full-length attention window to 16384" in w
               for w in p.warnings)  # fmt: skip


def test_a_checkpoint_that_quantizes_its_kv_cache_runs_it_so() -> None:
    # Qwen3-32B-NVFP4: kv_cache_quant_algo FP8; "auto" keeps it and another dtype only
    # warns (TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype)
    with pytest.raises(InvalidArgumentError, match="plan with --kv-dtype fp8"):
        plan("nvidia/Qwen3-32B-NVFP4", kv_dtype="bf16", kv_budget="8GiB")
    p = plan("nvidia/Qwen3-32B-NVFP4", kv_budget="8GiB")
    # 64 layers x 8 KV heads x 128 x 2 x 1 B = 131,072 B/token
    assert p.engine.detail["managers"][0]["bytes_per_token"] == 131_072


def test_attention_dp_makes_every_rank_its_own_attention_group() -> None:
    with pytest.raises(InvalidArgumentError, match="use --dp 8"):
        plan("openai/gpt-oss-120b", tp=8, dp=2, dp_attention=True, kv_budget="8GiB")


# ---------------------------------------------------------------- issue #18, cause 1


def test_mla_on_hopper_uses_flashmlas_64_token_blocks() -> None:
    # create_py_executor (py_executor_creator.py @ 000429d5): "Change tokens_per_block to:
    # 64 for using FlashMLA" where ModelConfig.enable_flash_mla: TRTLLM backend, a
    # kv_lora_rank + qk_rope_head_dim = 512 + 64 = 576 latent, SM 9.0 (the H200 default)
    p = plan("deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, kv_budget=52_714_052_640,
             max_seq_len=163_840, engine="trtllm@v1")  # fmt: skip
    assert p.capacity.tokens_per_block == 64
    assert p.engine.settings["kv_cache_config.tokens_per_block"] == 64
    # 52,714,052,640 // (70,272 + 1,152) = 738,044 -> 737,984 in blocks of 64: 11,531
    # blocks per manager (23,063 in blocks of 32 before); one sequence holds
    # 163,840 + 3 + 2 tokens = 2,561 blocks of 64 (5,121 of 32)
    assert p.engine.settings["kv_cache_config.max_tokens"] == 737_984
    target, draft = p.engine.detail["managers"]
    assert window(target, None)["primary_blocks"] == window(draft, None)["primary_blocks"]
    assert window(target, None)["primary_blocks"] == 11_531
    assert p.engine.detail["blocks_per_sequence"] == 2_561
    assert p.engine.log[0] == "Change tokens_per_block to: 64 for using FlashMLA"
    assert any("FlashMLA on SM 9.0" in n for n in p.engine.notes)


def test_flashmla_needs_sm90_and_the_576_wide_latent() -> None:
    # B200 is SM 10.0 (enable_flash_mla asks for (9, 0)): the given 32 stays,
    # 738,044 -> 738,016 tokens = 23,063 blocks
    b200 = plan("deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, kv_budget=52_714_052_640,
                max_seq_len=163_840, gpu="B200", engine="trtllm@v1")  # fmt: skip
    assert b200.capacity.tokens_per_block == 32
    assert window(b200.engine.detail["managers"][0], None)["primary_blocks"] == 23_063
    # GLM-4.5 is not MLA: its block stays the given one on an H200
    assert plan("zai-org/GLM-4.5", kv_budget="8GiB").capacity.tokens_per_block == 32


def test_every_nvidia_preset_has_a_compute_capability() -> None:
    from kvbudget.deployment import resolve_deployment
    from kvbudget.gpus import get_gpu, list_gpus

    for name in list_gpus():
        gpu = get_gpu(name)
        d = resolve_deployment(gpu=name, kv_budget="8GiB", engine="trtllm", spec="none")
        assert (trt.sm_version(d) is None) == gpu.name.startswith("AMD"), gpu.name
    d = resolve_deployment(gpu="GH200", kv_budget="8GiB", engine="trtllm", spec="none")
    assert trt.sm_version(d) == (9, 0)  # GH200, not H200's prefix
    d = resolve_deployment(gpu="A100-80GB", kv_budget="8GiB", engine="trtllm", spec="none")
    assert trt.sm_version(d) == (8, 0)  # A100, not A10


# ---------------------------------------------------------------- issue #18, cause 2


def test_attention_dp_puts_the_mtp_layer_in_the_target_manager() -> None:
    # KvCacheCreator._should_create_separate_draft_kv_cache (_util.py @ 38198e34): "Attention
    # DP is enabled, separate draft KV cache is not supported"; get_pp_layers
    # (resource_manager.py @ 1fe0b08f) then appends the spec layer to the target's
    p = plan("deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, dp=8, dp_attention=True, ep=8,
             kv_budget="40GiB", engine="trtllm@v1")  # fmt: skip
    (target,) = p.engine.detail["managers"]
    # 61 + 1 MLA layers x 1,152 B = 71,424 B/token (70,272 + a 1,152 B/token draft before)
    assert (target["role"], target["num_layers"]) == ("target", 62)
    assert target["bytes_per_token"] == 71_424
    # the creator prices only num_hidden_layers (get_cache_size_per_token): 61 x 1,152
    assert target["price_bytes_per_token"] == 70_272
    # 40 GiB // 71,424 = 601,342 -> 601,280 in blocks of 64 (FlashMLA): 9,395 blocks
    assert window(target, None)["primary_blocks"] == 9_395
    assert any("no separate draft manager" in n for n in p.engine.notes)


def test_attention_dp_gives_a_joined_eagle3_layer_the_patterns_window() -> None:
    # the head is layer 36 of the target manager; max_attention_window [128, 33792] repeats
    # cyclically (_get_window_size_to_layers): 36 % 2 = 0 -> the 128-token window
    p = plan("openai/gpt-oss-120b", spec="eagle3", tp=8, dp=8, dp_attention=True, ep=8,
             kv_budget="8GiB", engine="trtllm@v1")  # fmt: skip
    (target,) = p.engine.detail["managers"]
    assert target["num_layers"] == 37
    # 19 sliding layers x 2,048 B (8 KV heads x 64 x 2 x 2 B, attention DP: 1 rank) and
    # 18 full ones
    assert window(target, 128)["bytes_per_token"] == 38_912
    assert window(target, None)["bytes_per_token"] == 36_864
    # 6 sequences of 32,768 + 5 tokens fit the full pool (7,045 // 1,025); the sliding
    # share, rounded up to 0.005365, holds what they need there: 6 x (ceil(133 / 32) + 1)
    # = 36 blocks (0.005364 gave 35)
    assert p.engine.settings["env.TRTLLM_WINDOW_SIZE_SHARES"] == "0.005365,0.994635"
    assert window(target, 128)["primary_blocks"] == 36
    assert p.capacity.max_concurrency == 6


def test_attention_dp_with_a_draft_model_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="draft-target with --dp-attention"):
        plan("meta-llama/Llama-3.1-8B-Instruct", draft="meta-llama/Llama-3.2-1B-Instruct",
             spec="draft-target", tp=8, dp=8, dp_attention=True, kv_budget="8GiB")  # fmt: skip


# ---------------------------------------------------------------- issue #18, cause 3


def test_a_draft_model_under_pp_is_split_over_the_stages_like_the_target() -> None:
    # _create_one_model_draft_kv_cache_manager passes the draft's own layer mask (all
    # True); get_pp_layers (resource_manager.py @ 1fe0b08f) splits it with
    # mapping.pp_layers: 16 Llama-3.2-1B layers -> 8 per stage
    p = plan("meta-llama/Llama-3.1-70B-Instruct", draft="meta-llama/Llama-3.2-1B-Instruct",
             spec="draft-target", tp=4, pp=2, kv_budget="8GiB", engine="trtllm@v1")  # fmt: skip
    for index in (0, 1):
        draft = stage(p, index)["draft"]
        # 8 layers x 2 KV heads (8 / TP 4) x 64 x 2 x 2 B = 4,096 B/token (the last stage
        # held all 16, 8,192 B/token, and stage 0 none, before)
        assert (draft["num_layers"], draft["bytes_per_token"]) == (8, 4_096)
        assert stage(p, index)["target"]["bytes_per_token"] == 40 * 1_024  # 40 layers
    # 8 GiB // (40,960 + 4,096) = 190,650 -> 190,624 tokens: 5,957 blocks of 32 (5,461 before)
    assert p.engine.settings["kv_cache_config.max_tokens"] == 190_624
    assert window(stage(p, 0)["draft"], None)["primary_blocks"] == 5_957
    assert any("PP stage 0 holds 8 of the draft's layers" in n for n in p.engine.notes)


# ---------------------------------------------------------------- issue #18, cause 4


def test_eagle3_off_the_last_stage_keeps_a_placeholder_draft_pool() -> None:
    # the EAGLE3 layer is layer 80 of the 81 in the draft's mask: mapping.pp_layers puts it
    # on stage 1; on stage 0 get_pp_layers finds none and "provide[s] at least 1 layer"
    p = plan("meta-llama/Llama-3.3-70B-Instruct", spec="eagle3", tp=4, pp=2,
             kv_budget="8GiB", host_budget="64GiB", engine="trtllm@v1")  # fmt: skip
    host = 64 * GIB
    target0, draft0 = stage(p, 0)["target"], stage(p, 0)["draft"]
    # one layer of the head: 2 KV heads (8 / TP 4) x 128 x 2 x 2 B = 1,024 B/token
    assert (draft0["placeholder"], draft0["num_layers"], draft0["bytes_per_token"]) == (
        True, 1, 1_024)  # fmt: skip
    # max_tokens leaves room for it: 8 GiB // (40,960 + 1,024) = 204,600 -> 204,576, so
    # stage 0 holds 6,393 x 32 x 41,984 B = 8,588,918,784 B <= 8 GiB
    assert p.engine.settings["kv_cache_config.max_tokens"] == 204_576
    assert window(draft0, None)["primary_blocks"] == window(target0, None)["primary_blocks"]
    assert window(draft0, None)["primary_blocks"] == 6_393
    # _get_draft_cache_cost is None off the last stage: nothing is split, both managers
    # get the whole host_cache_size: 64 GiB // 1,024 // 32 = 2,097,152 and
    # 64 GiB // 40,960 // 32 = 52,428 secondary blocks, 128 GiB pinned per rank
    assert draft0["host_cache_size"] == target0["host_cache_size"] == host
    assert window(draft0, None)["secondary_blocks"] == 2_097_152
    assert window(target0, None)["secondary_blocks"] == 52_428
    assert any("PP stage 0's ranks pin host_cache_size twice" in w and
               "137438953472 B" in w for w in p.warnings)  # fmt: skip
    # the last stage splits it by price: the draft 64 GiB x 1,024 // 41,984
    draft1 = stage(p, 1)["draft"]
    assert (draft1["placeholder"], draft1["host_cache_size"]) == (False, 1_676_084_798)


# ---------------------------------------------------------------- issue #18, cause 5


def test_a_draft_model_holds_the_extra_kv_tokens_too() -> None:
    # get_num_extra_kv_tokens (_torch/speculative/utils.py): max_draft_len - 1 for every
    # use_one_engine() mode, and DraftTargetDecodingConfig is one-model
    # (DRAFT_TARGET_ONE_MODEL, llm_args.py @ 00043967), an external drafter
    p = plan("meta-llama/Llama-3.1-8B-Instruct", draft="meta-llama/Llama-3.2-1B-Instruct",
             spec="draft-target", kv_budget="8GiB", max_seq_len=32_765,
             engine="trtllm@v1")  # fmt: skip
    # a request of 32,765 tokens + 3 draft + 2 extra = 32,770 tokens: 1,025 blocks of 32
    # (32,768 = 1,024 without the extra)
    assert p.engine.detail["blocks_per_sequence"] == 1_025
    # and the engine's max_seq_len (create_py_executor): 32,765 + 1 + 3 + 2 + 3 = 32,774
    assert p.engine.detail["engine_max_seq_len"] == 32_774
    for manager in p.engine.detail["managers"]:
        assert window(manager, None)["attention_window"] == 32_774


# ---------------------------------------------------------------- trtllm@1.3.0rc18


def test_the_release_before_pr_14373_pins_the_host_budget_per_manager() -> None:
    args: dict[str, Any] = {"spec": "eagle3", "kv_budget": "40GiB", "host_budget": "64GiB"}
    main = plan("meta-llama/Llama-3.1-8B-Instruct", engine="trtllm@v1", **args)
    old = plan("meta-llama/Llama-3.1-8B-Instruct", engine="trtllm@1.3.0rc18", **args)
    host = 64 * GIB
    assert (main.engine.version, old.engine.version) == ("v1", "1.3.0rc18")
    # main: build_managers splits host_cache_size by price (PR #14373): the EAGLE3 head
    # (8 KV heads x 128 x 2 x 2 B = 4,096 B/token) gets 64 GiB x 4,096 // 135,168
    assert main.engine.settings["kv_cache_config.host_cache_size"] == host
    assert [m["host_cache_size"] for m in main.engine.detail["managers"]] == [
        host - 2_082_408_385, 2_082_408_385]  # fmt: skip
    # 1.3.0rc18: each V1 manager is built with the whole value ("both managers used to
    # receive the full host_cache_size", test_host_budget_not_doubled): 64 GiB would pin
    # 128 GiB; the plan emits 32 GiB, which target and draft pin 64 GiB with
    assert old.engine.settings["kv_cache_config.host_cache_size"] == host // 2
    target, draft = old.engine.detail["managers"]
    assert target["host_cache_size"] == draft["host_cache_size"] == host // 2
    assert old.engine.detail["host_pinned_bytes"] == [host]
    # 32 GiB // 131,072 // 32 = 8,192 host blocks for the target (64 GiB - 2,082,408,385 B
    # give 15,887 on main); the draft's 32 GiB // 4,096 // 32 = 262,144
    assert window(target, None)["secondary_blocks"] == 8_192
    assert window(draft, None)["secondary_blocks"] == 262_144
    assert window(main.engine.detail["managers"][0], None)["secondary_blocks"] == 15_887
    assert old.capacity.host_tokens == 8_192 * 32
    assert any("would pin 137438953472 B of host memory per rank" in w for w in old.warnings)
    # the GPU side is the same in both
    assert old.engine.settings["kv_cache_config.max_tokens"] == main.engine.settings[
        "kv_cache_config.max_tokens"]  # fmt: skip


def test_the_release_before_pr_14373_needs_no_halving_without_a_draft() -> None:
    args: dict[str, Any] = {"kv_budget": "40GiB", "host_budget": "64GiB"}
    old = plan("meta-llama/Llama-3.1-8B-Instruct", engine="trtllm@1.3.0rc18", **args)
    assert old.engine.settings["kv_cache_config.host_cache_size"] == 64 * GIB
    assert not any("PR #14373" in w for w in old.warnings)


# ---------------------------------------------------------------- trtllm@v2 (KVCacheManagerV2)
# Expected values: KVCacheManagerV2 (_torch/pyexecutor/kv_cache/kv_cache_manager_v2.py @
# 38198e34) and the V2 runtime's storage sizing (runtime/kv_cache_manager_v2/
# _storage_manager.py, _storage/_core.py; SOURCES.md), run by the fidelity harness on the
# plan's emitted settings (harness_device_quota, impl.harness_pools()).


def test_v2_quota_is_max_gpu_total_bytes_and_slots_hold_every_layer() -> None:
    p = plan(
        "meta-llama/Llama-3.1-8B-Instruct", engine="trtllm@v2", kv_budget="40GiB",
        host_budget="64GiB",
    )  # fmt: skip
    s = p.engine.settings
    assert s["kv_cache_config.use_kv_cache_manager_v2"] is True
    assert s["kv_cache_config.max_gpu_total_bytes"] == 40 * GIB
    assert "kv_cache_config.max_tokens" not in s  # only a cap in V2; none emitted
    assert s["kv_cache_config.host_cache_size"] == 64 * GIB
    # one slot = one 32-token block of all 32 layers: 32 x 4,096 B x 32 = 4,194,304 B;
    # cache_tier_granularity(GPU, 40 GiB) = 2 MiB << min(4, int(log2(40))) = 32 MiB
    assert p.engine.detail["granularity"] == 32 << 20
    gpu, host = p.engine.pools
    assert (gpu.tier, gpu.blocks, gpu.bytes) == ("gpu", 10_240, 42_949_672_960)  # 40 GiB / 4 MiB
    assert (host.tier, host.blocks, host.bytes) == ("host", 16_384, 68_719_476_736)
    assert p.capacity.tokens == 327_680 and p.capacity.host_tokens == 524_288
    assert p.capacity.max_concurrency == 10  # 10,240 // (32,768 / 32)


def test_v2_host_cache_size_zero_builds_no_host_tier() -> None:
    p = plan("meta-llama/Llama-3.1-8B-Instruct", engine="trtllm@v2", kv_budget="8GiB", tp=8)
    assert p.engine.settings["kv_cache_config.host_cache_size"] == 0
    (gpu,) = p.engine.pools  # harness: only GPU_MEM with host_cache_size 0
    # 32 layers x 1 KV head x 128 x 2 x 2 B x 32 tokens = 524,288 B slots in 8 GiB
    assert (gpu.blocks, gpu.bytes) == (16_384, 8_589_934_592)


def test_v2_pp_stages_take_the_min_of_resumable_tokens() -> None:
    p = plan(
        "deepseek-ai/DeepSeek-V3", engine="trtllm@v2", kv_budget="8GiB", tp=4, pp=2,
        kv_dtype="fp8",
    )  # fmt: skip
    # 61 layers: stage 0 holds 31 (17,856 B/token at fp8), stage 1 30 (17,280). Stage 0's
    # int(8 GiB x 0.95) / 17,856 tokens is the MIN; stage 1's quota becomes
    # ceil(int(tokens x 17,280) / 0.95) = 8,312,839,927 (harness_device_quota, both stages)
    stages = p.engine.detail["stages"]
    assert [x["device_quota"] for x in stages] == [8_589_934_592, 8_312_839_927]
    assert [x["bytes_per_token"] for x in stages] == [17_856, 17_280]
    (gpu,) = p.engine.pools
    # FlashMLA: 64-token blocks; granularity 8 MiB (log2(7.74) -> 2); the pool is the
    # slots' bytes rounded up to it: 7,516 x 1,105,920 B -> 8,313,110,528 B
    assert (gpu.tokens_per_block, gpu.blocks, gpu.bytes) == (64, 7_516, 8_313_110_528)
    assert [x["pools"][0]["slots"] for x in stages] == [7_516, 7_516]
    assert v2.slots(8_312_839_927, 8 << 20, 1_105_920) == (7_516, 8_313_110_528)


def test_v2_windows_of_one_slot_size_share_one_pool_group() -> None:
    p = plan("openai/gpt-oss-20b", engine="trtllm@v2", kv_budget="8GiB")
    assert p.engine.settings["kv_cache_config.max_attention_window"] == [128, 33_792]
    # 24 layers of 8 KV heads x 64 x 2 x 2 B = 2,048 B/token: 12 sliding (128) and 12
    # full; each life cycle's slot is 12 x 2,048 x 32 = 786,432 B, equal, so one pool
    # group (harness: gpt-oss-20b none bf16 tp1 host0 kv8GiB V2, slot_bytes 786432)
    (gpu,) = p.engine.pools
    assert (gpu.blocks, gpu.bytes) == (10_922, 8_589_934_592)  # 8 GiB // 786,432
    # a sequence: 1,024 full-length blocks + ceil((128 - 1) / 32) + 1 = 5 sliding ones
    assert p.engine.detail["blocks_per_sequence"] == 1_029
    assert p.capacity.max_concurrency == 10


def test_v2_refuses_what_it_does_not_model() -> None:
    with pytest.raises(InvalidArgumentError, match="with MTP; --spec ngram"):
        plan("Qwen/Qwen3-Next-80B-A3B-Instruct", engine="trtllm@v2", kv_budget="40GiB",
             spec="ngram")  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="mamba_ssm_cache_dtype"):
        plan("nvidia/Nemotron-H-8B-Base-8K", engine="trtllm@v2", kv_budget="40GiB",
             max_seq_len=8192, state_dtype="fp32")  # fmt: skip


# ---------------------------------------------------------------- trtllm@v2 hybrids
# MambaHybridCacheManagerV2 (_torch/pyexecutor/kv_cache/mamba_cache_manager.py @ 38198e34):
# the SSM and conv states are one more life cycle of the V2 pools; the harness's
# "Qwen3-Next-80B-A3B-Instruct none bf16 ... V2" cases, 0 differ.


def test_v2_hybrid_states_are_a_pool_group_floored_at_the_live_sequences() -> None:
    p = plan("Qwen/Qwen3-Next-80B-A3B-Instruct", engine="trtllm@v2", kv_budget="40GiB")
    (m,) = p.engine.detail["stages"][0]["managers"]
    assert m["manager_class"] == "MambaHybridCacheManagerV2"
    states, attention = m["pools"]
    # 36 Gated-DeltaNet layers: SSM 32 x 128 x 128 x 2 B, conv (4,096 + 2 x 16 x 128) x 3 x
    # 2 B each; coalesced by size, largest first
    assert states["slot_bytes"] == [36 * 32 * 128 * 128 * 2, 36 * 8_192 * 3 * 2]
    # the SSM floor: 256 resident + 1 CUDA-graph dummy state-only requests, / 0.95:
    # ceil(257 / 0.95) = 271 slots, which the typical batch's ratio falls under
    assert m["ssm_slots"] == states["slots"] == 271
    # in 32 MiB grains: 305 + 15 for the states, the other 960 for 12 attention layers'
    # 12 x 2 x 256 x 2 x 2 x 32 = 786,432 B slots
    assert states["bytes"] == 320 * (32 << 20)
    assert (attention["slot_bytes"], attention["slots"]) == ([786_432], 40_960)
    assert [x.kind for x in p.engine.pools] == ["state", "kv"]


def test_v2_hybrid_refuses_a_quota_under_its_live_states() -> None:
    # _build_cache_config raises "The V2 Mamba GPU cache quota is too small for live
    # recurrent states and attention pages": 257 x 39,518,208 B + one 786,432 B page
    with pytest.raises(InfeasibleBudgetError, match="need at least 10156965888 bytes"):
        plan("Qwen/Qwen3-Next-80B-A3B-Instruct", engine="trtllm@v2", kv_budget="8GiB")


def test_default_trtllm_plans_v2_for_hybrids() -> None:
    p = plan("nvidia/Nemotron-H-8B-Base-8K", kv_budget="40GiB", max_seq_len=8192)
    assert p.engine.settings["kv_cache_config.use_kv_cache_manager_v2"] is True
    assert p.engine.detail["manager_class"] == "MambaHybridCacheManagerV2"
    assert "its V1 hybrid manager is not transcribed" in p.engine.notes[0]


# ---------------------------------------------------------------- trtllm@v2 with a draft
# KvCacheCreator.build_managers -> _split_kv_cache_budget_for_draft ->
# _compute_draft_budget_shares (_util.py @ 38198e34); the costs are KVCacheManagerV2's
# get_cache_size_per_token / get_cache_bytes_per_request (kv_cache_manager_v2.py @
# 38198e34). Each case is the harness's of the same name (0 differ).


def test_v2_one_model_draft_gets_its_share_of_the_gpu_budget() -> None:
    # "Llama-3.1-8B-Instruct+EAGLE3-LLaMA3.1-Instruct-8B eagle3 bf16 tp1 host0 kv8GiB V2"
    p = plan("meta-llama/Llama-3.1-8B-Instruct", engine="trtllm@v2", kv_budget="8GiB",
             spec="eagle3")  # fmt: skip
    target, draft = stage(p, 0)["target"], stage(p, 0)["draft"]
    # full attention: no fixed cost, and the target reports no bytes per request, so the
    # split goes by bytes per token: 8 GiB x 4,096 // (131,072 + 4,096) to the head
    assert (target["cost"]["intercept"], target["cost"]["bytes_per_request"]) == (0, None)
    assert draft["max_gpu_total_bytes"] == 8 * GIB * 4_096 // 135_168 == 260_301_048
    assert target["max_gpu_total_bytes"] == 8 * GIB - 260_301_048
    # slots: the target's 8,329,633,544 B rounded up to 8 MiB (log2(7.76 GiB) -> 2) hold
    # 1,986 of 32 x 131,072 B; the draft's 260,301,048 B rounded up to 2 MiB, 2,000 of
    # 32 x 4,096 B
    assert [(x["slots"], x["bytes"]) for x in target["pools"]] == [(1_986, 8_329_887_744)]
    assert [(x["slots"], x["bytes"]) for x in draft["pools"]] == [(2_000, 262_144_000)]
    assert "kv_cache_config.max_tokens" not in p.engine.settings
    assert p.engine.settings["speculative_config.decoding_type"] == "Eagle3"


def test_v2_windows_are_fixed_costs_before_the_draft_split() -> None:
    # "gpt-oss-120b+gpt-oss-120b-Eagle3-long-context eagle3 bf16 tp1 host0 kv8GiB V2"
    p = plan("openai/gpt-oss-120b", engine="trtllm@v2", kv_budget="8GiB", spec="eagle3")
    target, draft = stage(p, 0)["target"], stage(p, 0)["draft"]
    # 18 sliding layers x 2,048 B: the 128 window + 1 (block reuse: EAGLE3's prompt
    # lookahead, _extend_swa_windows_for_reuse) holds ceil((129 + 6 - 2) / 32) + 1 = 6
    # blocks per request (headroom 6 = 2 extra + 1 + 3 draft tokens); 256 requests and
    # 8,192 context tokens: 256 x 192 x 36,864 + 8,192 x 36,864 = 2,113,929,216 B fixed
    expected = {"slope": 36_864, "intercept": 2_113_929_216, "bytes_per_request": 1_209_139_200}
    assert target["cost"] == expected
    # per request (the full length 32,777 + 6 in blocks: 32,800 tokens): the target's full
    # layers 36,864 x 32,800, the head's 2,048 x 32,800
    assert draft["cost"]["bytes_per_request"] == 67_174_400
    rest = 8 * GIB - 2_113_929_216
    assert draft["max_gpu_total_bytes"] == rest * 67_174_400 // (1_209_139_200 + 67_174_400)
    assert draft["max_gpu_total_bytes"] == 340_842_388  # V1's price split: 452,102,242
    # the 129-token and full-length life cycles have equal slots (18 x 2 x 1,024 x 32 B):
    # one pool group of 6,997 slots
    ((windows, slots),) = [(x["windows"], x["slots"]) for x in target["pools"]]
    assert (windows, slots) == ([129, None], 6_997)


def test_v2_placeholder_draft_is_bounded_by_tokens_and_pins_the_host_twice() -> None:
    # "Llama-3.3-70B-Instruct+EAGLE3-LLaMA3.3-Instruct-70B eagle3 bf16 tp4pp2 host64GiB
    # kv8GiB V2"
    p = plan("meta-llama/Llama-3.3-70B-Instruct", engine="trtllm@v2", kv_budget="8GiB",
             spec="eagle3", tp=4, pp=2, host_budget="64GiB")  # fmt: skip
    host = 64 * GIB
    t0, d0, t1, d1 = (stage(p, s)[r] for s in (0, 1) for r in ("target", "draft"))
    # stage 0: _get_draft_cache_cost is None off the last stage, so nothing is split;
    # _bound_unsplit_v2_draft_by_tokens gives the placeholder max_tokens 8 GiB // 40,960
    assert (d0["placeholder"], d0["max_gpu_total_bytes"], d0["max_tokens"]) == (
        True, 8 * GIB, 209_715)  # fmt: skip
    assert d0["host_cache_size"] == t0["host_cache_size"] == host
    # stage 1 splits both budgets by bytes per token: the head 1,024 of 41,984
    assert d1["max_gpu_total_bytes"] == 8 * GIB * 1_024 // 41_984 == 209_510_599
    assert d1["host_cache_size"] == host * 1_024 // 41_984 == 1_676_084_798
    # the ranks' MIN of resumable tokens: both drafts and both targets end equal
    assert d0["device_quota"] == d1["device_quota"] == 209_510_599
    assert t0["device_quota"] == t1["device_quota"] == 8 * GIB - 209_510_599
    assert any("PP stage 0's ranks pin host_cache_size twice" in w and
               f"{2 * host} B" in w for w in p.warnings)  # fmt: skip


def test_v2_mtp_under_attention_dp_joins_the_target() -> None:
    p = plan("deepseek-ai/DeepSeek-V3", engine="trtllm@v2", spec="mtp", tp=8, dp=8,
             dp_attention=True, ep=8, kv_budget="40GiB")  # fmt: skip
    (target,) = stage(p, 0).values()
    # 61 + 1 MLA layers x 1,152 B (as V1's target manager under attention DP)
    assert (target["num_layers"], target["bytes_per_token"]) == (62, 71_424)
    # 40 GiB in 32 MiB grains: 1,280 x 32 MiB // (64 x 71,424 B) = 9,395 slots
    assert [x["slots"] for x in target["pools"]] == [9_395]


def test_v2_several_pool_groups_share_the_quota_by_one_fallback_request() -> None:
    # "gemma-3-27b-it none bf16 tp1 host0 kv8GiB V2": 52 sliding (1,024) and 10 full
    # layers of 8,192 B/token; slots 52 x 8,192 x 32 and 10 x 8,192 x 32 differ: two pool
    # groups. No pool_ratio / avg_seq_len: the ratio is one request of 2,049 tokens with
    # 2,048 in history (storageManager.cpp): the window holds 65 - (2,049 - 1,024) // 32
    # = 33 blocks (27 grains of 16 MiB), the full layers 65 (11 grains): 0.71 / 0.29
    p = plan("google/gemma-3-27b-it", engine="trtllm@v2", kv_budget="8GiB")
    sliding, full = p.engine.detail["stages"][0]["managers"][0]["pools"]
    assert (sliding["windows"], sliding["slot_bytes"]) == ([1_024], [13_631_488])
    assert (full["windows"], full["slot_bytes"]) == ([None], [2_621_440])
    # 512 grains: the full group first (smaller ratio), round(512 x 11 / 38) = 148 grains
    # = 947 slots; the window the other 364 grains = 448 slots
    assert (full["slots"], full["bytes"]) == (947, 148 * (16 << 20))
    assert (sliding["slots"], sliding["bytes"]) == (448, 364 * (16 << 20))
    # a sequence of 32,768 tokens needs 1,024 full-length slots: none fits
    assert p.capacity.max_concurrency == 0
    assert any("2 pool groups" in n for n in p.engine.notes)


def test_v2_host_tier_regroups_by_slot_bytes() -> None:
    # "gemma-3-27b-it none bf16 tp1 host64GiB kv8GiB V2": the host tier keeps one pool per
    # slot size, each with its GPU group's ratio, in 4 KiB grains
    p = plan("google/gemma-3-27b-it", engine="trtllm@v2", kv_budget="8GiB", host_budget="64GiB")
    pools = p.engine.detail["stages"][0]["managers"][0]["pools"]
    assert [(x["tier"], x["slots"]) for x in pools] == [
        ("gpu", 448), ("gpu", 947), ("host", 3_582), ("host", 7_588)]  # fmt: skip


def test_v2_gemma2_under_pp_has_two_pool_groups_per_stage() -> None:
    # "gemma-2-9b-it none bf16 tp4pp2 host0 kv8GiB V2" (max_seq_len 8,192): stage 0 holds
    # 11 sliding and 10 full layers, stage 1 10 and 11: their slots differ
    p = plan("google/gemma-2-9b-it", engine="trtllm@v2", kv_budget="8GiB", max_seq_len=8192,
             tp=4, pp=2)  # fmt: skip
    for s, expected in ((0, [([4_096], 5_957), ([None], 6_553)]),
                        (1, [([None], 5_957), ([4_096], 6_553)])):  # fmt: skip
        pools = p.engine.detail["stages"][s]["managers"][0]["pools"]
        assert [(x["windows"], x["slots"]) for x in pools] == expected


def test_v2_budget_under_the_fixed_costs_is_refused_as_tensorrt_llm_does() -> None:
    # _split_kv_cache_budget_for_draft raises "KV cache GPU budget ... is insufficient
    # after the combined fixed cost": gpt-oss-120b's 2,113,929,216 B of windows > 1 GiB
    with pytest.raises(InfeasibleBudgetError, match="insufficient after the combined fixed"):
        plan("openai/gpt-oss-120b", engine="trtllm@v2", kv_budget="1GiB", spec="eagle3")


# ---------------------------------------------------------------- which manager "auto" picks
# llm_utils._resolve_kv_cache_manager_v2_auto (SOURCES.md): the model class's default; V1
# where it has none. V2 figures as in the trtllm@v2 tests above (the harness's V2 cases).


def test_default_trtllm_plans_v2_for_llama_and_says_what_v1_would_hold() -> None:
    p = plan("meta-llama/Llama-3.1-8B-Instruct", kv_budget="8GiB")
    s = p.engine.settings
    assert p.engine.version == trt.VERSION and p.engine.detail["kv_cache_manager"] == "V2"
    assert s["kv_cache_config.use_kv_cache_manager_v2"] is True
    assert s["kv_cache_config.host_cache_size"] == 0  # no host tier, pinned nothing
    (gpu,) = p.engine.pools
    assert gpu.blocks == 2_048  # 8 GiB / 4 MiB slots (Llama-3.1-8B-Instruct ... kv8GiB V2)
    assert p.engine.notes[0] == (
        "# manager: V2, TensorRT-LLM's auto pick (LlamaForCausalLM defaults to V2 (PR #19004)); "
        "V1 on the same budget would hold 65536 tokens (2 sequences)"
    )  # V1: 8 GiB // 131,072 B/token = 65,536 = 2 x 32,768
    (warning,) = [w for w in p.engine.warnings if "host_cache_size" in w]
    assert "up to 8589934592 B per rank (the device quota), 8589934592 B per node" in warning
    # the harness checks that figure against KVCacheManagerV2 with host_cache_size unset
    # (host0 V2 cases, auto_host_quota)
    assert p.engine.detail["auto_host_quotas"] == [8 * GIB]


def test_default_trtllm_plans_v1_for_qwen3_and_says_what_v2_would_hold() -> None:
    p = plan("Qwen/Qwen3-8B", kv_budget="8GiB")
    assert p.engine.detail["kv_cache_manager"] == "V1"
    assert p.engine.settings["kv_cache_config.use_kv_cache_manager_v2"] is False
    # 36 layers x 8 heads x 128 x 2 x 2 B = 147,456 B/token: V1 58,240 tokens; V2's
    # 4,718,592 B slots: 8 GiB // it = 1,820 slots = 58,240 tokens (Qwen3-8B ... kv8GiB V2)
    assert p.engine.settings["kv_cache_config.max_tokens"] == 58_240
    assert p.engine.notes[0] == (
        "# manager: V1, TensorRT-LLM's auto pick (Qwen3ForCausalLM sets no V2 default); V2 on "
        "the same max_gpu_total_bytes would hold 58240 tokens (1 sequence)"
    )


def test_v1_stays_available() -> None:
    v1_plan = plan("meta-llama/Llama-3.1-8B-Instruct", kv_budget="8GiB", engine="trtllm@v1")
    assert v1_plan.engine.detail["kv_cache_manager"] == "V1"
    assert v1_plan.engine.settings["kv_cache_config.max_tokens"] == 65_536


def test_default_trtllm_plans_v2_with_a_one_model_draft() -> None:
    # _resolve_kv_cache_manager_v2_auto: Llama defaults to V2 (PR #19004); EAGLE3 one-model
    # keeps it (only two-model speculation falls back to V1)
    p = plan("meta-llama/Llama-3.1-8B-Instruct", kv_budget="8GiB", spec="eagle3")
    assert p.engine.detail["kv_cache_manager"] == "V2"
    assert p.engine.settings["kv_cache_config.use_kv_cache_manager_v2"] is True
    assert [x.blocks for x in p.engine.pools] == [1_986, 2_000]  # as trtllm@v2 above
    # V1: 8 GiB // 135,168 = 63,550 -> 63,520 tokens, one sequence of 32,768 + 5
    assert p.engine.notes[0].endswith("V1 on the same budget would hold 63520 tokens (1 sequence)")


def test_default_trtllm_plans_v2_for_gpt_oss_and_warns_what_an_unset_host_tier_pins() -> None:
    p = plan("openai/gpt-oss-20b", kv_budget="8GiB", host_memory="16GiB", gpus_per_node=8)
    assert p.engine.detail["kv_cache_manager"] == "V2"
    assert p.engine.pools[0].blocks == 10_922  # as trtllm@v2 above
    assert p.engine.notes[0].startswith(
        "# manager: V2, TensorRT-LLM's auto pick (GptOssForCausalLM defaults to V2 (PR #16942))"
    )
    # _compute_auto_host_tier_quota: min(8 GiB quota, 0.5 x MemAvailable / local ranks,
    # ...): one TP1 rank per instance (local_world_size 1), so MemAvailable (at most the
    # node's 16 GiB) / 1 x 0.5 = 8 GiB: the device quota binds; 8 such ranks on the node
    # would pin 64 GiB, 4x its memory
    (warning,) = [w for w in p.engine.warnings if "host_cache_size" in w]
    assert warning.endswith(
        "up to 8589934592 B per rank (the device quota), 68719476736 B per node of 8 such ranks"
        " (8.00 GiB per rank, 64.00 GiB per node)"
    )
    # at TP8 the 8 local ranks share it: 16 GiB / 8 x 0.5 = 1 GiB per rank
    tp8 = plan("openai/gpt-oss-20b", kv_budget="8GiB", host_memory="16GiB", tp=8)
    assert tp8.engine.detail["auto_host_quotas"] == [GIB]
    (warning,) = [w for w in tp8.engine.warnings if "host_cache_size" in w]
    assert "up to 1073741824 B per rank (half the node's memory per local rank)" in warning
