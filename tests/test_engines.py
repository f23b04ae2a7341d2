"""Engine models: what vLLM, SGLang and TensorRT-LLM allocate for a plan, exact values.

Budgets are given with ``kv_budget``/``host_budget`` so every number follows from the
cache geometry; the hand arithmetic is beside each expected value. The engine facts
(with their sources) are in the docstrings of ``kvbudget.engines.vllm``, ``.sglang`` and
``.trtllm``. The fidelity harness in ``benchmarks/fidelity/`` checks the vLLM model
against vLLM's own code.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

import kvbudget
from kvbudget import InfeasibleBudgetError, InvalidArgumentError
from kvbudget.cli import app
from kvbudget.deployment import Deployment, resolve_deployment
from kvbudget.dtypes import KV_DTYPE_NAMES
from kvbudget.engines import ENGINES, emit
from kvbudget.engines import sglang as sgl
from kvbudget.engines import trtllm as trt
from kvbudget.engines.common import gib_text, whole_gb
from kvbudget.plan_types import Plan
from kvbudget.planner import plan

GIB = 1024**3
B40 = 40 * GIB  # 42,949,672,960 B
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA1B = "meta-llama/Llama-3.2-1B-Instruct"
LLAMA70B = "meta-llama/Llama-3.1-70B-Instruct"
DSV3 = "deepseek-ai/DeepSeek-V3"
GPT_OSS = "openai/gpt-oss-120b"
GEMMA3 = "google/gemma-3-27b-it"
MISTRAL = "mistralai/Mistral-7B-v0.1"
SPEC_MODES = {"eagle3", "mtp", "draft-target", "ngram"}


def make(engine: str, target: str = LLAMA8B, spec: str = "eagle3", **kwargs: Any) -> Plan:
    args: dict[str, Any] = {
        "kv_budget": "40GiB",
        "host_budget": 0,
        "max_seq_len": 32768,
        "tokens_per_block": 16,
    }
    args.update(kwargs)
    return plan(target, spec=spec, engine=engine, **args)


def predicted(p: Plan) -> dict[str, Any]:
    return dict(p.engine.detail)


def flag(text: str, name: str) -> str | None:
    for line in text.splitlines():
        line = line.removesuffix(" \\").strip()
        if line.startswith(name + " "):
            return line[len(name) + 1 :]
    return None


# ---------------------------------------------------------------- units and facts


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (64 * GIB, "64"),  # 68719476736 B = 64 GiB exactly
        (1610612736, "1.5"),  # 1.5 x 2^30
        (GIB - 1, "0.999"),  # (2^30 - 1) x 1000 // 2^30 = 999 thousandths
        (10 * GIB + 1024**2, "10"),  # + 1 MiB = 0.00098 GiB, below one thousandth
        (1, "0"),
    ],
)
def test_gib_rounds_down_to_thousandths(num_bytes: int, expected: str) -> None:
    assert gib_text(num_bytes) == expected


def test_whole_gb_is_decimal_and_rounds_down() -> None:
    assert whole_gb(64 * GIB) == 68  # 68.72e9 B
    assert whole_gb(10**9 - 1) == 0


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_names_every_spec_mode_and_dtype(engine: str) -> None:
    facts = ENGINES[engine]
    # TensorRT-LLM's PyTorch backend runs EAGLE3 heads only (EagleDecodingConfig maps
    # every Eagle config to EAGLE3 or EAGLE3_ONE_MODEL): --spec eagle is refused there, and
    # it has no DFlash drafts (vLLM: method "dflash"; SGLang: DFLASH)
    both = {"eagle", "dflash"}
    # DeepSeek-V4.1's DSpark stages are modelled under vLLM (method "dspark") and SGLang
    # (DSPARK) only
    own = {"dspark"} if engine in ("vllm", "sglang") else set()
    assert set(facts.spec_names) == SPEC_MODES | (both if engine != "trtllm" else set()) | own
    assert set(facts.kv_dtype_names) == set(KV_DTYPE_NAMES) - {"auto"}
    assert all(f.kv_dtype_names["int8"] is None for f in ENGINES.values())


# ---------------------------------------------------------------- vLLM


def test_vllm_full_attention_with_eagle3_is_one_group() -> None:
    p = make("vllm")
    e = predicted(p)
    # 2 (K,V) x 8 heads x 128 x 2 B = 4,096 B per token per layer; page = 16 x 4,096 = 65,536
    # 32 target layers + 1 EAGLE3 layer, all equal specs: one group, 33 pages per block
    assert e["kv_cache_groups"] == [
        {
            "kind": "full_attention",
            "layers": 33,
            "draft_layers": 1,
            "padding_layers": 0,
            "page_bytes": 65_536,
            "block_size": 16,
            "sliding_window": None,
            "blocks_per_request": 2048,  # 32,768 / 16
        }
    ]
    assert e["bytes_per_block"] == 33 * 65_536 == 2_162_688
    assert e["num_gpu_blocks"] == B40 // 2_162_688 == 19_859
    # concurrency 19,859 / 2,048 = 9.6968; tokens int(9.6968 x 32,768) = 19,859 x 16
    assert round(e["max_concurrency"], 2) == 9.70
    assert e["gpu_kv_cache_tokens"] == 317_744
    assert p.capacity.tokens == 317_744 and p.capacity.max_concurrency == 9
    assert p.engine is not None and p.engine.log == (
        "GPU KV cache size: 317,744 tokens, Maximum concurrency for 32,768 tokens per "
        "request: 9.70x",
    )


def test_vllm_gpt_oss_eagle3_pads_the_sliding_group() -> None:
    e = predicted(make("vllm", GPT_OSS))
    # 2 x 8 heads x 64 x 2 B = 2,048 B per token per layer; page = 16 x 2,048 = 32,768
    # 18 full + 1 EAGLE3 full = 19, 18 sliding: 19 < 1.5 x 18, so groups of 19 layers
    groups = {(g["kind"], g["layers"], g["padding_layers"]) for g in e["kv_cache_groups"]}
    assert groups == {("full_attention", 19, 0), ("sliding_window", 18, 1)}
    assert e["bytes_per_block"] == 19 * 32_768 == 622_592
    assert e["num_gpu_blocks"] == B40 // 622_592 == 68_985
    # per request: full 32,768 / 16 = 2,048; sliding cdiv(min(128 - 1 + 2 x 8,192,
    # 32,768), 16) + 1 = cdiv(16,511, 16) + 1 = 1,033 (async: 2 batches in flight)
    assert e["blocks_per_request"] == 2048 + 1033 == 3081
    assert round(e["max_concurrency"], 2) == 22.39  # 68,985 / 3,081
    assert e["gpu_kv_cache_tokens"] == int(68_985 / 3081 * 32768) == 733_690


def test_vllm_sliding_charge_follows_max_num_batched_tokens() -> None:
    sync = predicted(make("vllm", GPT_OSS, async_scheduling=False, max_num_batched_tokens=2048))
    # one batch in flight: cdiv(127 + 2,048, 16) + 1 = 137 sliding blocks per request
    assert sync["max_in_flight_tokens"] == 2048
    assert sync["blocks_per_request"] == 2048 + 137


def test_vllm_every_layer_sliding_gets_the_whole_pool() -> None:
    p = make("vllm", MISTRAL, spec="ngram", tokens_per_block=32)
    e = predicted(p)
    # 32 layers x 32 x 4,096 B = 4 MiB per block; 40 GiB / 4 MiB = 10,240 blocks
    assert e["num_gpu_blocks"] == 10_240
    # cdiv(min(4,095 + 16,384, 32,768), 32) + 1 = 640 + 1
    assert e["blocks_per_request"] == 641
    assert e["gpu_kv_cache_tokens"] == int(10_240 / 641 * 32768) == 523_470
    assert p.capacity.tokens == 523_470 and p.capacity.max_concurrency == 15


def test_vllm_refuses_a_pool_of_exactly_one_sequence_the_null_block_holds_back() -> None:
    # Llama-3.1-70B: 80 layers x 16 x 4,096 B = 5 MiB per block; 40 GiB = 8,192 blocks,
    # exactly one 131,072-token request; vLLM keeps block 0 back and refuses to start
    with pytest.raises(InfeasibleBudgetError, match="would refuse to start"):
        make("vllm", LLAMA70B, spec="none", max_seq_len=131072)
    own = make("kvbudget", LLAMA70B, spec="none", max_seq_len=131072)
    assert own.capacity.max_concurrency == 1


def test_vllm_mla_with_mtp() -> None:
    e = predicted(make("vllm", DSV3, spec="mtp", tp=8))
    # latent 512 + 64 = 576 values x 2 B = 1,152 B per token, replicated on every rank;
    # 61 layers + 1 MTP layer in one group: 62 x 16 x 1,152 = 1,142,784 B per block
    assert [(g["kind"], g["layers"]) for g in e["kv_cache_groups"]] == [("mla", 62)]
    assert e["num_gpu_blocks"] == B40 // 1_142_784 == 37_583


def test_vllm_qwen3_next_raises_the_block_size_and_pads_states() -> None:
    e = predicted(make("vllm", "Qwen/Qwen3-Next-80B-A3B-Instruct", spec="mtp"))
    # attention: 2 x 2 KV heads x 256 x 2 B = 2,048 B per token per layer
    # GDN state with K = 3: 32 x 128 x 128 x 2 B = 1,048,576 + conv (3 + 3) rows x
    # (2 x 16 x 128 + 32 x 128) x 2 B = 98,304 -> 1,146,880 B
    # align mode (prefix caching) + FlashInfer GDN checkpoints: blocks of lcm(16, 64) = 64
    # tokens; 64 x cdiv(1,146,880, 64 x 2,048) = 64 x 9 = 576 tokens per block
    assert e["block_size"] == 576
    groups = [(g["kind"], g["layers"], g["padding_layers"]) for g in e["kv_cache_groups"]]
    # 12 attention + 1 MTP = 13; 36 GDN >= 1.5 x 13: groups of 13, GDN in 3 x (12 + 1 pad)
    assert groups == [("mamba", 12, 1)] * 3 + [("full_attention", 13, 0)]
    page = 576 * 2048  # the state page padded to the attention page: 1,179,648 B
    assert {g["page_bytes"] for g in e["kv_cache_groups"]} == {page}
    assert e["num_gpu_blocks"] == B40 // (13 * page) == 2800
    # per request: attention cdiv(32,768, 576) = 57; each GDN group 2 + K + 1 checkpoint
    assert e["blocks_per_request"] == 57 + 3 * (2 + 3 + 1) == 75
    assert round(e["max_concurrency"], 2) == 37.33
    assert e["gpu_kv_cache_tokens"] == int(2800 / 75 * 32768) == 1_223_338


def test_vllm_nemotron_h_keeps_ssm_state_in_fp32() -> None:
    e = predicted(make("vllm", "nvidia/Nemotron-H-8B-Base-8K", spec="ngram", max_seq_len=8192))
    # Mamba2 state with K = 3: SSM 128 x 64 x 128 x 4 B (fp32) = 4,194,304 + conv (3 + 3)
    # rows x (8,192 + 2 x 8 x 128) x 2 B = 122,880 -> 4,317,184 B; attention page per token
    # 2 x 8 x 128 x 2 B = 4,096: 16 x cdiv(4,317,184, 16 x 4,096) = 16 x 66 = 1,056 tokens
    assert e["block_size"] == 1056
    # 24 Mamba2 layers, 4 attention: 6 groups of 4 Mamba2 layers + 1 attention group
    assert [g["kind"] for g in e["kv_cache_groups"]] == ["mamba"] * 6 + ["full_attention"]
    # 4 x 1,056 x 4,096 B = 17,301,504 B per block; 40 GiB holds 2,482
    assert e["num_gpu_blocks"] == B40 // (4 * 1056 * 4096) == 2482
    # per request: cdiv(8,192, 1,056) = 8 attention blocks + 6 x (2 + 3 + 1) states
    assert e["blocks_per_request"] == 8 + 36


def test_vllm_mamba_without_prefix_caching_keeps_fewer_states() -> None:
    e = predicted(
        make(
            "vllm",
            "nvidia/Nemotron-H-8B-Base-8K",
            spec="none",
            max_seq_len=8192,
            enable_prefix_caching=False,
        )
    )
    # "none" mode: 1 + K = 1 state per request; no K: SSM 4,194,304 + conv 3 x 10,240 x 2
    # = 4,255,744 B -> 16 x cdiv(4,255,744, 65,536) = 16 x 65 = 1,040 tokens per block
    assert e["block_size"] == 1040
    assert e["blocks_per_request"] == 8 + 6 * 1  # cdiv(8,192, 1,040) = 8
    assert e["max_concurrency"] == 2520 / 14


def test_vllm_emission_carries_the_predicted_line_and_its_flags() -> None:
    p = make("vllm", GPT_OSS)
    out = emit(p, "vllm")
    assert "#   GPU KV cache size: 733,690 tokens" in out
    assert flag(out, "--kv-cache-memory-bytes") == str(B40)
    assert flag(out, "--max-num-batched-tokens") == "8192"
    assert "--async-scheduling" in out and "engine model: vLLM 0.33.0" in out


# ---------------------------------------------------------------- SGLang


def _sglang_profiles(p: Plan) -> int:
    """The KV budget SGLang profiles with the emitted --mem-fraction-static.

    ``free before weights x fraction - weights`` (``_profile_available_bytes``), taking the
    free memory before weights as the GPU's memory and nothing else resident.
    """
    assert p.engine is not None and p.budget.gpu_memory_bytes is not None
    fraction = float(p.engine.settings["--mem-fraction-static"])
    weights = max(s.weights_bytes or 0 for s in p.stages) or _weights(p)
    return int(p.budget.gpu_memory_bytes * fraction) - weights


def _weights(p: Plan) -> int:
    from kvbudget.model import load_model
    from kvbudget.weights import weights_bytes

    total = weights_bytes(load_model(p.target), tp=p.tp).total_bytes
    if p.draft:
        total += weights_bytes(load_model(p.draft), tp=p.tp).total_bytes
    return total


def test_sglang_gpt_oss_eagle3_allocates_the_plans_tokens() -> None:
    p = make("sglang", GPT_OSS, host_budget="64GiB", tokens_per_block=32, max_batch_size=64)
    e = predicted(p)
    lay = sgl.layout(
        deployment_of(p),
        0,
    )
    # forward through SGLang's own formulas with the emitted flags
    assert p.engine is not None
    s = p.engine.settings
    full, swa = sgl.allocate(
        lay,
        _sglang_profiles(p),
        32,
        s["--max-total-tokens"],
        s["--swa-full-tokens-ratio"],
    )
    assert full == e["max_total_num_tokens"] == p.capacity.tokens
    assert swa == e["swa_tokens"]
    # sliding pool: 64 requests x (128 + 3 + 1 + 2 x 32) + 8,192 + 32 = 20,768 tokens
    assert swa >= 20_768
    # the real pools (T + page rows each, draft pool with its own geometry) fit the budget
    assert sgl.device_bytes(lay, full, swa, 32) <= B40
    # host: target full + sliding pools and the EAGLE3 sidecar fit the 64 GiB budget
    assert e["host_bytes"] <= 64 * GIB
    pools = sgl.host_pools(lay, s["--hicache-size"], full, swa, 32)
    assert pools.host_bytes == e["host_bytes"]


def deployment_of(p: Plan) -> Deployment:
    """The deployment ``p`` was planned from (``make``'s arguments, resolved again)."""
    return resolve_deployment(
        p.target,
        p.draft,
        spec=p.spec,
        kv_budget=p.budget.gpu_bytes,
        host_budget=p.budget.host_bytes,
        max_seq_len=p.capacity.max_seq_len,
        max_batch_size=p.capacity.max_batch_size,
        tokens_per_block=p.tokens_per_block,
        tp=p.tp,
        pp=p.pp,
        kv_dtype=p.kv_dtype,
        engine=p.engine.name,
    )


def test_sglang_full_attention_tokens_and_pages() -> None:
    p = make("sglang", LLAMA8B, tokens_per_block=32)
    e = predicted(p)
    # target 32 x 4,096 = 131,072 B/token, EAGLE3 pool 4,096 B/token, T + 32 rows each:
    # T = (40 GiB // 135,168 - 32) // 32 x 32 = (317,750 - 32) // 32 x 32 = 317,696
    assert e["max_total_num_tokens"] == 317_696
    assert e["device_bytes"] == (317_696 + 32) * 135_168 <= B40
    # SGLang budgets the EAGLE3 layer at the target's per-layer size: int(131,072 x 33/32)
    assert e["profiled_budget_bytes"] == (317_696 + 32) * 135_168 + 1


def test_sglang_mistral_keeps_every_layer_at_full_length() -> None:
    p = make("sglang", MISTRAL, spec="ngram", tokens_per_block=32)
    # not an allow-listed sliding hybrid: 32 layers x 4,096 B = 131,072 B per token;
    # (40 GiB // 131,072 - 32) // 32 x 32 = 327,648 tokens, not 0
    assert predicted(p)["max_total_num_tokens"] == 327_648
    assert flag(emit(p, "sglang"), "--max-total-tokens") == "327648"


# ---------------------------------------------------------------- TensorRT-LLM


def test_trtllm_gpt_oss_eagle3_allocates_the_plans_tokens() -> None:
    p = make("trtllm@v1", GPT_OSS, host_budget="64GiB", tokens_per_block=32)
    assert p.engine is not None
    s = p.engine.settings
    inputs = deployment_of(p)
    mgrs = trt.managers(inputs)
    # target: 36 layers x 2,048 = 73,728 B/token at full length; EAGLE3 draft 2,048
    assert [m.bytes_per_token for m in mgrs] == [73_728, 2_048]
    assert s["kv_cache_config.max_attention_window"] == [128, 32768 + 1024]
    pools = trt.allocate(
        inputs,
        (mgrs,),
        max_tokens=s["kv_cache_config.max_tokens"],
        max_gpu_total_bytes=s["kv_cache_config.max_gpu_total_bytes"],
        host_cache_size=s["kv_cache_config.host_cache_size"],
        shares_text=s["env.TRTLLM_WINDOW_SIZE_SHARES"],
    )
    # the draft holds max_tokens // 32 blocks whatever its split, so the budget goes to the
    # draft's and the target's full-length tokens (36,864 + 2,048 B) and the 128-token
    # windows of the sequences that fit: 40 GiB // (1,025 x 32 x 38,912 + 6 x 32 x 36,864)
    # = 33 of them, (40 GiB - 33 x 7,077,888) // 38,912 -> 1,097,760 tokens (566,784 when
    # both managers were priced at full length and the windows got half the target's part)
    assert s["kv_cache_config.max_tokens"] == 1_097_760
    assert pools.blocks("draft")[trt.FULL][0] * 32 == 1_097_760
    assert pools.blocks("target")[128][0] == 33 * 6  # what the 33 sequences' windows hold
    # the target's full-length window holds the plan's tokens within one block
    full_blocks = pools.blocks("target")[trt.FULL][0]
    assert abs(full_blocks * 32 - s["kv_cache_config.max_tokens"]) <= 32
    assert p.capacity.tokens == full_blocks * 32 and p.capacity.max_concurrency == 33
    # primary bytes of both managers stay within the budget
    used = sum(b[0] * 32 * pm.manager.windows[w] for pm in pools.last for w, b in pm.blocks.items())
    assert used <= B40
    # host_cache_size is split by the creator's price (_split_kv_cache_budget_for_draft):
    # draft 64 GiB x 2,048 // 75,776 = 1,857,283,155 B
    assert [pm.host_bytes for pm in pools.last] == [68_719_476_736 - 1_857_283_155, 1_857_283_155]


def test_trtllm_full_attention_emits_max_tokens() -> None:
    p = make("trtllm@v1", LLAMA8B, tokens_per_block=32)
    out = emit(p, "trtllm@v1")
    # 40 GiB // (131,072 + 4,096) = 317,750 -> 317,728 (whole blocks of 32)
    assert "  max_tokens: 317728\n" in out
    assert "max_attention_window" not in out


def test_trtllm_mistral_window_list() -> None:
    p = make("trtllm", MISTRAL, spec="ngram", tokens_per_block=32)
    assert p.engine is not None
    assert p.engine.settings["kv_cache_config.max_attention_window"] == [4096]
    assert p.capacity.tokens == 327_680  # 40 GiB // 131,072 = 327,680, whole blocks


# ---------------------------------------------------------------- API and CLI


def test_emit_needs_a_plan_for_that_engine() -> None:
    p = make("kvbudget")
    with pytest.raises(InvalidArgumentError, match="made for engine kvbudget@"):
        emit(p, "vllm")
    with pytest.raises(InvalidArgumentError, match="unknown engine 'tgi'"):
        emit(p, "tgi")
    assert emit(make("vllm"), "VLLM") == emit(make("vllm"), "vllm")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_json_engine_object(engine: str) -> None:
    data = json.loads(make(engine, host_budget="8GiB").to_json())
    assert data["schema"] == 3
    obj = data["engine"]
    assert obj["name"] == engine and obj["version"]
    assert obj["log"] and obj["settings"] and obj["detail"] and obj["pools"]
    assert obj["capacity"] == data["capacity"] and data["capacity"]["tokens"] > 0


def test_cli_emit_implies_engine_and_engine_prints_its_lines() -> None:
    runner = CliRunner()
    base = [
        "plan",
        "--target",
        GPT_OSS,
        "--kv-budget",
        "40GiB",
        "--max-seq-len",
        "32768",
        "--tokens-per-block",
        "16",
        "--host-budget",
        "0",
    ]
    shown = runner.invoke(app, [*base, "--engine", "vllm"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "GPU KV cache size: 733,690 tokens" in shown.stdout
    emitted = runner.invoke(app, [*base, "--emit", "vllm"])
    assert emitted.exit_code == 0 and "vllm serve" in emitted.stdout
    clash = runner.invoke(app, [*base, "--engine", "sglang", "--emit", "vllm"])
    assert clash.exit_code == 2 and "drop --engine sglang" in clash.stderr
    # a version clash names the emission that plans for the --engine given
    older = runner.invoke(app, [*base, "--engine", "vllm@0.29.0", "--emit", "vllm"])
    assert older.exit_code == 2 and "(--emit vllm@0.29.0)" in older.stderr
    assert len(older.stderr.splitlines()) == 1


def test_int8_emit_is_one_line_error_on_the_cli() -> None:
    result = CliRunner().invoke(
        app, ["plan", "--kv-budget", "40GiB", "--kv-dtype", "int8", "--emit", "sglang"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: SGLang has no int8 KV cache")
    assert len(result.stderr.strip().splitlines()) == 1


def test_the_cache_refuses_a_plan_made_for_another_engine() -> None:
    from kvbudget import SpecDecodeCache

    with pytest.raises(InvalidArgumentError, match="needs a plan made with engine='kvbudget'"):
        SpecDecodeCache.from_plan(make("vllm"))


def test_trtllm_max_tokens_with_pp_is_the_binding_stages() -> None:
    # the V1 manager (Llama's default is V2: tests/test_trtllm.py)
    p = make("trtllm@v1", LLAMA70B, spec="none", pp=3, max_seq_len=8192, tokens_per_block=32)
    # 80 layers over 3 stages: 27, 27, 26; a 27-layer rank holds 27 x 4,096 = 110,592
    # B/token: 40 GiB // 110,592 = 388,361 -> 388,352 in whole blocks of 32
    assert p.engine is not None
    assert p.engine.settings["kv_cache_config.max_tokens"] == 388_352
    assert p.capacity.tokens == 388_352


def test_a_local_config_folder_is_launched_by_its_full_path(tmp_path: Any) -> None:
    import shutil

    from kvbudget.model import _preset_dir

    folder = tmp_path / "my model"  # a space: the launch line quotes it
    folder.mkdir()
    shutil.copy(_preset_dir() / "meta-llama--Llama-3.1-8B-Instruct.json", folder / "config.json")

    def planned(engine: str) -> Any:
        return kvbudget.plan(
            str(folder), spec="none", kv_budget="40GiB", max_seq_len=8192, engine=engine
        )

    p = planned("vllm")
    assert p.target == "my model" and p.target_path == str(folder.resolve())
    assert f"vllm serve '{folder.resolve()}'" in kvbudget.emit(p, "vllm")
    assert f"--model-path '{folder.resolve()}'" in kvbudget.emit(planned("sglang"), "sglang")
    assert json.loads(p.to_json())["target_path"] == str(folder.resolve())


# ------------------------------------------------ SGLang 0.5.23 vs main, start-up checks


def test_sglang_default_is_the_0_5_23_wheel_and_main_is_registered() -> None:
    from kvbudget.engines import get_engine_model

    assert get_engine_model("sglang").version == "0.5.23"
    assert get_engine_model("sglang@0.5.23") is get_engine_model("sglang")
    main = get_engine_model("sglang@main@003fca80")
    assert not main.default and main.source.ref.startswith("003fca80")


@pytest.mark.parametrize(
    ("engine", "draft_tokens"), [("sglang", 68672), ("sglang@main@003fca80", 68704)]
)
def test_sglang_sidecar_draft_host_pool_by_version(engine: str, draft_tokens: int) -> None:
    # Llama-3.1-8B bf16 TP1: 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B/token; the
    # EAGLE3 head: 1 layer, 4,096 B/token. --hicache-size 9 (10 would pin more than
    # 10 GB): int(9e9 // 131,072) = 68,664 -> (68,664 // 32 + 1) x 32 = 68,672 host tokens
    # (pool_host/base.py HostKVCache). The sidecar: 0.5.23's build_full_draft_pools gives
    # it the host group's logical size, 68,672 (run by the fidelity harness, wheel
    # sglang-0.5.23); main@003fca80's HostKVCache gives it one page more, 68,704.
    p = make(engine, host_budget=10**10, kv_budget="8GiB", max_seq_len=2048, tokens_per_block=32)
    e = predicted(p)
    assert e["hicache_size_gb"] == 9
    assert e["host_tokens"] == 68_672
    assert e["host_draft_tokens"] == draft_tokens
    assert e["host_bytes"] == 68_672 * 131_072 + draft_tokens * 4_096


def test_sglang_eagle3_longer_context_is_emitted_with_the_override() -> None:
    # yuhuili/EAGLE3-LLaMA3.1-Instruct-8B's config has max_position_embeddings 2048 and no
    # rope factor, so SGLang's get_context_length derives 2,048 and
    # ModelConfig._derive_context_length (configs/model_config.py, 0.5.23 wheel) raises
    # "Target model's context_length (32768) is greater than the derived context_length
    # (2048)" unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
    p = make("sglang", kv_budget="8GiB", tokens_per_block=32)
    text = emit(p)
    command = [x for x in text.splitlines() if not x.startswith("#")]
    assert command[0].startswith(
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 python -m sglang.launch_server "
    )
    assert any("trained on 2,048 positions" in w and "SGLANG_ALLOW" in w for w in p.warnings)
    assert any("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in x for x in text.splitlines()
               if x.startswith("# warning:"))  # fmt: skip
    # at the draft's own length nothing is needed
    short = make("sglang", kv_budget="8GiB", tokens_per_block=32, max_seq_len=2048)
    assert p.engine.settings["env.SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1"
    assert not any(key.startswith("env.") for key in short.engine.settings)
    assert all(not x.startswith("SGLANG_") for x in emit(short).splitlines())


def test_sglang_ngram_takes_one_chain_and_refuses_dp_attention() -> None:
    # arg_groups/speculative_hook.py _handle_ngram (0.5.23 wheel): top-k is
    # --speculative-ngram-max-bfs-breadth (default 10), refused above 1 with
    # --page-size > 1 outside flashinfer
    p = make("sglang", MISTRAL, spec="ngram", tokens_per_block=32)
    assert flag(emit(p), "--speculative-ngram-max-bfs-breadth") == "1"
    with pytest.raises(InvalidArgumentError, match="does not support dp attention"):
        make("sglang", "Qwen/Qwen3-235B-A22B", spec="ngram", tp=8, dp=8, dp_attention=True)


def test_sglang_mem_fraction_allows_memory_in_use_before_weights() -> None:
    # Llama-3.1-8B bf16 TP1, 8 GiB on an H200 (150,021,734,400 B): weights
    # 16,060,522,496 B, profiled budget 8,589,934,593 B, margin 512 MiB: need
    # 25,187,328,001 B. Default allowance 2.5 GiB (PR #11716's log: 137.29 GiB free of
    # 139.72 before weights): 25,187,328,001 / 147,337,379,840 = 0.17095 -> 0.171; with
    # nothing in use, / 150,021,734,400 = 0.16789 -> 0.168.
    base = {"spec": "none", "kv_budget": "8GiB", "gpu": "H200", "tokens_per_block": 32}
    p = kvbudget.plan(LLAMA8B, engine="sglang", **base)
    e = predicted(p)
    assert e["weights_bytes"] == 16_060_522_496
    assert e["profiled_budget_bytes"] == 8_589_934_593
    assert e["pre_load_bytes"] == sgl.DEFAULT_PRE_LOAD_BYTES == 2_684_354_560
    assert e["mem_fraction_static"] == "0.171"
    none_in_use = kvbudget.plan(LLAMA8B, engine="sglang", pre_load_bytes=0, **base)
    assert predicted(none_in_use)["mem_fraction_static"] == "0.168"
    # SGLang's profile with the allowance in use (_profile_available_bytes): free before
    # weights x fraction - weights still holds the planned budget
    free_before = 150_021_734_400 - 2_684_354_560
    assert int(free_before * 0.171) - 16_060_522_496 >= 8_589_934_593


def test_cli_takes_pre_load_bytes() -> None:
    result = CliRunner().invoke(
        app,
        ["plan", "--spec", "none", "--kv-budget", "8GiB", "--gpu", "H200", "--engine", "sglang",
         "--pre-load-bytes", "0", "--emit", "sglang"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert flag(result.stdout, "--mem-fraction-static") == "0.168"


def test_pre_load_bytes_is_a_warning_for_an_engine_that_ignores_it() -> None:
    base = {"spec": "none", "kv_budget": "8GiB", "gpu": "H200", "pre_load_bytes": "1GiB"}
    base |= {"max_seq_len": 8192}
    for engine in ("vllm", "trtllm", "kvbudget"):
        p = kvbudget.plan(LLAMA8B, engine=engine, **base)
        assert [w for w in p.warnings if w.startswith("--pre-load-bytes changes nothing")]
    sglang = kvbudget.plan(LLAMA8B, engine="sglang", **base)
    assert not [w for w in sglang.warnings if "--pre-load-bytes" in w]


def test_a_disk_budget_no_engine_pool_holds_is_a_warning() -> None:
    # vLLM's offloading (--kv-offloading-size) and SGLang's HiCache (--hicache-size) as
    # kvbudget models them are host tiers: a disk budget reaches none of their settings.
    # kvbudget's own cache has a disk tier: its disk pools hold the budget, no warning.
    base = {"kv_budget": "8GiB", "host_budget": "16GiB", "disk_budget": "100GiB"}
    base |= {"max_seq_len": 8192}
    for engine in ("vllm", "sglang"):
        p = kvbudget.plan(LLAMA8B, engine=engine, **base)
        assert {pool.tier for pool in p.engine.pools} == {"gpu", "host"}
        (warned,) = [w for w in p.warnings if w.startswith("--disk-budget 100.00 GiB")]
        assert "has no disk KV tier in kvbudget's model of it (its pools: gpu, host)" in warned
        assert not [w for w in p.warnings if w.startswith("--host-budget")]
    own = kvbudget.plan(LLAMA8B, engine="kvbudget", **base)
    assert "disk" in {pool.tier for pool in own.engine.pools}
    assert not [w for w in own.warnings if "changes nothing" in w]
    result = CliRunner().invoke(
        app, ["plan", "--emit", "vllm", "--disk-budget", "100GiB", "--max-seq-len", "8192"]
    )
    assert result.exit_code == 0 and "warning: --disk-budget 100.00 GiB changes nothing" in (
        result.stderr
    )


def test_sglang_sliding_pool_never_outgrows_the_full_pool() -> None:
    # Llama-4-Scout TP8 bf16: 1 KV head of 128 per rank, 512 B per layer and token; 12
    # full layers (6,144 B) and 36 chunked ones (18,432 B). 256 requests' 8,192-token
    # chunks need more sliding tokens than 8 GiB leaves full ones, and SGLang refuses
    # --swa-full-tokens-ratio above 1 (arg_groups/kv_cache_hook.py, 0.5.23 wheel:
    # "--swa-full-tokens-ratio should be in range (0, 1.0]"): ratio 1, both pools
    # 8,589,934,592 // 24,576 = 349,525 -> (349,525 - 32) // 32 x 32 = 349,472 tokens
    p = make(
        "sglang",
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        spec="none",
        kv_budget="8GiB",
        tp=8,
        tokens_per_block=32,
        max_seq_len=None,
    )
    e = predicted(p)
    assert e["swa_full_tokens_ratio"] == 1.0
    assert e["max_total_num_tokens"] == e["swa_tokens"] == 349_472
    assert e["device_bytes"] == (349_472 + 32) * 24_576
    assert any("--swa-full-tokens-ratio at its maximum" in w for w in p.warnings)
