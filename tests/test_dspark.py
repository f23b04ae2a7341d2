"""DSpark stages: DeepSeek-V4.1's own drafter under vLLM 0.33.0 (``--spec dspark``).

Expected figures are by hand from vLLM 0.33.0's code (the PyPI wheel):
``config/speculative.py`` (``SpeculativeConfig``: method "dspark", the draft config
rewritten to ``DSparkV41DraftModel``, ``needs_eagle_block_drop``,
``max_num_new_slots_for_drafting``), ``models/deepseek_v41/nvidia/dspark.py``
(``DSparkDeepseekV4Model.__init__``: the stage count, ``main_proj``, ``main_norm``,
``norm``, the heads; ``DSparkDeepseekV4ForCausalLM``: embedding and lm_head shared),
``model_executor/models/qwen3_dspark.py`` (``DSparkMarkovHead``, ``DSparkConfidenceHead``),
``models/deepseek_v41/attention.py`` (``DeepseekV4Attention.__init__``: past
``num_hidden_layers`` no layer is a KV or index source), ``models/deepseek_v41/nvidia/
model.py`` (``DeepseekV4MoE``: ``dspark_n_routed_experts``) and
``v1/core/kv_cache_planning.py`` (the packed groups). The configs are
tests/family_configs.py's (``family/deepseek-v41-dspark``, shared with the vLLM fidelity
harness, which runs vLLM's ``SpeculativeConfig`` and cache specs on it and agrees with each
figure asserted here) or small ones written here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import (
    DEEPSEEK_V41,
    DEEPSEEK_V41_DSPARK,
    DEEPSEEK_V41_SMALL_TEXT,
    folder,
    vllm_plan,
)

from kvbudget import count_params, plan, weights_bytes
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import SharedCompressedMLALayer
from kvbudget.model import parse_config
from kvbudget.sim.roofline import gpu_rates, roofline_for
from kvbudget.spec_modes import SPEC_MODE_TABLE
from kvbudget.weights.headers import unmatched_place
from kvbudget.weights.placement import model_inventory

GIB = 1024**3
DSPARK_TEXT: dict[str, Any] = DEEPSEEK_V41_DSPARK["text_config"]
# A small V4.1 with two DSpark stages, for weights by hand (values chosen): hidden 256,
# 2 heads of 512 (64 rotary), 4 experts (2 a stage), three fused target layers, a Markov
# rank of 8; the stages past compress_ratios keep their window only
SMALL_TEXT: dict[str, Any] = {
    **DEEPSEEK_V41_SMALL_TEXT,
    "num_nextn_predict_layers": 2,
    "dspark_target_layer_ids": [0, 2, 3],
    "dspark_markov_rank": 8,
    "dspark_n_routed_experts": 2,
}
SMALL: dict[str, Any] = {**DEEPSEEK_V41, "text_config": SMALL_TEXT}


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="dspark-test")


def with_text(**fields: Any) -> dict[str, Any]:
    return {**DEEPSEEK_V41, "text_config": {**DSPARK_TEXT, **fields}}


def test_stages_keep_their_window_only() -> None:
    m = parse(DEEPSEEK_V41_DSPARK)
    stages = m.mtp_layers
    # three stages named layers.43-45 (num_hidden_layers + j); compress_ratios runs on
    # over them, but past num_hidden_layers none is a KV or index source (is_backbone)
    assert [x.index for x in stages] == [43, 44, 45]
    for x in stages:
        assert isinstance(x, SharedCompressedMLALayer)
        assert (x.kv_source, x.index_head_dim, x.window) == (False, 0, 128)
    assert [x.compress_ratio for x in stages if isinstance(x, SharedCompressedMLALayer)] == [
        0,
        2,
        1,
    ]
    # nothing that grows with the sequence: the 32-token window cache alone
    assert sum(x.bytes_per_token(parse_dtype("fp8"), 1) for x in stages) == 0


def test_stage_count_follows_vllm() -> None:
    # n_mtp_layers, else num_nextn_predict_layers, else 3 (a 0 falls through)
    assert len(parse(with_text(n_mtp_layers=2)).mtp_layers) == 2
    assert len(parse(with_text(num_nextn_predict_layers=0)).mtp_layers) == 3
    assert len(parse(with_text(num_nextn_predict_layers=None)).mtp_layers) == 3
    # without the fields DSparkDeepseekV4Model reads unguarded there is no drafter
    assert parse(DEEPSEEK_V41).mtp_layers == ()
    assert parse(with_text(dspark_markov_rank=None)).mtp_layers == ()
    # a compressed stage without the model's sources: vLLM raises in DeepseekV4Attention
    plain = {**DSPARK_TEXT, "compress_ratios": [0] * 43 + [0, 2, 1]}
    plain.update(kv_source_layer_ids=[], index_source_layer_ids=[])
    with pytest.raises(ConfigError, match=r"DSpark stage 1 \(layer 44\) has compress ratio 2"):
        parse({**DEEPSEEK_V41, "text_config": plain})


def test_spec_mode_reads_no_next_token() -> None:
    mode = SPEC_MODE_TABLE["dspark"]
    # needs_eagle_block_drop: DSpark's draft KV comes from the target's hidden states
    assert (mode.draft, mode.lookahead, mode.draft_prefix) == ("mtp", True, "same_tokens")


def test_vllm_groups_by_hand(tmp_path: Path) -> None:
    """K = 3 at 40 GiB: the stages' three windows join the target's window groups."""
    e = vllm_plan(tmp_path, DEEPSEEK_V41_DSPARK, spec="dspark", max_draft_len=3)
    groups = sorted(
        (g["kind"], g["layers"], g["draft_layers"], g["padding_layers"], g["page_bytes"],
         g["block_size"], g["blocks_per_request"])
        for g in e["kv_cache_groups"]
    )  # fmt: skip
    # as the defaults (test_deepseek_v41.py): the MLA group sets the block at 350,784 B,
    # which holds 350,784 // 19,008 = 18 windows; 43 + 3 windows -> cdiv(46, 18) = 3
    # groups of up to 16 (16, 15, 15), one stage in each; 5 rings of 8 rows (K + 2 <= 8)
    assert groups == sorted(
        [
            ("sliding_window", 16, 1, 0, 19_008, 32, 517),
            ("sliding_window", 15, 1, 1, 19_008, 32, 517),
            ("sliding_window", 15, 1, 1, 19_008, 32, 517),
            ("mla", 16, 0, 0, 37_440, 64, 512),
            ("circular_buffer", 5, 0, 11, 32_768, 8, 1),
        ]
    )
    assert e["bytes_per_block"] == 350_784
    assert e["num_gpu_blocks"] == 40 * GIB // 350_784 == 122_439
    assert e["blocks_per_request"] == 3 * 517 + 512 + 1 == 2064
    assert e["gpu_kv_cache_tokens"] == int(122_439 / 2064 * 32_768) == 1_943_837
    # the emitted config: the draft is the target checkpoint (SpeculativeConfig sets it)
    assert e["settings"]["--speculative-config"] == {
        "method": "dspark",
        "num_speculative_tokens": 3,
    }


def test_vllm_rings_follow_k(tmp_path: Path) -> None:
    # K = 16: rings of max(8, 2^ceil(log2 18)) = 32 rows, 32 x 1,024 x 4 = 131,072 B;
    # 350,784 // 131,072 = 2 a block -> cdiv(5, 2) = 3 ring groups, one block a request each
    e = vllm_plan(tmp_path, DEEPSEEK_V41_DSPARK, spec="dspark", max_draft_len=16)
    rings = sorted((g["layers"], g["page_bytes"]) for g in e["kv_cache_groups"]
                   if g["kind"] == "circular_buffer")  # fmt: skip
    assert rings == [(1, 131_072), (2, 131_072), (2, 131_072)]
    assert e["blocks_per_request"] == 3 * 517 + 512 + 3 == 2066
    # the line vLLM 0.33.0's own code logs for this case (fidelity harness)
    assert e["gpu_kv_cache_tokens"] == int(122_439 / 2066 * 32_768) == 1_941_956


def test_weights_by_hand() -> None:
    c = count_params(parse(SMALL))
    h = 256
    # a stage: DeepSeek-V4's attention (test_deepseek_v41.py: 197,154), no compressor or
    # indexer (not a source); MoE of dspark_n_routed_experts = 2: router 2 x h, two
    # experts and the shared one (2 x 32 x h + h x 32 each); two norms; hc_attn and hc_ffn
    # (fn 8 x 2h, base 8, scale 3)
    attention = 197_154
    moe = 2 * h + 2 * (2 * 32 * h + h * 32) + (2 * 32 * h + h * 32)
    hc = 2 * (8 * 2 * h + 8 + 3)
    stage = attention + moe + 2 * h + hc
    # main_proj h x 3h (three fused target layers) and main_norm on stage 0; on the last
    # the final norm, markov_w1 1,000 x 8, markov_w2 1,000 x 8, confidence proj 1 x (h + 8)
    heads = 3 * h * h + h + h + 1000 * 8 + 1000 * 8 + (h + 8)
    assert c.mtp == 2 * stage + heads == 773_624
    names = {w.name for w in model_inventory(parse(SMALL)) if w.component == "mtp"}
    # checkpoint names (_remap_dspark_name): mtp.0 the context combiner, mtp.last the heads
    assert {"mtp.0.main_proj", "mtp.0.main_norm", "mtp.1.norm", "mtp.1.markov_head.embed",
            "mtp.1.markov_head.head", "mtp.1.confidence_head.proj",
            "mtp.1.attn.wq_a"} <= names  # fmt: skip
    # enable_confidence_head false: no confidence head
    off = count_params(
        parse({**SMALL, "text_config": {**SMALL_TEXT, "enable_confidence_head": False}})
    )
    assert c.mtp - off.mtp == h + 8


def test_weight_bytes_by_hand() -> None:
    m = parse(SMALL)
    planned = weights_bytes(m, tp=1, include_mtp=True).total_bytes
    target = weights_bytes(m, tp=1).total_bytes
    # bf16, but fp32 for the sinks (2 a stage), the mHC mappings (8,214 a stage) and the
    # confidence head (264); markov_w2 a ParallelLMHead (disable_tp): 1,000 rows padded to
    # 1,024, +24 x 8
    fp32 = 2 * (2 + 8_214) + 264
    assert planned - target == (773_624 - fp32 + 24 * 8) * 2 + fp32 * 4 == 1_581_024
    # at TP 2 the heads (main_proj, Markov, confidence) stay whole; a stage halves wq_b
    # (1,024 x 32), wo_a (32 x 512), wo_b (256 x 32), the two experts and the shared one
    # (24,576 each) in bf16 and its 2 fp32 sinks
    halved = (1024 * 32 + 32 * 512 + 256 * 32 + 3 * 24_576) // 2 * 2 + 1 * 4
    at_tp2 = (
        weights_bytes(m, tp=2, include_mtp=True).total_bytes - weights_bytes(m, tp=2).total_bytes
    )
    assert at_tp2 == 1_581_024 - 2 * halved == 1_318_872


def test_plan_counts_the_stages_weights(tmp_path: Path) -> None:
    target = folder(tmp_path, DEEPSEEK_V41_DSPARK)
    args: dict[str, Any] = {"engine": "vllm", "gpu": "H200", "tp": 8, "host_budget": 0}
    # the auto spec picks the stages (spec_reason), and the GPU budget loses their weights
    dspark = plan(target, **args)
    none = plan(target, spec="none", **args)
    assert dspark.spec == "dspark"
    m = parse(DEEPSEEK_V41_DSPARK)
    extra = (
        weights_bytes(m, tp=8, include_mtp=True).total_bytes - weights_bytes(m, tp=8).total_bytes
    )
    assert extra > 0
    assert dspark.stages[-1].weights_bytes - none.stages[-1].weights_bytes == extra
    # the simulator's roofline reads them with the target's weights, once a pass
    rates = gpu_rates("H200")
    assert (
        roofline_for(dspark, rates).target_weights_bytes
        - roofline_for(none, rates).target_weights_bytes
        == extra
    )


def test_refusals(tmp_path: Path) -> None:
    target = folder(tmp_path / "v41", DEEPSEEK_V41_DSPARK)
    budget: dict[str, Any] = {"kv_budget": "8GiB", "host_budget": 0}
    # vLLM refuses method mtp for V4.1 ("Use speculative method 'dspark' instead")
    with pytest.raises(InvalidArgumentError, match="plan --spec dspark with --engine vllm"):
        plan(target, spec="mtp", engine="vllm", **budget)
    # other engine models have not read their DSPARK drafters' pools (SGLang 0.5.23's
    # are modelled: tests/test_sglang_dsv41.py)
    for engine in ("trtllm", "kvbudget"):
        with pytest.raises(InvalidArgumentError, match="not modelled for --spec dspark"):
            plan(target, spec="dspark", engine=engine, **budget)
    # a standalone DSpark draft, another family, a V4.1 config without the fields
    with pytest.raises(InvalidArgumentError, match="drop --draft"):
        plan(target, spec="dspark", draft="meta-llama/Llama-3.2-1B-Instruct", engine="vllm",
             **budget)  # fmt: skip
    with pytest.raises(InvalidArgumentError, match=r"DeepSeek-V4\.1 targets"):
        plan("meta-llama/Llama-3.1-8B-Instruct", spec="dspark", engine="vllm", **budget)
    bare = folder(tmp_path / "bare", DEEPSEEK_V41)
    with pytest.raises(InvalidArgumentError, match="no DSpark stages"):
        plan(bare, spec="dspark", engine="vllm", **budget)


def test_checkpoint_stage_tensors_are_mtp_weights() -> None:
    # a stored tensor no inventory name matches (the checkpoint's w1 / w2 / w3 experts):
    # mtp.{j}.* is an MTP layer's (a DSpark stage's), loaded only with the draft
    assert unmatched_place("mtp.1.ffn.experts.5.w1.weight", 43) == "mtp"
    assert unmatched_place("model.mtp.0.enorm.weight", 43) == "mtp"
    assert unmatched_place("layers.44.attn.wq_a.weight", 43) == "mtp"
    assert unmatched_place("layers.3.ffn.experts.5.w1.weight", 43) == 3
    assert unmatched_place("embed.weight", 43) == "first"
