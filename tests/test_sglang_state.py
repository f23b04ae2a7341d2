"""SGLang's Mamba / Gated DeltaNet state pool (``kvbudget.engines.sglang_state``).

Facts from the SGLang 0.5.23 wheel (``python/sglang/srt/``); every plan figure asserted
here is also what the fidelity harness (``benchmarks/fidelity/sglang/``) gets from
SGLang's own ``KVCacheConfigurator.configure`` and ``MambaPool`` for the emitted command.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvbudget
from kvbudget import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.deployment import resolve_deployment
from kvbudget.engines import emit
from kvbudget.engines.sglang_state import slots_per_request, state_layout
from kvbudget.plan_types import Plan

GIB = 1024**3
QWEN3_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"
QWEN35_397B = "Qwen/Qwen3.5-397B-A17B"
NEMOTRON_H = "nvidia/Nemotron-H-8B-Base-8K"
# Qwen3-Next at TP 1, per Gated DeltaNet layer (configs/mamba_utils.py
# Mamba2StateShape.create): conv_dim = 2 x 16 x 128 + 32 x 128 = 8,192 channels,
# (conv_kernel 4 - 1) columns in bf16 = 49,152 B; temporal 32 x 128 x 128 in float32 =
# 2,097,152 B; 36 of the 48 layers are linear: mamba_cache_per_req = 36 x 2,146,304
QWEN3_NEXT_PER_REQUEST = 36 * (8192 * 3 * 2 + 32 * 128 * 128 * 4)  # 77,266,944 B


def sgl_plan(target: str, **kwargs: Any) -> Plan:
    args: dict[str, Any] = {"spec": "none", "kv_budget": 8 * GIB, "gpu": "H200", "tp": 1}
    args.update(kwargs)
    args.setdefault("engine", "sglang")
    return kvbudget.plan(target, **args)


def test_slots_per_request_follow_the_radix_cache_strategy() -> None:
    # kv_cache_configurator.py _calculate_mamba_ratio: MAMBA_CACHE_SIZE_MAX_RUNNING_
    # REQUESTS_RATIO (3) + get_mamba_tracking_slots (allocation_sizing.py): extra_buffer
    # 2 with the overlap scheduler, 1 without; lazy 1; no_buffer 0; 1 with
    # --disable-radix-cache
    assert slots_per_request("extra_buffer") == 5
    assert slots_per_request("extra_buffer", overlap=False) == 4
    assert slots_per_request("extra_buffer_lazy") == 4
    assert slots_per_request("no_buffer") == 3
    assert slots_per_request("extra_buffer", radix_cache=False) == 1
    with pytest.raises(InvalidArgumentError, match="one of extra_buffer"):
        slots_per_request("auto")


def test_state_per_request_is_float32_ssm_and_bf16_conv() -> None:
    d = resolve_deployment(QWEN3_NEXT, spec="none", kv_budget=8 * GIB, engine="sglang")
    lay = state_layout(d, list(d.target.layers))
    assert lay is not None and lay.layers == 36
    assert lay.per_request_bytes == QWEN3_NEXT_PER_REQUEST == 77_266_944
    # Nemotron-H-8B Mamba2: conv_dim = 128 x 64 + 2 x 8 x 128 = 10,240, x 3 x 2 B =
    # 61,440 B; SSM 128 x 64 x 128 x 4 B = 4,194,304 B; 24 Mamba2 layers
    nd = resolve_deployment(NEMOTRON_H, spec="none", kv_budget=8 * GIB, engine="sglang")
    nlay = state_layout(nd, list(nd.target.layers))
    assert nlay is not None and nlay.layers == 24
    assert nlay.per_request_bytes == 24 * (61_440 + 4_194_304) == 102_137_856


def test_qwen3_next_state_pool_takes_its_share_and_the_kv_pool_the_rest() -> None:
    p = sgl_plan(QWEN3_NEXT)
    e = p.engine.detail
    # SGLang's default state share: 8 GiB x 0.9 / 1.9 = 4,068,916,385 B (--mamba-full-
    # memory-ratio 0.9); 4,068,916,385 // 77,266,944 = 52 slots' worth, less the padding
    # slot, over 5 slots per request (extra_buffer): 10 requests, 50 slots
    assert e["mamba_cache_slots"] == 50 and e["max_running_requests"] == 10
    # MambaPool: (50 + 1) slots x 77,266,944 B (_handle_max_mamba_cache: + 1 padding slot)
    assert e["mamba_state_bytes"] == 51 * QWEN3_NEXT_PER_REQUEST == 3_940_614_144
    # KV of the 12 attention layers: 2 KV heads x 256 x 2 (K, V) x 2 B = 2,048 B per
    # layer and token at TP 1, x 12 = 24,576 B; (8 GiB - 3,940,614,144) // 24,576 =
    # 189,181; (189,181 - 32) // 32 x 32 = 189,120 tokens, T + 32 rows allocated
    assert e["max_total_num_tokens"] == 189_120
    assert e["device_bytes"] == (189_120 + 32) * 24_576
    assert e["device_bytes"] + e["mamba_state_bytes"] <= 8 * GIB
    state = [x for x in p.engine.pools if x.kind == "state"]
    assert [(x.name, x.blocks, x.bytes) for x in state] == [("mamba", 50, 3_940_614_144)]
    s = p.engine.settings
    assert s["--mamba-radix-cache-strategy"] == "extra_buffer"
    assert s["--max-mamba-cache-size"] == 50 and s["--max-running-requests"] == 10
    assert any("Mamba state pool holds 10 running requests" in w for w in p.engine.warnings)
    text = emit(p, "sglang")
    assert (
        "--max-mamba-cache-size 50" in text and "--mamba-radix-cache-strategy extra_buffer" in text
    )


def test_dp_attention_emits_every_workers_state_slots() -> None:
    # _handle_max_mamba_cache divides --max-mamba-cache-size by the attention-DP size
    # (mamba_pool.per_dp_shard); per worker the budget is TP 1's: 10 requests, 50 slots
    p = sgl_plan(QWEN3_NEXT, tp=8, dp=8, dp_attention=True)
    assert p.engine.detail["mamba_cache_slots"] == 50
    assert p.engine.settings["--max-mamba-cache-size"] == 400
    assert p.engine.settings["--max-running-requests"] == 80


def test_speculative_state_buffers_are_sized_by_running_requests() -> None:
    p = sgl_plan(QWEN35_397B, spec="mtp")
    e = p.engine.detail
    # Qwen3.5-397B at TP 1, 45 Gated DeltaNet layers: conv_dim = 2 x 16 x 128 + 64 x 128
    # = 12,288; per layer 12,288 x 3 x 2 + 64 x 128 x 128 x 4 = 4,268,032 B;
    # mamba_cache_per_req = 192,061,440 B. D = 3 draft steps + 1 = 4 draft tokens.
    per_req, d_tokens = 45 * 4_268_032, 4
    assert e["mamba_cache_slots"] == 5 and e["max_running_requests"] == 1
    # MambaPool.__init__: (5 + 1) slots; intermediate_ssm (1 + 1) x 4 temporal states
    # and the shared conv window of 4 + 4 - 2 = 6 columns per layer and row
    slots = 6 * per_req
    spec = 2 * 45 * (d_tokens * 64 * 128 * 128 * 4 + 12_288 * 6 * 2)
    assert e["mamba_state_bytes"] == slots + spec == 2_675_589_120
    # _handle_max_mamba_cache reserves per_req x (running + 1) x D: it prices D x 3 conv
    # columns, more than the 6 allocated
    assert e["mamba_reserved_bytes"] == slots + per_req * 2 * d_tokens
    assert e["mamba_reserved_bytes"] > e["mamba_state_bytes"]
    names = [x.name for x in p.engine.pools if x.kind == "state"]
    assert names == ["mamba", "mamba speculative"]


def test_hicache_splits_between_kv_and_state_host_pools_by_device_bytes() -> None:
    p = sgl_plan(QWEN3_NEXT, host_budget=64 * 10**9)
    e = p.engine.detail
    gb = p.engine.settings["--hicache-size"]
    kv_dev = e["device_bytes"]  # (189,120 + 32) x 24,576
    state_dev = e["mamba_reserved_bytes"]  # the MambaPool's get_kv_size_bytes
    # hybrid_pool_assembler.py _split_hicache_size, then MambaPoolHost: one slot per page
    # (page_size 1), int(GB x 1e9 // per_req) + 1 slots; HostKVCache for the KV part
    share = gb * state_dev / (kv_dev + state_dev)
    assert e["host_state_slots"] == int(share * 1e9 // QWEN3_NEXT_PER_REQUEST) + 1
    kv_share = gb * kv_dev / (kv_dev + state_dev)
    assert e["host_tokens"] == (int(kv_share * 1e9 // 24_576) // 32 + 1) * 32
    assert e["host_bytes"] == (
        e["host_tokens"] * 24_576 + e["host_state_slots"] * QWEN3_NEXT_PER_REQUEST
    )
    assert e["host_bytes"] <= 64 * 10**9
    host_state = [x for x in p.engine.pools if x.kind == "state" and x.tier == "host"]
    assert [x.blocks for x in host_state] == [e["host_state_slots"]]


def test_unmodelled_state_settings_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="--state-dtype auto"):
        sgl_plan(QWEN3_NEXT, state_dtype="bf16")
    with pytest.raises(InvalidArgumentError, match="--pp 1"):
        sgl_plan(QWEN3_NEXT, tp=4, pp=2)
    # Nemotron-H-56B at TP 1: one request's 5 slots of 912,605,184 B exceed the share
    with pytest.raises(InfeasibleBudgetError, match="default state share"):
        sgl_plan("nvidia/Nemotron-H-56B-Base-8K")


@settings(max_examples=25, deadline=None)
@given(
    budget_gib=st.integers(min_value=4, max_value=64),
    batch=st.integers(min_value=1, max_value=512),
    tp=st.sampled_from([1, 2, 4, 8]),
)
def test_hybrid_pools_fit_the_budget(budget_gib: int, batch: int, tp: int) -> None:
    p = sgl_plan(QWEN3_NEXT, kv_budget=budget_gib * GIB, max_batch_size=batch, tp=tp)
    e = p.engine.detail
    gpu = sum(x.bytes for x in p.engine.pools if x.tier == "gpu")
    assert gpu == e["device_bytes"] + e["mamba_state_bytes"] <= budget_gib * GIB
    assert e["max_running_requests"] <= batch
    assert e["mamba_cache_slots"] == 5 * e["max_running_requests"]


# ---------------------------------------------------------------- DeepSeek-V3.2 (DSA)
DSV32 = "deepseek-ai/DeepSeek-V3.2"


def test_dsa_pools_hold_the_latent_and_the_indexer_key_on_64_token_pages() -> None:
    p = sgl_plan(DSV32, tp=8, tokens_per_block=32)
    e = p.engine.detail
    # DSATokenToKVPool per layer and token: the bf16 latent (512 + 64) x 2 = 1,152 B and
    # the indexer key 128 + 128 // 128 x 4 = 132 B (_compute_dsa_indexer_cell_size);
    # 61 layers: 78,324 B. --page-size is raised to 64 for DSA (and emitted so):
    # (8 GiB // 78,324 - 64) // 64 x 64 = (109,671 - 64) // 64 x 64 = 109,568 tokens
    assert p.engine.settings["--page-size"] == 64
    assert e["max_total_num_tokens"] == 109_568
    assert e["device_bytes"] == (109_568 + 64) * 78_324
    # the indexer buffers have the latent's T + page rows: 109,632 x 132 x 61
    assert e["indexer_bytes"] == 882_756_864
    # fp8: SGLang's scaled latent layout (calculate_mla_kv_cache_dim) 512 fp8 + 512 // 128
    # x 4 B of scales + 64 x 2 B of bf16 rope = 656 B, + 132: 788 x 61 = 48,068 B/token;
    # (8 GiB // 48,068 - 64) // 64 x 64 = (178,703 - 64) // 64 x 64 = 178,624
    fp8 = sgl_plan(DSV32, tp=8, kv_dtype="fp8")
    assert fp8.engine.detail["max_total_num_tokens"] == 178_624


def test_dsa_indexer_host_pool_comes_on_top_of_hicache_size() -> None:
    p = sgl_plan(DSV32, tp=8, host_budget=64 * 10**9)
    e = p.engine.detail
    # _DsaStrategy: --hicache-size sizes the MLA host pool at 1,152 x 61 = 70,272 B per
    # token; DSAIndexerPoolHost has its tokens at 132 x 61 = 8,052 B on top. 58 GB:
    # (int(58e9 // 70,272) // 64 + 1) x 64 = 825,408 tokens x 78,324 B = 64,649,256,192 B,
    # over 64 GB; 57 GB: 811,136 tokens, 63,531,416,064 B
    assert p.engine.settings["--hicache-size"] == 57
    assert e["host_tokens"] == 811_136
    assert e["host_indexer_bytes"] == 811_136 * 8_052 == 6_531_267_072
    assert e["host_bytes"] == 63_531_416_064


@pytest.mark.parametrize(("target", "what"), [(QWEN3_NEXT, "state"), (DSV32, "indexer")])
def test_main_refuses_the_pools_checked_against_0_5_23_only(target: str, what: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{what} pools .*sglang@0.5.23"):
        sgl_plan(target, tp=8, engine="sglang@main@003fca80")


def test_the_pool_warning_names_the_emitted_running_cap_under_a_state_cap() -> None:
    # With the state pool capping --max-running-requests below --max-batch-size, the
    # pool warning quotes the emitted flag (not --max-batch-size), and is left out where
    # the state cap, not the pool's tokens, binds (the state warning says that one).
    long = sgl_plan(QWEN3_NEXT, tp=4, kv_budget=None, max_batch_size=4096)
    emitted = long.engine.settings["--max-running-requests"]
    assert emitted < 4096
    pool = [w for w in long.warnings if w.startswith("SGLang's pool holds")]
    assert len(pool) == 1 and f"(--max-running-requests {emitted});" in pool[0]
    assert f"--max-running-requests {emitted} " in emit(long)
    short = sgl_plan(QWEN3_NEXT, tp=4, kv_budget=None, max_batch_size=4096, max_seq_len=1024)
    assert short.engine.settings["--max-running-requests"] < 4096
    assert any("--max-running-requests is lowered to it" in w for w in short.warnings)
    assert not any(w.startswith("SGLang's pool holds") for w in short.warnings)
