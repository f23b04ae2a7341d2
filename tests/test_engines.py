"""Engine settings: unit conversions and each engine's budget semantics, with exact values.

Budgets are given with ``kv_budget``/``host_budget`` so every number follows from the
cache geometry; the arithmetic is in the comments. The engine facts themselves (knob
names, units, scopes) are documented with their sources in ``kvbudget.engines``.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvbudget import InvalidArgumentError
from kvbudget.cli import app
from kvbudget.dtypes import KV_DTYPE_NAMES
from kvbudget.engines import ENGINES, _gib, _whole_gb, emit
from kvbudget.plan_types import Plan
from kvbudget.planner import plan

GIB = 1024**3
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
LLAMA1B = "meta-llama/Llama-3.2-1B-Instruct"
EAGLE8B = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DSV3 = "deepseek-ai/DeepSeek-V3"
GPT_OSS = "openai/gpt-oss-120b"
SPEC_MODES = {"eagle3", "mtp", "draft-target", "ngram"}


def make(**kwargs: object) -> Plan:
    args: dict[str, object] = {"kv_budget": "40GiB", "max_seq_len": 8192}
    args.update(kwargs)
    return plan(**args)  # type: ignore[arg-type]


def lines(text: str) -> list[str]:
    """The emitted lines without shell continuations."""
    return [line.removesuffix(" \\").strip() for line in text.splitlines()]


def flag(text: str, name: str) -> str | None:
    """The value after ``name`` on its own argument line, or None when absent."""
    for line in lines(text):
        if line.startswith(name + " "):
            return line[len(name) + 1 :]
    return None


def yaml_value(text: str, key: str) -> str | None:
    """The value of an indented ``key:`` line in the emitted YAML (comments dropped)."""
    for line in text.splitlines():
        body = line.split("#", 1)[0].strip()
        if body.startswith(key + ":"):
            return body[len(key) + 1 :].strip()
    return None


def spec_config(text: str) -> dict[str, object]:
    raw = flag(text, "--speculative-config")
    assert raw is not None and raw.startswith("'") and raw.endswith("'")
    data: dict[str, object] = json.loads(raw[1:-1])
    return data


# ---------------------------------------------------------------- unit conversions


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (64 * GIB, "64"),  # 68719476736 B = 64 GiB exactly
        (1610612736, "1.5"),  # 1.5 x 2^30
        (1342177280, "1.25"),  # 1.25 x 2^30
        (GIB - 1, "0.999"),  # (2^30 - 1) x 1000 // 2^30 = 999 thousandths
        (10 * GIB + 1024**2, "10"),  # + 1 MiB = 0.00098 GiB, below one thousandth
        (536870912, "0.5"),  # 2^29
        (1, "0"),
        (0, "0"),
    ],
)
def test_gib_rounds_down_to_thousandths(num_bytes: int, expected: str) -> None:
    assert _gib(num_bytes) == expected


@pytest.mark.parametrize(
    ("num_bytes", "expected"),
    [
        (16 * GIB, 17),  # 17179869184 B = 17.18 GB -> 17
        (64 * GIB, 68),  # 68719476736 B = 68.72 GB -> 68
        (10**9, 1),
        (10**9 - 1, 0),
        (66637068351, 66),
    ],
)
def test_whole_gb_is_decimal_and_rounds_down(num_bytes: int, expected: int) -> None:
    assert _whole_gb(num_bytes) == expected


# ---------------------------------------------------------------- the facts table


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_engine_names_every_spec_mode_and_dtype(engine: str) -> None:
    facts = ENGINES[engine]
    assert set(facts.spec_names) == SPEC_MODES
    assert set(facts.kv_dtype_names) == set(KV_DTYPE_NAMES) - {"auto"}


def test_facts_units_and_scopes() -> None:
    trt, vllm, sgl = ENGINES["trtllm"], ENGINES["vllm"], ENGINES["sglang"]
    assert (trt.host_unit, trt.host_covers, trt.host_over_ranks) == ("bytes", "all", False)
    assert (vllm.host_unit, vllm.host_covers, vllm.host_over_ranks) == ("GiB", "all", True)
    assert (sgl.host_covers, sgl.host_over_ranks) == ("target", False)
    assert sgl.host_unit.startswith("GB (decimal")
    assert trt.block_power_of_two and not vllm.block_power_of_two
    assert not sgl.block_power_of_two
    # no engine has a plain int8 KV cache
    assert all(f.kv_dtype_names["int8"] is None for f in ENGINES.values())


# ---------------------------------------------------------------- TensorRT-LLM


def test_trtllm_budgets_are_per_rank_totals_of_all_managers() -> None:
    p = make(host_budget="64GiB")
    out = emit(p, "trtllm")
    # GPU: target 41648167719 + draft 1301505241 = 42949672960 = 40 GiB
    assert yaml_value(out, "max_gpu_total_bytes") == "42949672960"
    # host: target 66637068351 + draft 2082408385 = 68719476736 = 64 GiB
    assert yaml_value(out, "host_cache_size") == "68719476736"
    # both managers hold 9929 blocks x 32 tokens = 317728 tokens
    assert yaml_value(out, "max_tokens") == "317728"
    assert yaml_value(out, "tokens_per_block") == "32"
    assert yaml_value(out, "dtype") == "auto"  # bf16 = the checkpoint's dtype
    assert yaml_value(out, "enable_block_reuse") == "true"
    assert yaml_value(out, "tensor_parallel_size") == "1"
    assert yaml_value(out, "max_seq_len") == "8192"
    assert "split by bytes per token" in out


def test_trtllm_eagle3_uses_speculative_model() -> None:
    out = emit(make(), "trtllm")
    assert yaml_value(out, "decoding_type") == "Eagle3"
    assert yaml_value(out, "max_draft_len") == "3"
    assert yaml_value(out, "speculative_model") == EAGLE8B
    assert "speculative_model_dir" not in out


def test_trtllm_mtp_sets_max_draft_len_not_num_nextn_predict_layers() -> None:
    out = emit(make(target=DSV3, spec="mtp", tp=8, max_draft_len=2), "trtllm")
    assert yaml_value(out, "decoding_type") == "MTP"
    assert yaml_value(out, "max_draft_len") == "2"
    assert yaml_value(out, "num_nextn_predict_layers") is None
    assert yaml_value(out, "speculative_model") is None
    # one manager (MTP layers inside the target's): 40 GiB on each of 8 ranks
    assert yaml_value(out, "max_gpu_total_bytes") == str(40 * GIB)
    assert "split by bytes per token" not in out


def test_trtllm_draft_target_and_ngram_names() -> None:
    dt = emit(make(spec="draft-target", draft=LLAMA1B), "trtllm")
    assert yaml_value(dt, "decoding_type") == "Draft_Target"
    assert yaml_value(dt, "speculative_model") == LLAMA1B
    # target 34359738368 (32 GiB) + draft 8589934592 (8 GiB): slopes 131072 : 32768 = 4 : 1
    assert yaml_value(dt, "max_gpu_total_bytes") == "42949672960"
    ng = emit(make(spec="ngram"), "trtllm")
    assert yaml_value(ng, "decoding_type") == "NGram"
    assert yaml_value(ng, "speculative_model") is None
    assert "speculative_config" not in emit(make(spec="none"), "trtllm")


def test_trtllm_leaves_out_max_tokens_for_sliding_window_models() -> None:
    out = emit(make(target=GPT_OSS, spec="none", kv_dtype="bf16"), "trtllm")
    assert yaml_value(out, "max_tokens") is None
    assert yaml_value(out, "max_gpu_total_bytes") == str(40 * GIB)


def test_trtllm_needs_power_of_two_blocks() -> None:
    p = make(tokens_per_block=48)
    with pytest.raises(InvalidArgumentError, match="power of two"):
        emit(p, "trtllm")
    assert flag(emit(p, "vllm"), "--block-size") == "48"
    assert flag(emit(p, "sglang"), "--page-size") == "48"


# ---------------------------------------------------------------- vLLM


def test_vllm_gpu_bytes_per_gpu_for_all_layers() -> None:
    out = emit(make(host_budget=0), "vllm")
    # target 41648167719 + draft 1301505241 = 42949672960
    assert flag(out, "--kv-cache-memory-bytes") == "42949672960"
    assert flag(out, "--block-size") == "32"
    assert flag(out, "--kv-cache-dtype") == "auto"
    assert flag(out, "--max-num-seqs") == "256"
    assert flag(out, "--kv-offloading-size") is None  # no host budget
    assert "left unset" not in out


def test_vllm_offloading_size_is_gib_over_all_tp_and_pp_ranks() -> None:
    p = make(tp=2, pp=2, host_budget="10GiB")
    # last stage: target 10105805403 + draft 631612837 = 10737418240 B per rank
    assert sum(m.host.bytes for m in p.managers) == 10 * GIB
    out = emit(p, "vllm")
    # 10 GiB per rank x (2 TP x 2 PP) = 40 GiB
    assert flag(out, "--kv-offloading-size") == "40"
    assert flag(out, "--kv-offloading-backend") == "native"


def test_vllm_offloading_size_keeps_fractions() -> None:
    # 1.5 GiB per rank x 1 rank = 1.5 (a float is accepted)
    out = emit(make(spec="none", host_budget="1536MiB"), "vllm")
    assert flag(out, "--kv-offloading-size") == "1.5"


def test_vllm_tiny_host_budget_leaves_offloading_off() -> None:
    # 1 KiB: target 993 B + draft 31 B = 1024 B; 1024 x 1000 // 2^30 = 0 thousandths
    out = emit(make(host_budget="1KiB"), "vllm")
    assert flag(out, "--kv-offloading-size") is None
    assert flag(out, "--kv-offloading-backend") is None
    assert "left unset" in out


def test_vllm_speculative_config_per_mode() -> None:
    assert spec_config(emit(make(), "vllm")) == {
        "method": "eagle3",
        "num_speculative_tokens": 3,
        "model": EAGLE8B,
    }
    assert spec_config(emit(make(target=DSV3, spec="mtp", tp=8), "vllm")) == {
        "method": "mtp",
        "num_speculative_tokens": 3,
    }
    assert spec_config(emit(make(spec="draft-target", draft=LLAMA1B), "vllm")) == {
        "method": "draft_model",
        "num_speculative_tokens": 3,
        "model": LLAMA1B,
    }
    assert spec_config(emit(make(spec="ngram", max_draft_len=4), "vllm")) == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_max": 5,
        "prompt_lookup_min": 5,
    }
    assert flag(emit(make(spec="none"), "vllm"), "--speculative-config") is None


# ---------------------------------------------------------------- SGLang


def test_sglang_hicache_size_is_whole_gb_for_the_target_pool() -> None:
    p = make(host_budget="64GiB")
    target = p.manager("target")
    assert target is not None
    # 64 GiB x 131072 / (131072 + 4096) = 68719476736 x 32/33 -> 66637068351 B
    assert target.host.bytes == 66637068351
    out = emit(p, "sglang")
    # 66637068351 B // 10^9 = 66 GB (the draft's 2082408385 B are added by SGLang)
    assert flag(out, "--hicache-size") == "66"
    assert "--enable-hierarchical-cache" in lines(out)
    assert "same token count on top" in out


def test_sglang_hicache_size_leaves_out_a_large_draft_share() -> None:
    p = make(spec="draft-target", draft=LLAMA1B, host_budget="10GiB")
    # target 8589934592 (8 GiB = 4/5 of 10 GiB) -> 8 GB; the total 10 GiB would say 10
    out = emit(p, "sglang")
    assert flag(out, "--hicache-size") == "8"


def test_sglang_hicache_per_rank_with_tp() -> None:
    p = make(tp=4, host_budget="16GiB")
    # per rank: 16 GiB x 32/33 = 17179869184 x 32/33 -> 16659267087 B -> 16 GB
    target = p.manager("target")
    assert target is not None and target.host.bytes // 10**9 == 16
    assert flag(emit(p, "sglang"), "--hicache-size") == "16"


def test_sglang_host_under_one_gb_leaves_hicache_off() -> None:
    # 512 MiB = 536870912 B -> 0 GB, and --hicache-size 0 would fall back to the ratio
    out = emit(make(spec="ngram", host_budget="512MiB"), "sglang")
    assert flag(out, "--hicache-size") is None
    assert "--enable-hierarchical-cache" not in lines(out)
    assert "HiCache is left off" in out


def test_sglang_tokens_and_spec_flags() -> None:
    out = emit(make(max_draft_len=5), "sglang")
    assert flag(out, "--max-total-tokens") == str(make(max_draft_len=5).capacity.tokens)
    assert flag(out, "--speculative-algorithm") == "EAGLE3"
    assert flag(out, "--speculative-draft-model-path") == EAGLE8B
    # topk 1: num-draft-tokens = num-steps + 1 = 5 + 1
    assert flag(out, "--speculative-num-steps") == "5"
    assert flag(out, "--speculative-eagle-topk") == "1"
    assert flag(out, "--speculative-num-draft-tokens") == "6"
    assert flag(out, "--tp-size") == "1" and flag(out, "--pp-size") == "1"


def test_sglang_other_spec_modes() -> None:
    mtp = emit(make(target=DSV3, spec="mtp", tp=8), "sglang")
    assert flag(mtp, "--speculative-algorithm") == "NEXTN"
    assert flag(mtp, "--speculative-draft-model-path") is None
    dt = emit(make(spec="draft-target", draft=LLAMA1B), "sglang")
    assert flag(dt, "--speculative-algorithm") == "STANDALONE"
    assert flag(dt, "--speculative-draft-model-path") == LLAMA1B
    ng = emit(make(spec="ngram"), "sglang")
    assert flag(ng, "--speculative-algorithm") == "NGRAM"
    assert flag(ng, "--speculative-num-steps") is None
    assert flag(ng, "--speculative-num-draft-tokens") == "4"  # 3 drafts + 1
    assert flag(emit(make(spec="none"), "sglang"), "--speculative-algorithm") is None


# ---------------------------------------------------------------- dtypes and errors


@pytest.mark.parametrize(
    ("kv_dtype", "trtllm", "vllm", "sglang"),
    [
        ("fp8", "fp8", "fp8", "fp8_e4m3"),
        ("nvfp4", "nvfp4", "nvfp4", "nvfp4"),
        ("bf16", "auto", "auto", "auto"),
        ("fp16", "auto", "auto", "auto"),
    ],
)
def test_kv_dtype_names(kv_dtype: str, trtllm: str, vllm: str, sglang: str) -> None:
    p = make(kv_dtype=kv_dtype)
    assert yaml_value(emit(p, "trtllm"), "dtype") == trtllm
    assert flag(emit(p, "vllm"), "--kv-cache-dtype") == vllm
    assert flag(emit(p, "sglang"), "--kv-cache-dtype") == sglang
    if trtllm == "auto":
        assert f"the plan assumes {kv_dtype}" in emit(p, "vllm")


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_int8_kv_has_no_engine_setting(engine: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--kv-dtype one of"):
        emit(make(kv_dtype="int8"), engine)


def test_int8_emit_is_one_line_error_on_the_cli() -> None:
    result = CliRunner().invoke(
        app, ["plan", "--kv-budget", "40GiB", "--kv-dtype", "int8", "--emit", "sglang"]
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: SGLang has no int8 KV cache")
    assert len(result.stderr.strip().splitlines()) == 1


def test_engine_names() -> None:
    p = make()
    assert emit(p, "VLLM") == emit(p, "vllm")
    with pytest.raises(InvalidArgumentError, match="unknown engine 'tgi'"):
        emit(p, "tgi")


def test_pp_stages_with_different_budgets_emit_the_smallest() -> None:
    # Gemma-3 at pp=2: stage 0 holds the vision tower and the embeddings, the last stage
    # the tied lm_head copy; stage 0 carries more weights, so its KV budget is smaller
    p = plan(
        "google/gemma-3-27b-it",
        spec="ngram",
        pp=2,
        host_budget=0,
        max_seq_len=8192,
        max_batch_size=8,
    )
    first, last = p.stages
    assert first.weights_bytes is not None and last.weights_bytes is not None
    assert first.weights_bytes > last.weights_bytes
    # (memory - weights - reserve) x 0.9 per stage, so the difference is 0.9 x the weights'
    assert first.gpu_bytes < last.gpu_bytes == p.budget.gpu_bytes
    # a per-GPU knob applied to every stage must fit the smallest stage budget
    vllm = emit(p, "vllm")
    assert f"--kv-cache-memory-bytes {first.gpu_bytes} " in vllm
    assert "PP stages differ" in vllm
    assert f"max_gpu_total_bytes: {first.gpu_bytes}\n" in emit(p, "trtllm")


def test_one_stage_emits_the_managers_bytes() -> None:
    p = plan(kv_budget="40GiB", host_budget=0, max_seq_len=8192)
    # 40 GiB = 42949672960 B, split between target and draft, emitted whole
    assert "--kv-cache-memory-bytes 42949672960 " in emit(p, "vllm")
    assert "PP stages differ" not in emit(p, "vllm")
