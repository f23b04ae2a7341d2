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
