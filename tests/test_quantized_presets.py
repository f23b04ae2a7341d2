"""Quantized presets of the last formats: ModelOpt NVFP4 and compressed-tensors FP8."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvbudget import count_params, load_model, plan, weights_bytes
from kvbudget.model import _preset_dir


def test_nvfp4_qwen3_32b_by_hand() -> None:
    """NVFP4 stores each quantized linear weight in 4 bits plus one fp8 scale per 16
    values plus two fp32 scalars (weight_scale_2, input_scale); lm_head is excluded."""
    nvfp4 = weights_bytes(load_model("nvidia/Qwen3-32B-NVFP4"))
    bf16 = weights_bytes(load_model("Qwen/Qwen3-32B")).total_bytes
    assert nvfp4.quantization == "nvfp4"
    # linear weights per layer: q 5120 x 8192, k and v 5120 x 1024, o 8192 x 5120, and
    # gate, up, down 3 x 5120 x 25600; 64 layers, 7 linears each
    attn = 5120 * 8192 + 2 * 5120 * 1024 + 8192 * 5120
    w = 64 * (attn + 3 * 5120 * 25600)
    assert w == 31_205_621_760
    assert nvfp4.total_bytes == bf16 - 2 * w + w // 2 + w // 16 + 64 * 7 * 8
    assert nvfp4.total_bytes == 20_666_168_832
    assert count_params(load_model("nvidia/Qwen3-32B-NVFP4")).total == 32_762_123_264


def test_a_modelopt_directory_reads_hf_quant_config(tmp_path: Path) -> None:
    """config.json without quantization_config + hf_quant_config.json beside it (as
    ModelOpt writes the checkpoint) plans as the preset that merges them."""
    preset = json.loads((_preset_dir() / "nvidia--Qwen3-32B-NVFP4.json").read_text())
    quant = preset.pop("quantization_config")
    (tmp_path / "config.json").write_text(json.dumps(preset))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant))
    from_dir = weights_bytes(load_model(tmp_path))
    assert from_dir == weights_bytes(load_model("nvidia/Qwen3-32B-NVFP4"))
    # the flat layout newer ModelOpt exports embed in config.json gives the same bytes
    flat = {"quant_method": "modelopt", **quant["quantization"]}
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    (tmp_path / "config.json").write_text(json.dumps({**preset, "quantization_config": flat}))
    assert weights_bytes(load_model(tmp_path)).total_bytes == from_dir.total_bytes


def test_compressed_tensors_fp8_llama_within_1pct_of_the_published_shards() -> None:
    m = load_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8")
    w = weights_bytes(m)
    assert w.quantization == "compressed-tensors-fp8-tensor"
    # HF shows the two shards as 5 GB + 4.08 GB (decimal, rounded) = 9.08 GB
    assert abs(w.total_bytes - 9.08e9) / 9.08e9 < 0.01
    assert w.total_bytes == 9_081_201_536
    p = plan(m, kv_budget="8GiB", max_seq_len=8192)  # plans without --weights-bytes
    assert p.budget.gpu_bytes == 8 * 1024**3


def test_a_modelopt_checkpoint_with_fp8_kv_runs_its_kv_in_fp8_under_auto() -> None:
    """kv_cache_quant_algo FP8: vLLM resolves --kv-cache-dtype auto to fp8 for it."""
    p = plan("nvidia/Qwen3-32B-NVFP4", kv_budget="8GiB", max_seq_len=8192)
    assert p.kv_dtype == "fp8"
    # 64 layers x 2 (K, V) x 8 KV heads x 128 x 1 B = 131,072 B per token (bf16: 262,144)
    assert p.managers[0].slope_bytes_per_token == 131_072
    assert plan("Qwen/Qwen3-32B", kv_budget="8GiB", max_seq_len=8192).kv_dtype == "bf16"
    given = plan("nvidia/Qwen3-32B-NVFP4", kv_budget="8GiB", max_seq_len=8192, kv_dtype="bf16")
    assert given.kv_dtype == "bf16"  # a given dtype wins
