"""Multi-layer MTP drafts: one KV layer per MTP layer, each counted and cached.

vLLM 0.33.0 builds every MTP layer a checkpoint declares (``deepseek_mtp.py``:
``num_mtp_layers = config.num_nextn_predict_layers``; ``glm4_moe_mtp.py`` the same),
each with its own KV cache layer, and refuses ``num_speculative_tokens`` above the depth
that is not a multiple of it (``SpeculativeConfig``, config/speculative.py). The configs
are the presets with a deeper MTP stack written over them; the vLLM figures are also what
vLLM 0.33.0's own code gives (fidelity harness ``family/deepseek-v3-mtp3``,
``family/glm-4.5-air-mtp2``).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from kvbudget import count_params, load_model, plan
from kvbudget.errors import InvalidArgumentError
from kvbudget.layers import AttentionLayer, MLALayer

GIB = 1024**3


def deeper(tmp_path: Path, preset: str, depth: int) -> str:
    name = preset.replace("/", "--", 1) + ".json"
    cfg = json.loads((resources.files("kvbudget") / "data" / "models" / name).read_text("utf-8"))
    cfg["num_nextn_predict_layers"] = depth
    (tmp_path / "config.json").write_text(json.dumps(cfg), "utf-8")
    return str(tmp_path)


def test_deepseek_three_mtp_layers(tmp_path: Path) -> None:
    path = deeper(tmp_path, "deepseek-ai/DeepSeek-V3", 3)
    m = load_model(path)
    assert m.mtp_layers == tuple(
        MLALayer(index=61 + j, kv_lora_rank=512, qk_rope_head_dim=64) for j in range(3)
    )
    # weights: three whole MTP layers, each what the one-layer preset ships
    one = count_params(load_model("deepseek-ai/DeepSeek-V3")).mtp
    assert count_params(m).mtp == 3 * one
    p = plan(
        path, spec="mtp", engine="vllm", tp=8, kv_budget="40GiB", host_budget=0,
        max_seq_len=32768, tokens_per_block=16, max_draft_len=3,
    )  # fmt: skip
    assert p.engine is not None
    e = dict(p.engine.detail)
    # latent 576 x 2 B = 1,152 B per token per layer; 61 + 3 layers in one MLA group
    assert [(g["kind"], g["layers"], g["draft_layers"]) for g in e["kv_cache_groups"]] == [
        ("mla", 64, 3)
    ]
    assert e["num_gpu_blocks"] == 40 * GIB // (64 * 16 * 1152) == 36_408
    # 36,408 / 2,048 blocks per request x 32,768 (vLLM 0.33.0 logs 582,528)
    assert e["gpu_kv_cache_tokens"] == int(36_408 / 2048 * 32768) == 582_528


def test_glm_two_mtp_layers_and_vllms_divisibility_rule(tmp_path: Path) -> None:
    path = deeper(tmp_path, "zai-org/GLM-4.5-Air", 2)
    m = load_model(path)
    assert m.mtp_layers == tuple(
        AttentionLayer(index=46 + j, num_kv_heads=8, head_dim=128) for j in range(2)
    )
    common = {"spec": "mtp", "kv_budget": "40GiB", "host_budget": 0, "max_seq_len": 32768}
    for k in (1, 2, 4):  # at most the depth, or a multiple of it
        plan(path, engine="vllm", max_draft_len=k, **common)
    with pytest.raises(InvalidArgumentError, match="divisible by n_predict=2"):
        plan(path, engine="vllm", max_draft_len=3, **common)
    # the kvbudget cache has no such rule: 46 + 2 layers x 2 x 8 x 128 x 2 B per token
    (target,) = plan(path, engine="kvbudget", max_draft_len=3, max_batch_size=8, **common).managers
    assert target.slope_bytes_per_token == 48 * 4096
