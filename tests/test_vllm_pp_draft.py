"""A drafter's embedding under vLLM's pipeline parallelism (kvbudget.engines.vllm_pp_draft),
and an MTP layer's stored copies of the main model's embedding and head in the weights.

vLLM 0.33.0 ``v1/worker/gpu/spec_decode/eagle/utils.py`` ``maybe_share_target_embed``:
at PP > 1 an MTP drafter (no ``has_own_embed_tokens``) keeps its own ``embed_tokens``
(MiniMax-M3's shares the one its target builds there for it: one copy either way), and
an EAGLE/EAGLE3/DFlash head with none of its own needs the target's on the last stage,
which a tied target has there, or one whose class builds it there for the head
(``spec_decode_needs_target_embed``: Llama, Qwen2/3, ...), else it raises RuntimeError.
The vLLM harness's PP cases run both functions (``draft_embedding`` compared on every
PP > 1 drafter case).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hub_server import safetensors_bytes

from kvbudget import EngineRefusedError, plan
from kvbudget.model import load_model
from kvbudget.weights import weights_bytes

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
DEEPSEEK = "deepseek-ai/DeepSeek-V3"
GPT_OSS = "openai/gpt-oss-120b"


def _vllm(target: Any, draft: Any, spec: str = "mtp", **kw: Any) -> Any:
    args: dict[str, Any] = {
        "engine": "vllm",
        "kv_budget": "40GiB",
        "host_budget": 0,
        "max_seq_len": 8192,
        **kw,
    }
    return plan(target, draft, spec=spec, **args)


def test_a_head_without_an_embedding_is_refused_at_pp_2() -> None:
    # gpt-oss does not tie and GptOssModel builds no embed_tokens for a drafter: its last
    # stage holds a PPMissingLayer, and the default EAGLE3 head stores none of its own
    assert _vllm(GPT_OSS, None, "eagle3").engine.detail["draft_embedding"] == "shared"
    with pytest.raises(EngineRefusedError) as caught:
        _vllm(GPT_OSS, None, "eagle3", pp=2)
    assert "needs the target input embedding, but it is unavailable on this PP stage" in str(
        caught.value
    )
    assert "use --pp 1" in str(caught.value)
    assert caught.value.plan is not None
    assert caught.value.plan.engine.detail["draft_embedding"] == "missing"


def test_an_untied_llama_builds_its_embedding_for_the_head_at_pp_2() -> None:
    """Llama-3.1-8B does not tie, but 0.33.0's LlamaModel builds embed_tokens on the last
    rank for an eagle3 drafter (spec_decode_needs_target_embed, llama.py:377-381): the
    head shares it, and the last stage holds 128,256 x 4,096 x 2 B = 1,050,673,152 B more
    than the weights count."""
    p = _vllm(LLAMA, EAGLE3, "eagle3", pp=2)
    assert p.engine.detail["draft_embedding"] == "shared"
    assert not p.engine.refusals
    (warning,) = [w for w in p.warnings if "embed_tokens" in w]
    assert "(1,050,673,152 B) more weights per last-stage rank" in warning


def test_a_tied_target_lends_the_head_its_embedding_at_pp_2() -> None:
    base = load_model(LLAMA)
    tied = replace(base, config=MappingProxyType({**base.config, "tie_word_embeddings": True}))
    p = _vllm(tied, EAGLE3, "eagle3", pp=2)
    assert p.engine.detail["draft_embedding"] == "shared"
    assert not p.engine.refusals


def test_a_head_that_stores_its_embedding_keeps_it(tmp_path: Path) -> None:
    cfg = dict(load_model(EAGLE3).raw_config)
    hidden, vocab = cfg["hidden_size"], cfg["vocab_size"]
    folder = tmp_path / "eagle3-with-embed"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "model.safetensors").write_bytes(
        safetensors_bytes({"embed_tokens.weight": ("F16", (vocab, hidden))})
    )
    p = _vllm(LLAMA, str(folder), "eagle3", pp=2)
    assert p.engine.detail["draft_embedding"] == "kept"
    assert not p.engine.refusals


def test_an_mtp_drafter_keeps_its_embedding_at_pp_2_and_the_plan_warns() -> None:
    one = _vllm(DEEPSEEK, None, "mtp", tp=8)
    assert one.engine.detail["draft_embedding"] == "shared"
    assert not [w for w in one.warnings if "embed_tokens" in w]
    two = _vllm(DEEPSEEK, None, "mtp", tp=8, pp=2)
    assert two.engine.detail["draft_embedding"] == "kept"
    # vocab 129,280 (a multiple of 64: no padding) / TP 8 = 16,160 rows x 7,168 x 2 B (bf16)
    kept = 16_160 * 7_168 * 2
    assert kept == 231_669_760
    (warning,) = [w for w in two.warnings if "MTP drafter's own embed_tokens" in w]
    assert f"({kept:,} B) more weights per last-stage rank" in warning


def test_the_kept_embedding_is_not_warned_for_given_weights() -> None:
    p = _vllm(DEEPSEEK, None, "mtp", tp=8, pp=2, weights_bytes="80GiB")
    assert not [w for w in p.warnings if "embed_tokens" in w]


def _tiny_deepseek(tmp_path: Path, extra: dict[str, tuple[str, tuple[int, ...]]]) -> Path:
    """A two-layer DeepSeek-V3 with one MTP layer whose safetensors headers list exactly
    the inventory's tensors (experts by index), plus ``extra``."""
    from kvbudget.architectures import model_inventory

    cfg = {
        **load_model(DEEPSEEK).raw_config,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "first_k_dense_replace": 1,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "n_group": 1,
        "topk_group": 1,
        "vocab_size": 256,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_attention_heads": 4,
        "q_lora_rank": 32,
        "kv_lora_rank": 16,
        "qk_nope_head_dim": 16,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16",
    }
    cfg.pop("quantization_config", None)
    folder = tmp_path / "tiny-deepseek"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for w in model_inventory(load_model(folder)):
        dtype = "F32" if w.fixed == "fp32" else "BF16"
        shape = (w.rows,) if w.cols == 1 else (w.rows, w.cols)
        names = (
            [w.name.replace(".experts.", f".experts.{e}.") for e in range(w.copies)]
            if w.copies > 1
            else [w.name]
        )
        for name in names:
            tensors[f"{name}.weight"] = (dtype, shape)
    tensors.update(extra)
    (folder / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    return folder


def test_an_mtp_layers_copies_of_the_embedding_and_head_are_not_held(tmp_path: Path) -> None:
    plain = load_model(_tiny_deepseek(tmp_path / "a", {}))
    copies = {
        # DeepSeek-V3's checkpoint stores both for its MTP layer 61 (1.85 GB each)
        "model.layers.2.embed_tokens.weight": ("BF16", (256, 64)),
        "model.layers.2.shared_head.head.weight": ("BF16", (256, 64)),
    }
    stored = load_model(_tiny_deepseek(tmp_path / "b", copies))
    assert stored.checkpoint is not None and plain.checkpoint is not None
    # the headers differ by the two copies: 2 x 256 x 64 x 2 B
    assert stored.checkpoint.total_bytes - plain.checkpoint.total_bytes == 65_536
    for tp in (1, 2):
        got = weights_bytes(stored, tp=tp, include_mtp=True)
        assert got.source == "safetensors headers" and got.other_bytes == 0
        assert got.total_bytes == weights_bytes(plain, tp=tp, include_mtp=True).total_bytes
        counted = weights_bytes(stored, tp=tp, include_mtp=True, source="inventory")
        assert got.total_bytes == counted.total_bytes  # every tensor matched, BF16 as counted


def test_the_dspark_drafter_finds_no_embedding_at_pp_2(tmp_path: Path) -> None:
    # DSparkDeepseekV4ForCausalLM declares has_own_embed_tokens = False and never loads
    # the embedding ("aliased from the target"); DeepSeek-V4.1 does not tie its own
    from family_configs import DEEPSEEK_V41_DSPARK, folder

    target = folder(tmp_path, DEEPSEEK_V41_DSPARK)
    one = plan(target, spec="dspark", engine="vllm", kv_budget="8GiB", host_budget=0)
    assert one.engine.detail["draft_embedding"] == "shared"
    with pytest.raises(EngineRefusedError, match="the DSpark drafter needs the target input"):
        plan(target, spec="dspark", engine="vllm", kv_budget="8GiB", host_budget=0, pp=2)


@pytest.mark.parametrize("engine", ["vllm@0.33.0", "vllm@0.34.0"])
def test_minimax_m3_mtp_shares_the_embedding_its_target_builds_at_pp_2(
    tmp_path: Path, engine: str
) -> None:
    """One embedding on the last stage, not two. 0.33.0: MiniMaxM3Model builds embed_tokens
    on the last rank for its MTP drafter (spec_decode_needs_target_embed(vllm_config,
    include_mtp=vllm_config.use_v2_model_runner), models/minimax_m3/nvidia/model.py:
    814-824) and MiniMaxM3MTP its own (mtp.py:117-121), flagged has_own_embed_tokens at
    PP > 1 (mtp.py:150-152) and loaded from the same model.embed_tokens.weight
    (mtp.py:213-214); maybe_share_target_embed finds the two torch.equal
    (v1/worker/gpu/spec_decode/eagle/utils.py:18-34) and deletes the MTP's (:74-77).
    0.34.0: the same (model.py:1430, mtp.py:143-154, 306-311). The lm_head is one copy:
    load_eagle_model points the MTP's at the target's (eagle/utils.py:107-119)."""
    from family_configs import MINIMAX_M3, folder

    path = folder(tmp_path, MINIMAX_M3)
    model = load_model(path)
    args = {"max_seq_len": 32768, "tokens_per_block": 128}
    for tp in (1, 8):
        p = _vllm(path, None, engine=engine, pp=2, tp=tp, **args)
        assert p.engine.detail["draft_embedding"] == "shared"
        assert not p.engine.refusals
        # vocab 200,064 (a multiple of 64: no padding) x hidden 6,144 x 2 B (bf16) / TP:
        # 2,458,386,432 B at TP 1, 25,008 rows = 307,298,304 B at TP 8; one copy
        one = 200_064 * 6_144 * 2 // tp
        assert one == {1: 2_458_386_432, 8: 307_298_304}[tp]
        (warning,) = [w for w in p.warnings if "embed_tokens" in w]
        assert f"({one:,} B) more weights per last-stage rank" in warning
        assert "for the drafter to share (spec_decode_needs_target_embed)" in warning
        # the plan's weights hold the embedding on stage 0 only: the same bytes
        stage0 = weights_bytes(model, tp=tp, pp=2, pp_stage=0).embeddings_bytes
        last = weights_bytes(model, tp=tp, pp=2, pp_stage=1, include_mtp=True)
        assert stage0 == one and last.embeddings_bytes == 0
    at_pp_1 = _vllm(path, None, engine=engine, **args)
    assert at_pp_1.engine.detail["draft_embedding"] == "shared"
    assert not [w for w in at_pp_1.warnings if "embed_tokens" in w]


@pytest.mark.parametrize("engine", ["vllm@0.33.0", "vllm@0.34.0"])
def test_glm_mtp_keeps_its_one_embedding_at_pp_2(engine: str) -> None:
    """Glm4MoeMTP declares no has_own_embed_tokens (glm4_moe_mtp.py, both releases), so
    maybe_share_target_embed returns before sharing at PP > 1 (eagle/utils.py:59-62 in
    0.33.0, :97-100 in 0.34.0), and Glm4MoeModel builds no embed_tokens on the last rank:
    the MTP's own is the one copy there, 151,552 x 4,096 x 2 B = 1,241,513,984 B."""
    p = _vllm("zai-org/GLM-4.5-Air", None, "mtp", engine=engine, pp=2)
    assert p.engine.detail["draft_embedding"] == "kept"
    kept = 151_552 * 4_096 * 2
    assert kept == 1_241_513_984
    (warning,) = [w for w in p.warnings if "embed_tokens" in w]
    assert f"({kept:,} B) more weights per last-stage rank" in warning
    assert "MTP drafter's own embed_tokens" in warning
