"""``simulate --engine X``: the replay's cache holds engine X's pools, mapped one to one.

Hand arithmetic: Llama-3.1-8B + its EAGLE3 head at bf16 is 32 x 4,096 + 4,096 =
135,168 B per token; 16 tokens per block make 2,162,688 B a block over both roles.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import kvbudget
from kvbudget import InvalidArgumentError, SpecDecodeCache
from kvbudget.cli import app
from kvbudget.deployment import resolve_deployment
from kvbudget.sim.engine_cache import cache_plan
from kvbudget.sim.policies import POLICY_VARIANTS, policy_plans
from kvbudget.sim.simulation import engine_flags_for

ARGS = {"kv_budget": "8GiB", "host_budget": "16GiB", "max_seq_len": 8192, "tokens_per_block": 16}
BLOCK_BYTES = 135_168 * 16  # 2,162,688 B


def test_vllm_pool_is_shared_by_both_roles_less_the_null_block() -> None:
    p = kvbudget.plan(engine="vllm", **ARGS)  # type: ignore[arg-type]
    c = cache_plan(p)
    # 8 GiB = 8,589,934,592 B // 2,162,688 = 3,971 blocks; block 0 is the null block
    assert p.engine.pools[0].blocks == 3_971 and p.engine.pools[0].reserved_blocks == 1
    assert [(m.role, m.gpu.blocks) for m in c.managers] == [("target", 3_970), ("draft", 3_970)]
    # host: 16 GiB as --kv-offloading-size 16 (GiB over 1 rank) // 2,162,688 = 7,943
    assert [m.host.blocks for m in c.managers] == [7_943, 7_943]
    assert c.capacity.gpu_blocks == 3_970 and c.capacity.tokens == 3_970 * 16
    assert c.capacity.max_concurrency == p.capacity.max_concurrency  # the engine's
    cache = SpecDecodeCache.from_plan(c)  # the real cache builds from it
    gpu = [x for x in cache.stats().pools if x.tier == "gpu" and x.kind == "kv"]
    assert {(x.role, x.free_blocks) for x in gpu} == {("target", 3_970), ("draft", 3_970)}


def test_sglang_and_trtllm_pools_map_per_role() -> None:
    sgl = cache_plan(kvbudget.plan(engine="sglang", **ARGS))  # type: ignore[arg-type]
    # SGLang: T = (8 GiB // 135,168 - 16) // 16 x 16 = (63,550 - 16) // 16 x 16 = 63,520
    # tokens = 3,970 pages per role (its padding page is not a block)
    assert [m.gpu.blocks for m in sgl.managers] == [3_970, 3_970]
    trt = cache_plan(kvbudget.plan(engine="trtllm@v1", **ARGS))  # type: ignore[arg-type]
    # TensorRT-LLM V1 (the default plans V2 for Llama + EAGLE3 now):
    # max_tokens = 8 GiB // 135,168 // 16 x 16 = 63,536 = 3,971 blocks
    assert [m.gpu.blocks for m in trt.managers] == [3_971, 3_971]
    own = kvbudget.plan(engine="kvbudget", **ARGS)  # type: ignore[arg-type]
    assert cache_plan(own) is own


def test_pools_the_cache_cannot_enforce_are_refused() -> None:
    # gpt-oss under vLLM: full and sliding groups draw on one hybrid pool
    p = kvbudget.plan("openai/gpt-oss-120b", spec="none", engine="vllm", **ARGS)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"hybrid pool.*--engine kvbudget"):
        cache_plan(p)


def test_simulate_engine_replays_that_engines_pools() -> None:
    args = ["simulate", "--engine", "vllm", "--kv-budget", "4GiB", "--max-seq-len", "8192",
            "--limit", "200", "--policies", "kvbudget,no-host", "--json"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["plan"]["engine"]["name"] == "vllm"
    # 4 GiB // (32 x 4,096 + 4,096) B x 16 tokens = 4,294,967,296 // 2,162,688 = 1,985
    # blocks of 16 tokens (the default --tokens-per-block 32 is vLLM's here: 992 of 32)
    blocks = data["plan"]["engine"]["capacity"]["gpu_blocks"]
    assert blocks == 4_294_967_296 // (135_168 * 32) == 992
    (as_planned, no_host) = data["policies"]
    assert as_planned["policy"] == "kvbudget" and no_host["policy"] == "no-host"
    gpt_oss = CliRunner().invoke(app, [*args[:2], "vllm", "--target", "openai/gpt-oss-120b",
                                       "--spec", "none", *args[3:]])  # fmt: skip
    assert gpt_oss.exit_code == 2 and gpt_oss.stderr.startswith("error: simulate --engine vllm")


def test_engine_flags_come_from_the_one_deployment(monkeypatch: pytest.MonkeyPatch) -> None:
    d = resolve_deployment(**ARGS)  # type: ignore[arg-type]

    def no_reload(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was loaded again")

    monkeypatch.setattr("kvbudget.deployment.load_model", no_reload)
    monkeypatch.setattr("kvbudget.model.load_model", no_reload)
    flags = engine_flags_for(d)
    assert sorted(flags) == ["sglang", "trtllm", "vllm"]
    assert flags["vllm"]["--kv-cache-memory-bytes"] == 8 * 1024**3


def test_policies_are_a_registry_of_plan_variants() -> None:
    """Each registered policy is a variant of the one plan; the first is the plan as made."""
    base = kvbudget.plan(engine="vllm", **ARGS)  # type: ignore[arg-type]
    variants = {v.name: v.plan for v in policy_plans(cache_plan(base))}
    assert list(variants) == list(POLICY_VARIANTS)
    assert variants["kvbudget"] == cache_plan(base)
    assert variants["no-host"].capacity.host_blocks == 0 < base.capacity.host_blocks
    # doubled-host: both roles handed the whole 16 GiB: 2 x the pinned bytes
    assert sum(m.host.bytes for m in variants["doubled-host"].managers) == 2 * 16 * 1024**3
