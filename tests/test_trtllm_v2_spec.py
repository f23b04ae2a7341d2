"""TensorRT-LLM's V2 manager (``trtllm@v2``) with what issue #18 left: hybrids with MTP,
the disk tier, ngram.

Every expected value is what TensorRT-LLM's sizing code gives for the plan's emitted
settings, as ``benchmarks/fidelity/trtllm/trtllm_fidelity.py`` runs it (the code
transcribed in ``shared/trtllm-src`` at the commits of its SOURCES.md:
``_torch/pyexecutor/_util.py``, ``kv_cache/kv_cache_manager_v2.py`` and
``kv_cache/mamba_cache_manager.py`` @ 38198e34). Each test names its harness case
(0 differ); the arithmetic is beside each value.
"""

from __future__ import annotations

from typing import Any

import pytest

import kvbudget
from kvbudget import InfeasibleBudgetError
from kvbudget.plan_types import Plan

GIB = 1024**3


def plan(target: str, **kwargs: Any) -> Plan:
    args: dict[str, Any] = {"spec": "none", "engine": "trtllm@v2", "max_seq_len": 32768}
    args.update(kwargs)
    return kvbudget.plan(target, **args)


def managers(p: Plan, index: int) -> dict[str, dict[str, Any]]:
    """The managers of PP stage ``index`` in the plan's detail, by role."""
    (entry,) = [s for s in p.engine.detail["stages"] if s["pp_stage"] == index]
    return {m["role"]: m for m in entry["managers"]}


# ---------------------------------------------------------------- hybrids with MTP
# MambaHybridCacheManagerV2.__init__ -> _setup_mtp_intermediate_states (mamba_cache_manager.py;
# shapes of stored id 57351526408): [local recurrent layers, max_batch_size,
# tokens_per_gen_step] + the SSM and conv state shapes, torch tensors outside the V2 pools.
# Qwen3.5 / Qwen3-Next are Gated-DeltaNet hybrids: the replay state update is off unless
# TRTLLM_GDN_REPLAY=1 (_util.py is_gdn_replay_enabled), so the SSM rows are kept.

# Qwen3.5-27B at TP8: 48 Gated-DeltaNet layers, per layer SSM 48 / 8 = 6 value heads x 128 x
# 128 x 2 B = 196,608 B, conv (6 x 128 + 2 x 16 / 8 x 128) x (4 - 1) x 2 B = 7,680 B
QWEN35_TP8_STATE = 48 * (196_608 + 7_680)  # 9,805,824 B per state slot


def test_v2_hybrid_mtp_intermediate_states_come_out_of_the_kv_budget() -> None:
    # harness "Qwen3.5-27B mtp bf16 tp8 host0 kv40GiB V2"
    p = plan("Qwen/Qwen3.5-27B", spec="mtp", kv_budget="40GiB", tp=8)
    m = managers(p, 0)
    # 256 sequences x (1 + 3 draft tokens) steps x 48 layers' SSM + conv
    intermediate = 256 * 4 * QWEN35_TP8_STATE
    assert m["target"]["intermediate_state_bytes"] == intermediate == 10_041_163_776
    assert m["draft"]["intermediate_state_bytes"] == 0  # the MTP layer is attention only
    # with max_gpu_total_bytes set the buffers come on top of it (configure_kv_cache_capacity
    # takes min(profiled, max_gpu_total_bytes)), so the plan emits the budget less them
    emitted = p.engine.settings["kv_cache_config.max_gpu_total_bytes"]
    assert emitted == 40 * GIB - intermediate == 32_908_509_184
    assert any("MTP intermediate state buffers (10041163776 B" in n for n in p.engine.notes)


def test_v2_hybrid_mtp_draft_split_prices_the_targets_live_states() -> None:
    # _estimate_mamba_hybrid_cache_cost: the target's fixed cost is its (256 x pp 1 + 1
    # dummy) live state slots; the draft (one attention layer, 1,024 B/token at TP8) has
    # none; the target reports no bytes/request, so the rest goes by bytes per token
    p = plan("Qwen/Qwen3.5-27B", spec="mtp", kv_budget="40GiB", tp=8)
    m = managers(p, 0)
    rest = 32_908_509_184 - 257 * QWEN35_TP8_STATE
    assert m["draft"]["max_gpu_total_bytes"] == rest * 1_024 // (16_384 + 1_024) == 1_787_553_671
    assert m["draft"]["manager_class"] == "MambaHybridCacheManagerV2"
    assert m["draft"]["ssm_slots"] == 0
    # the ranks' sync by the hybrid's whole-token search: 1,787,552,607 B (harness)
    assert m["draft"]["device_quota"] == 1_787_552_607
    assert m["target"]["ssm_slots"] == 273  # ceil(257 / 0.95) = 271, the ratio gives 273


