"""SGLang 0.5.23's own default --mem-fraction-static derives the budget when no knob is given.

Hand arithmetic from the SGLang 0.5.23 wheel, ``srt/arg_groups/memory_hook.py``
``handle_gpu_memory_settings`` (GPU tiers, lines 88-170; the ``max_running_requests`` cap,
172-179; ``reserved_mem``, 296-318; ``round(..., 3)``, 324-328; the VLM factor, 331-337)
and ``reserve_for_graph_mb`` (decode ``max_bs x 2``, 357-361; DP attention 363-371;
prefill ``len(bs) x 8`` or 1,536 for MLA, 373-381), the prefill graph sizes of
``cuda_graph_hook.py`` ``generate_prefill_cuda_graph_batch_sizes`` (58 up to 8,192:
8 + 14 + 8 + 8 + 12 + 8), and ``utils/common.py`` ``get_nvgpu_memory_capacity``
(nvidia-smi's memory.total in MiB: gpus.csv ``driver_total_mib``). kvbudget always emits
``--chunked-prefill-size 8192`` and ``--max-running-requests 256`` (its defaults).
benchmarks/fidelity/sglang ``--cases memdefault`` runs SGLang's own resolution on these.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from typer.testing import CliRunner

import kvbudget
from kvbudget.cli import app
from kvbudget.engines import sglang_memory
from kvbudget.errors import InvalidArgumentError

GIB = 1 << 30
H100_CUDA_TOTAL = 85_045_477_376  # kvbudget's H100 preset (gpus.py, measured)


def _fraction(**kwargs: object) -> float:
    plan = kvbudget.plan(engine="sglang", **kwargs)  # type: ignore[arg-type]
    assert plan.budget.memory_rule == "mem_fraction_static"
    assert plan.budget.memory_fraction is not None
    return plan.budget.memory_fraction


def test_h100_tp1() -> None:
    # 81,559 MiB < 90 GiB: max_bs 256 (TP < 4), capped at 256 requests
    # reserved = 512 + 8192 x 1.5 + 1 x 1 / 8 x 1024 + 256 x 2 + 58 x 8
    #          = 512 + 12288 + 128 + 512 + 464 = 13,904 (above the 10,240 floor)
    # round((81559 - 13904) / 81559, 3) = round(0.82952, 3) = 0.83
    assert _fraction(target="Qwen/Qwen3-8B", gpu="H100") == 0.83
    # speculation does not enter the heuristic: the EAGLE3 deployment gets the same
    assert (
        _fraction(
            target="meta-llama/Llama-3.1-8B-Instruct",
            draft="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            spec="eagle3",
            gpu="H100",
        )
        == 0.83
    )


def test_gpu_classes() -> None:
    # L4, 23,034 MiB < 35 GiB: max_bs 48; no floor below 60 GiB
    # 512 + 12288 + 128 + 96 + 464 = 13,488; round(9546 / 23034, 3) = round(0.41443) = 0.414
    assert _fraction(target="Qwen/Qwen3-0.6B", gpu="L4") == 0.414
    # L40S, 46,068 MiB < 60 GiB: max_bs 32; 512 + 12288 + 128 + 64 + 464 = 13,456
    # round(32612 / 46068, 3) = round(0.70791) = 0.708
    assert _fraction(target="Qwen/Qwen3-8B", gpu="L40S") == 0.708
    # H200, 143,771 MiB < 160 GiB: max_bs 256; 13,904; round(129867 / 143771) = 0.903
    assert _fraction(target="Qwen/Qwen3-8B", gpu="H200") == 0.903
    # B200, 183,359 MiB: max_bs 512 capped at 256; 13,904; round(169455 / 183359) = 0.924
    assert _fraction(target="Qwen/Qwen3-32B", gpu="B200") == 0.924


def test_tp_pp_and_dp_attention() -> None:
    # H100 TP 4: max_bs 512 capped at 256; 512 + 12288 + 4/8 x 1024 + 512 + 464 = 14,288
    # round(67271 / 81559, 3) = round(0.82481) = 0.825
    assert _fraction(target="Qwen/Qwen3-32B", gpu="H100", tp=4) == 0.825
    # TP 2 x PP 2: no prefill graph under PP (apply_cuda_graph_compatibility)
    # 512 + 12288 + 4/8 x 1024 + 512 = 13,824; round(67735 / 81559) = round(0.83050) = 0.831
    assert _fraction(target="Qwen/Qwen3-32B", gpu="H100", tp=2, pp=2) == 0.831
    # DeepSeek-V3 (MLA) TP 8, DP attention 8 on H200: 512 + 12288 + 1024 + 256 x 2
    # + 256 x 8 x 3 + 1536 = 22,016; round(121755 / 143771, 3) = round(0.84687) = 0.847
    assert (
        _fraction(target="deepseek-ai/DeepSeek-V3", gpu="H200", tp=8, dp=8, dp_attention=True)
        == 0.847
    )


def test_multimodal() -> None:
    # Gemma-3: multimodal off by default (ModelConfig: Gemma3ForConditionalGeneration)
    assert _fraction(target="google/gemma-3-27b-it", gpu="H200") == 0.903
    # Qwen3.5: multimodal, breakable prefill graph kept; its vision_config has depth 27
    # (not num_hidden_layers: 24 by default) and hidden_size 1152:
    # ratio 24 x 1152^2 / (24 x 1024^2) = 1.265625; factor 0.95 x (1 - 0.1 x 0.265625)
    factor = 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (1.265625 - 1.0)))
    assert _fraction(target="Qwen/Qwen3.5-27B", gpu="H200") == 0.903 * factor
    assert 0.903 * factor == 0.835063359375


def test_budget_bytes_follow() -> None:
    # SGLang profiles free after weights - free before weights x (1 - F)
    # (KVCacheConfigurator._profile_available_bytes): kv = floor((M - pre-load) x F) -
    # weights - the buffers beside them (budget.py GpuBudgetRule.kv_bytes; the 2.5 GiB
    # pre-load default and the 512 MiB margin of engines/sglang.py)
    plan = kvbudget.plan("Qwen/Qwen3-8B", engine="sglang", gpu="H100")
    assert plan.budget.weights_bytes is not None
    weights = plan.budget.weights_bytes
    pre_load, margin = 5 * GIB // 2, 512 * 1024**2
    expected = int((H100_CUDA_TOTAL - pre_load) * Fraction("0.83")) - weights - margin
    assert plan.budget.gpu_bytes == expected
    # so the emitted --mem-fraction-static is SGLang's own 0.83, nothing more
    assert plan.engine.settings["--mem-fraction-static"] == "0.830"
    # the same budget under the old 0.9 of free memory is not what SGLang would pick
    assert "(the engine's default)" not in plan.budget.gpu_source


def test_cli_text() -> None:
    result = CliRunner().invoke(
        app,
        ["plan", "--target", "Qwen/Qwen3-8B", "--engine", "sglang", "--gpu", "H100"],
        env={"COLUMNS": "400", "NO_COLOR": "1"},
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert (
        "x 0.83 (SGLang's default for NVIDIA H100 SXM 80GB at tp 1, pp 1: round(1 - 13,904 "
        "MiB reserved / 81,559 MiB (nvidia-smi's total), 3) = 0.83; reserved = 512 + "
        "chunked prefill 8,192 x 1.5 + tp x pp / 8 x 1,024 + decode graph max_bs 256 x 2 "
        "+ 58 prefill graph sizes x 8, at least 10,240 MiB above 60 GiB)"
    ) in text


def test_user_knob_wins() -> None:
    given = kvbudget.plan("Qwen/Qwen3-8B", engine="sglang", gpu="H100", mem_fraction_static="0.88")
    assert given.budget.memory_fraction == 0.88
    assert "SGLang's default" not in given.budget.gpu_source
    # the knob given is the knob SGLang runs with: the budget is what SGLang profiles
    # under it, so the plan emits it unchanged (it emitted 0.913 for 0.88 when the budget
    # took 0.88 of (M - 256 MiB runtime) and the emitted fraction added the 2.5 GiB
    # pre-load and the 512 MiB margin back)
    assert given.engine.settings["--mem-fraction-static"] == "0.880"
    other = kvbudget.plan("Qwen/Qwen3-8B", engine="sglang", gpu="H100", memory_fraction="0.9")
    assert other.budget.memory_rule == "memory_fraction"
    assert other.budget.memory_fraction == 0.9
    budget = kvbudget.plan("Qwen/Qwen3-8B", engine="sglang", gpu="H100", kv_budget=8 * GIB)
    assert budget.budget.gpu_bytes == 8 * GIB
    assert budget.budget.gpu_source == "given (--kv-budget), per rank"


def test_other_engines_keep_their_fixed_default() -> None:
    plan = kvbudget.plan("Qwen/Qwen3-8B", engine="vllm", gpu="H100")
    assert plan.budget.memory_rule == "gpu_memory_utilization"
    assert "(the engine's default)" in plan.budget.gpu_source


def test_gpu_memory_and_refusal() -> None:
    # --gpu-memory: the given bytes in MiB stand for nvidia-smi's figure; 80 GiB = 81,920
    # MiB: 13,904 reserved, round(68016 / 81920, 3) = round(0.83027) = 0.83
    assert _fraction(target="Qwen/Qwen3-8B", gpu_memory=80 * GIB) == 0.83
    # 12 GiB (< 20 GiB): max_bs 8; 512 + 12288 + 128 + 16 + 464 = 13,408 > 12,288 MiB
    with pytest.raises(InvalidArgumentError, match=r"would be -0\.091.*13,408 MiB"):
        kvbudget.plan("Qwen/Qwen3-0.6B", engine="sglang", gpu_memory=12 * GIB)


def test_prefill_capture_sizes() -> None:
    assert sglang_memory.prefill_capture_sizes(8192) == 58
    assert sglang_memory.prefill_capture_sizes(4096) == 50  # 8 + 14 + 8 + 8 + 12
    assert sglang_memory.prefill_capture_sizes(3) == 0


def test_multimodal_rule() -> None:
    # ModelConfig.is_multimodal (configs/model_config.py): a text_config wrapper is
    # multimodal unless its architecture has multimodal off or it is language-model only
    wrapper = {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {}}
    assert sglang_memory.is_multimodal(wrapper)
    assert not sglang_memory.is_multimodal({**wrapper, "language_model_only": True})
    gemma3 = {"architectures": ["Gemma3ForConditionalGeneration"], "text_config": {}}
    assert not sglang_memory.is_multimodal(gemma3)
    assert not sglang_memory.is_multimodal({"architectures": ["Qwen3ForCausalLM"]})
    # Kimi K3: SGLang's KimiK3VisionConfig (27 layers of 1,024) without a vision_config:
    # ratio 27 / 24 = 1.125, factor 0.95 x (1 - 0.0125) = 0.938125
    assert sglang_memory.vlm_factor({"model_type": "kimi_k3"}) == 0.95 * (1.0 - 0.1 * 0.125)
    assert sglang_memory.vlm_factor({"model_type": "qwen3"}) is None


def test_a_hybrid_budget_counts_the_state_at_its_reservation() -> None:
    """Qwen3.5-35B-A3B with MTP at TP 2 on an H100: SGLang takes the Mamba state pool out
    of its profile at the reservation (``_handle_max_mamba_cache``), which is more than
    MambaPool allocates for it here; the pools are sized beside the reservation, so what
    SGLang must profile stays within the budget derived from its own fraction (0.76570...,
    the vision factor leaves it unrounded) and the emitted flag is that fraction rounded
    up to 3 decimals, 0.766 (it was 0.767: the profile exceeded the budget by the
    reservation's excess)."""
    p = kvbudget.plan("Qwen/Qwen3.5-35B-A3B", spec="mtp", engine="sglang", gpu="H100", tp=2)
    d = p.engine.detail
    assert d["mamba_reserved_bytes"] > d["mamba_state_bytes"]
    assert d["profiled_budget_bytes"] <= p.budget.gpu_bytes
    assert p.engine.settings["--mem-fraction-static"] == "0.766"


def test_a_fraction_too_small_for_the_weights_names_what_it_holds() -> None:
    """On an A10 SGLang's own 0.414 (tests/test_sweep.py) holds not even Llama-3.1-8B's
    14.96 GiB: the error names what mem_fraction_static covers (weights, the 512 MiB of
    buffers, the 2.5 GiB in use before load), not the non-KV estimate it leaves outside."""
    with pytest.raises(kvbudget.InfeasibleBudgetError) as err:
        kvbudget.plan("meta-llama/Llama-3.1-8B-Instruct", engine="sglang", gpu="A10", spec="none")
    text = str(err.value)
    assert "512.00 MiB of buffers" in text and "2.50 GiB in use before weights load" in text
    assert "mem_fraction_static=0.414" in text and "non-KV" not in text
