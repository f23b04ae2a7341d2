"""Kimi-Linear: KDA recurrent state beside NoPE MLA latents, vLLM's hybrid pool, weights.

No verbatim Kimi-Linear config is reachable from this project: the configs are
transformers 5.20.2 ``KimiLinearConfig``'s defaults in vLLM's field names
(tests/family_configs.py, shared with the vLLM fidelity harness:
``family/kimi-linear-defaults``) or small ones written here. Expected figures are by hand
from vLLM 0.33.0's code (the PyPI wheel):
``model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py`` (``KimiGatedDeltaNetAttention``:
its ``get_state_shape``, ``get_state_dtype`` and weights),
``model_executor/layers/mamba/mamba_utils.py`` (``kda_state_shape``, ``kda_state_dtype``),
``models/kimi_k3/nvidia/mla.py`` (``MultiHeadLatentAttention.get_kv_cache_spec``),
``models/kimi_k3/nvidia/model.py`` (``KimiDecoderLayer``, ``KimiMoE``),
``platforms/interface.py`` (``_align_hybrid_block_size``: the 128-token MLA alignment),
``v1/kv_cache_interface.py`` (``MambaSpec``) and ``v1/core/kv_cache_utils.py`` (groups);
the harness runs that code on the same config and agrees with each vLLM figure here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from family_configs import KIMI_LINEAR, folder, vllm_plan
from hypothesis import given
from hypothesis import strategies as st

from kvbudget import count_params, plan, weights_bytes
from kvbudget.architectures.kimi_linear import vllm_expert_padding_bytes
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import KimiDeltaLayer, MLALayer
from kvbudget.model import parse_config

GIB = 1024**3
BF16, FP8, FP32 = parse_dtype("bf16"), parse_dtype("fp8"), parse_dtype("fp32")


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="kimi-linear-test")


def with_linear(**fields: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(KIMI_LINEAR)
    cfg["linear_attn_config"].update(fields)
    return cfg


def test_layers_follow_linear_attn_config() -> None:
    m = parse(KIMI_LINEAR)
    # KimiLinearConfig.is_kda_layer(i): ``i + 1 in kda_layers``; the family config's
    # full_attn_layers are 5, 9, ..., 25 (1-indexed), so 0-indexed MLA layers 4, 8, ..., 24
    mla = [x.index for x in m.layers if isinstance(x, MLALayer)]
    assert mla == [4, 8, 12, 16, 20, 24]
    kda = [x for x in m.layers if isinstance(x, KimiDeltaLayer)]
    assert len(kda) == 27 - 6 == 21
    assert {(x.num_heads, x.head_dim, x.conv_kernel) for x in kda} == {(32, 128, 4)}
    assert {(x.kv_lora_rank, x.qk_rope_head_dim) for x in m.layers if isinstance(x, MLALayer)} == {
        (512, 64)
    }
    assert m.mtp_layers == ()  # vLLM builds MTP for Kimi K3 only (config/speculative.py)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({**KIMI_LINEAR, "linear_attn_config": None}, "linear_attn_config"),
        (with_linear(kda_layers=[0, 1]), "kda_layers must be layer numbers 1..27"),
        (with_linear(use_full_rank_gate=True), "KimiK3DeltaAttention"),
        ({**KIMI_LINEAR, "mla_use_nope": False}, "NoPE only"),
        ({**KIMI_LINEAR, "num_nextn_predict_layers": 1}, "num_nextn_predict_layers"),
    ],
)
def test_configs_vllm_cannot_build_are_refused(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse(cfg)


def test_state_and_latent_bytes_by_hand() -> None:
    kda = KimiDeltaLayer(index=0, num_heads=32, head_dim=128, conv_kernel=4)
    # kda_state_shape: conv (3 x 32 x 128 / tp, 4 - 1 + K) in the model dtype; recurrent
    # (32 / tp, 128, 128) in float32 (kda_state_dtype with mamba_ssm_cache_dtype "auto")
    assert kda.state_bytes(BF16, 1) == 3 * 3 * 32 * 128 * 2 + 32 * 128 * 128 * 4 == 2_170_880
    assert kda.state_bytes(BF16, 8) == 3 * 3 * 4 * 128 * 2 + 4 * 128 * 128 * 4 == 271_360
    assert kda.state_bytes(BF16, 8, lookahead=3) == 6 * 3 * 4 * 128 * 2 + 262_144 == 280_576
    # KimiGatedDeltaNetAttention.get_state_dtype passes no mamba_ssm_cache_dtype: float32
    # whatever the SSM dtype asked
    assert kda.state_bytes(BF16, 1, ssm_dtype=BF16) == 2_170_880
    assert kda.bytes_per_token(BF16, 1) == 0
    # MLAAttentionSpec: head_size kv_lora_rank + qk_rope_head_dim = 576, one KV head,
    # max_tp_shards=1 (replicated)
    mla = MLALayer(index=4, kv_lora_rank=512, qk_rope_head_dim=64)
    assert mla.bytes_per_token(BF16, 8) == 576 * 2 == 1152
    assert mla.bytes_per_token(FP8, 8) == 576


@given(
    heads=st.sampled_from([8, 16, 32, 64]),
    head_dim=st.sampled_from([64, 128]),
    tp=st.sampled_from([1, 2, 4, 8]),
    lookahead=st.integers(0, 8),
)
def test_each_draft_token_adds_one_conv_row(
    heads: int, head_dim: int, tp: int, lookahead: int
) -> None:
    """The conv state keeps ``conv_kernel - 1 + K`` rows of ``3 x heads / tp x head_dim``
    values; the recurrent state does not grow with K."""
    kda = KimiDeltaLayer(index=0, num_heads=heads, head_dim=head_dim, conv_kernel=4)
    row = 3 * (heads // tp) * head_dim * 2
    grow = kda.state_bytes(BF16, tp, lookahead=lookahead + 1) - kda.state_bytes(
        BF16, tp, lookahead=lookahead
    )
    assert grow == row
    assert kda.state_bytes(BF16, tp) - 3 * row == FP32.bytes_for((heads // tp) * head_dim**2)


def test_vllm_groups_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, KIMI_LINEAR)
    # _align_hybrid_block_size, use_mla: blocks a multiple of 128, raised until one MLA
    # page (1152 B a token) holds a KDA state (2,170,880 B): 128 x cdiv(2_170_880,
    # 128 x 1152) = 128 x 15; no prefill checkpoint alignment (KDA declares none)
    assert e["block_size"] == 128 * 15 == 1920
    page = 1920 * 1152
    assert page == 2_211_840
    groups = [(g["kind"], g["layers"], g["padding_layers"], g["page_bytes"], g["block_size"],
               g["blocks_per_request"]) for g in e["kv_cache_groups"]]  # fmt: skip
    # 21 KDA and 6 MLA layers: group size 6 (the fewest; 21 >= 1.5 x 6), so the KDA layers
    # fill 4 groups (6, 5 + 1, 5 + 1, 5 + 1); every state page padded to the MLA page; a
    # KDA group holds 2 + K (+0 checkpoint) = 2 states a request in align mode, the MLA
    # group cdiv(32768, 1920) = 18 blocks
    assert groups == [
        ("mamba", 6, 0, page, 1920, 2),
        ("mamba", 5, 1, page, 1920, 2),
        ("mamba", 5, 1, page, 1920, 2),
        ("mamba", 5, 1, page, 1920, 2),
        ("mla", 6, 0, page, 1920, 18),
    ]
    assert e["bytes_per_block"] == 6 * page == 13_271_040
    assert e["num_gpu_blocks"] == 40 * GIB // 13_271_040 == 3236
    assert e["blocks_per_request"] == 4 * 2 + 18 == 26
    assert e["gpu_kv_cache_tokens"] == int(3236 / 26 * 32768) == 4_078_355  # the harness's


def test_vllm_tp8_fp8_with_drafts_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, KIMI_LINEAR, spec="ngram", max_draft_len=3, tp=8, kv_dtype="fp8")
    # KDA state at TP 8, K = 3: conv 6 rows x 3 x 4 x 128 bf16 (the conv state follows the
    # model dtype, not the KV one) + 4 x 128 x 128 fp32 = 280,576 B; the fp8 MLA page is
    # 576 B a token: 128 x cdiv(280_576, 128 x 576) = 512 tokens
    assert e["block_size"] == 128 * 4 == 512
    assert e["bytes_per_block"] == 6 * 512 * 576 == 1_769_472
    assert e["num_gpu_blocks"] == 40 * GIB // 1_769_472 == 24_272
    # 2 + K = 5 states in each of the 4 KDA groups, cdiv(32768, 512) = 64 MLA blocks
    assert e["blocks_per_request"] == 4 * 5 + 64 == 84
    assert e["gpu_kv_cache_tokens"] == int(24_272 / 84 * 32768) == 9_468_391  # the harness's


def test_weights_by_hand() -> None:
    c = count_params(parse(KIMI_LINEAR))
    # one KDA layer (kimi_gdn_linear_attn.py): in_proj_qkvgfab q, k, v (3 x 4096) + b (32)
    # + f_a (128) rows of 2304; f_b_proj and g_b_proj 4096 x 128; g_a_proj 128 x 2304;
    # dt_bias 4096; conv1d 3 x 4096 x 4; A_log 32; o_norm 128; o_proj 2304 x 4096
    kda = (3 * 4096 + 32 + 128) * 2304 + 2 * 4096 * 128 + 128 * 2304 + 4096 + 12288 * 4
    kda += 32 + 128 + 2304 * 4096
    assert c.recurrent == 21 * kda == 21 * 39_514_272
    # one MLA layer (mla.py, no q LoRA): q_proj 32 x 192 rows, kv_a_proj_with_mqa 576,
    # kv_a_layernorm 512, kv_b_proj 32 x 256 rows of 512, o_proj 2304 x 4096
    mla = 32 * 192 * 2304 + 576 * 2304 + 512 + 32 * 256 * 512 + 2304 * 4096
    assert c.attention == 6 * mla == 174_689_280
    # KimiMoE on layers 1..26 (first_k_dense_replace 1): 256 experts of 3 x 1024 x 2304,
    # one shared expert the same, the router 256 x 2304 + its fp32 correction bias 256;
    # layer 0 a dense KimiMLP of 3 x 9216 x 2304
    assert c.routed_experts == 26 * 256 * 3 * 1024 * 2304
    assert c.shared_experts == 26 * 3 * 1024 * 2304
    assert c.routers == 26 * (256 * 2304 + 256)
    assert c.dense_mlp == 3 * 9216 * 2304
    assert c.embeddings == c.lm_head == 163_840 * 2304
    assert c.norms == 27 * 2 * 2304 + 2304


def test_default_weights_match_transformers() -> None:
    c = count_params(parse(KIMI_LINEAR))
    # transformers 5.20.2 KimiLinearForCausalLM(KimiLinearConfig()) on the meta device:
    # 49,133,074,464 parameters, plus 26 x 256 e_score_correction_bias buffers (a
    # Parameter in vLLM's KimiMoE)
    assert c.total == 49_133_074_464 + 26 * 256 == 49_133_081_120


def test_weight_bytes_by_hand() -> None:
    w = weights_bytes(parse(KIMI_LINEAR), tp=1)
    # vLLM keeps conv1d (params_dtype float32), dt_bias and A_log in float32, the rest of
    # a KDA layer in bf16: (39_514_272 - 53_280) x 2 + 53_280 x 4
    fp32 = 4096 + 12288 * 4 + 32
    assert fp32 == 53_280
    assert w.recurrent_bytes == 21 * ((39_514_272 - fp32) * 2 + fp32 * 4) == 1_661_837_184
    # the router's correction bias is float32 (KimiMoE: torch.empty(..., float32))
    assert w.routers_bytes == 26 * (256 * 2304 * 2 + 256 * 4) == 30_697_472


def test_engines_that_do_not_model_it_refuse(tmp_path: Path) -> None:
    target = folder(tmp_path, KIMI_LINEAR)
    # SGLang's pools: tests/test_sglang_kimi.py; kvbudget's own: tests/test_kimi_own_cache.py
    with pytest.raises(
        InvalidArgumentError,
        match=r"plan it with --engine vllm or --engine sglang or --engine kvbudget$",
    ):
        plan(target, spec="none", engine="trtllm", kv_budget="8GiB", host_budget=0)
    # vLLM's KDA layer asserts num_heads % tp == 0
    odd = folder(tmp_path / "odd", with_linear(num_heads=24))
    with pytest.raises(InvalidArgumentError, match=r"linear_attn_config.num_heads=24"):
        plan(odd, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0, tp=16)


def test_vllm_pads_routed_experts_at_tp8_and_the_plan_warns(tmp_path: Path) -> None:
    # KimiMoE (vllm/models/kimi_k3/nvidia/model.py): moe_intermediate_size 1024 / TP 8 =
    # 128 < 256 rows per partition without expert parallelism, so each expert is padded to
    # 256 x 8 = 2,048 rows: a rank's routed experts double. bf16 routed experts at TP 8:
    # 26 layers x 256 experts x 3 x 1,024 x 2,304 x 2 B / 8 = 11,777,605,632 B per rank
    routed = 26 * 256 * 3 * 1024 * 2304 * 2 // 8
    assert routed == 11_777_605_632
    model = parse(KIMI_LINEAR)
    assert weights_bytes(model, tp=8).routed_experts_bytes == routed
    assert vllm_expert_padding_bytes(model, tp=8, ep=1) == routed * 2048 // 1024 - routed
    assert vllm_expert_padding_bytes(model, tp=4, ep=1) == 0  # 1024 / 4 = 256: no padding
    assert vllm_expert_padding_bytes(model, tp=8, ep=8) == 0  # experts whole per rank
    p = plan(folder(tmp_path, KIMI_LINEAR), spec="none", engine="vllm", kv_budget="40GiB",
             host_budget=0, max_seq_len=32768, tp=8)  # fmt: skip
    (warned,) = [w for w in p.warnings if w.startswith("vLLM pads")]
    assert "10.97 GiB (11,777,605,632 B) more weights per rank" in warned
    assert "--ep 8" in warned
    given = plan(folder(tmp_path / "given", KIMI_LINEAR), spec="none", engine="vllm",
                 kv_budget="40GiB", host_budget=0, max_seq_len=32768, tp=8,
                 weights_bytes="20GiB")  # fmt: skip
    assert not [w for w in given.warnings if w.startswith("vLLM pads")]  # the user's figure