def test_v2_hybrid_mtp_under_pp_reserves_each_stages_layers() -> None:
    # harness "Qwen3-Next-80B-A3B-Instruct mtp bf16 tp4pp2 host64GiB kv40GiB V2": 18 of the
    # 36 Gated-DeltaNet layers per stage; per layer at TP4 SSM 32 / 4 x 128 x 128 x 2 B =
    # 262,144 B, conv (8 x 128 + 2 x 16 / 4 x 128) x 3 x 2 B = 12,288 B
    p = plan("Qwen/Qwen3-Next-80B-A3B-Instruct", spec="mtp", kv_budget="40GiB",
             host_budget="64GiB", tp=4, pp=2)  # fmt: skip
    intermediate = 256 * 4 * 18 * (262_144 + 12_288)
    for s in (0, 1):
        assert managers(p, s)["target"]["intermediate_state_bytes"] == intermediate
    assert intermediate == 5_058_330_624
    assert p.engine.settings["kv_cache_config.max_gpu_total_bytes"] == 37_891_342_336
    assert 40 * GIB - intermediate == 37_891_342_336
    # stage 0 holds no MTP layer: a placeholder draft bounded to the target's tokens
    assert managers(p, 0)["draft"]["placeholder"] is True
    assert managers(p, 0)["draft"]["max_tokens"] == 11_509_517


def test_v2_hybrid_mtp_buffers_over_the_budget_are_refused() -> None:
    # Qwen3.5-27B at TP1: 48 x (48 x 128 x 128 x 2 + (48 x 128 + 2 x 16 x 128) x 3 x 2) B
    # per state slot x 256 x 4 = 80,329,310,208 B, over a 40 GiB budget (the harness's
    # TensorRT-LLM records the same harness_intermediate_state_bytes)
    with pytest.raises(InfeasibleBudgetError, match="take 80329310208 B per rank"):
        plan("Qwen/Qwen3.5-27B", spec="mtp", kv_budget="40GiB")
    assert 256 * 4 * 48 * (48 * 128 * 128 * 2 + (48 * 128 + 2 * 16 * 128) * 3 * 2) == (
        80_329_310_208
    )


def test_default_trtllm_plans_v2_for_qwen35_by_its_outer_architectures() -> None:
    # Qwen3.5's architectures sit outside its text_config; "auto" reads the checkpoint's
    p = kvbudget.plan("Qwen/Qwen3.5-27B", spec="mtp", engine="trtllm", kv_budget="40GiB",
                      max_seq_len=32768, tp=8)  # fmt: skip
    assert p.engine.settings["kv_cache_config.use_kv_cache_manager_v2"] is True
    assert "Qwen3_5ForConditionalGeneration defaults to V2" in p.engine.notes[0]


# ---------------------------------------------------------------- the disk tier
# KvCacheCreator.build_managers splits each of _OFFLOAD_TIER_BUDGET_ATTRS ("host_cache_size",
# "disk_cache_size") by bytes per token (_split_kv_cache_budget_for_draft drops the
# intercepts); KVCacheManagerV2.__init__ appends DiskCacheTierConfig(disk_cache_size,
# disk_cache_path); the runtime sizes the disk level in 2 MiB grains (_storage/_core.py).


def test_v2_disk_budget_is_split_by_bytes_per_token_and_sized_in_2_mib_grains() -> None:
    # harness "Llama-3.1-8B-Instruct+EAGLE3-LLaMA3.1-Instruct-8B eagle3 bf16 tp1 host64GiB
    # disk256GiB kv8GiB V2"
    p = plan("meta-llama/Llama-3.1-8B-Instruct", spec="eagle3", kv_budget="8GiB",
             host_budget="64GiB", disk_budget="256GiB")  # fmt: skip
    m = managers(p, 0)
    disk = 256 * GIB
    # target 32 layers x 4,096 B/token, EAGLE3 head 1 layer x 4,096 B/token
    draft = disk * 4_096 // (131_072 + 4_096)
    assert m["draft"]["disk_cache_size"] == draft == 8_329_633_543
    assert m["target"]["disk_cache_size"] == disk - draft == 266_548_273_401
    assert p.engine.settings["kv_cache_config.disk_cache_size"] == disk
    assert p.engine.settings["kv_cache_config.disk_cache_path"] == "/var/tmp/trtllm-kv-cache"
    grain = 2 << 20
    (t_disk,) = [x for x in m["target"]["pools"] if x["tier"] == "disk"]
    (d_disk,) = [x for x in m["draft"]["pools"] if x["tier"] == "disk"]
    # whole slots in the quota rounded up to the grain: target 4 MiB slots, draft 128 KiB
    assert t_disk["slots"] == -(-(disk - draft) // grain) * grain // (131_072 * 32) == 63_550
    assert t_disk["bytes"] == 63_550 * 131_072 * 32
    assert d_disk["slots"] == -(-draft // grain) * grain // (4_096 * 32) == 63_552
    assert p.capacity.disk_blocks == 63_550
    assert [x.tier for x in p.engine.pools if x.role == "target"] == ["gpu", "host", "disk"]
    # the directory must exist at start-up (KvCacheConfig.validate_disk_cache_config)
    assert any("disk_cache_path (/var/tmp/trtllm-kv-cache)" in w for w in p.engine.warnings)


def test_v2_without_a_disk_budget_emits_no_disk_tier() -> None:
    p = plan("meta-llama/Llama-3.1-8B-Instruct", kv_budget="8GiB")
    assert not [k for k in p.engine.settings if "disk" in k]
    assert managers(p, 0)["target"]["disk_cache_size"] == 0


def test_v1_has_no_disk_tier_and_says_the_budget_holds_nothing() -> None:
    # resource_manager.py's KVCacheManager reads no disk_cache_size: TensorRT-LLM ignores it
    for engine in ("trtllm@v1", "trtllm"):  # Qwen3-8B: auto keeps V1 (no V2 default)
        p = kvbudget.plan("Qwen/Qwen3-8B", engine=engine, kv_budget="8GiB",
                          disk_budget="64GiB", max_seq_len=32768)  # fmt: skip
        assert p.engine.detail["kv_cache_manager"] == "V1"
        assert not [k for k in p.engine.settings if "disk" in k]
        (w,) = [w for w in p.engine.warnings if "no disk tier" in w]
        assert "the 64.00 GiB per rank of --disk-budget hold nothing" in w
        # the engine's own warning names the flag: the planner's generic one is not repeated
        assert not [w for w in p.warnings if "--disk-budget 64.00 GiB changes nothing" in w]


# ---------------------------------------------------------------- ngram
# NGramDecodingConfig (llmapi/llm_args.py, read at stored id 55143598664; the harness stands
# it in): SpeculativeDecodingMode.NGRAM is no one-engine mode (speculative/interface.py), so
# should_use_separate_draft_kv_cache is false (no draft manager) and get_num_extra_kv_tokens
# is 0 (speculative/utils.py); _resolve_kv_cache_manager_v2_auto reads the model default only.


def test_default_trtllm_plans_ngram_on_v2_without_a_draft_manager() -> None:
    # harness "Llama-3.1-8B-Instruct ngram bf16 tp1 host0 kv8GiB V2"
    p = kvbudget.plan("meta-llama/Llama-3.1-8B-Instruct", spec="ngram", engine="trtllm",
                      kv_budget="8GiB", max_seq_len=32768)  # fmt: skip
    assert p.engine.settings["kv_cache_config.use_kv_cache_manager_v2"] is True
    assert p.engine.settings["speculative_config.decoding_type"] == "NGram"
    assert "LlamaForCausalLM defaults to V2" in p.engine.notes[0]
    (m,) = p.engine.detail["stages"][0]["managers"]
    assert m["role"] == "target"
    # one pool group of 32 layers x 4,096 B/token x 32-token slots: 8 GiB / 4 MiB
    (pool,) = m["pools"]
    assert (pool["slot_bytes"], pool["slots"]) == ([4_194_304], 8 * GIB // (32 * 4_096 * 32))
    assert pool["slots"] == 2_048
    assert any(n.startswith("# ngram: no draft manager") for n in p.engine.notes)


def test_ngram_follows_the_model_default_so_qwen3_stays_v1() -> None:
    p = kvbudget.plan("Qwen/Qwen3-8B", spec="ngram", engine="trtllm", kv_budget="8GiB",
                      max_seq_len=32768)  # fmt: skip
    assert p.engine.settings["kv_cache_config.use_kv_cache_manager_v2"] is False
    assert p.engine.notes[0].startswith("# manager: V1, TensorRT-LLM's auto pick")


def test_ngram_headroom_is_one_generation_step_without_extra_kv_tokens() -> None:
    # _get_generation_kv_capacity: get_num_extra_kv_tokens (0 for NGram, K - 1 = 2 for a
    # one-engine mode) + tokens_per_gen_step (1 + K = 4)
    from kvbudget.deployment import resolve_deployment
    from kvbudget.engines import trtllm_v2 as v2

    def headroom(spec: str) -> int:
        return v2.headroom(resolve_deployment("meta-llama/Llama-3.1-8B-Instruct", spec=spec,
                                              engine="trtllm@v2", kv_budget="8GiB"))  # fmt: skip

    assert headroom("ngram") == 0 + 4
    assert headroom("eagle3") == 2 + 4
