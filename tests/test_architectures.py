"""The architectures package: one module per family, and GLM-4.5 (added as one module)."""

from __future__ import annotations

import pytest

from kvbudget import count_params, load_model, plan
from kvbudget.architectures import ARCHITECTURES, BY_MODEL_TYPE, SUPPORTED_MODEL_TYPES
from kvbudget.layers import AttentionLayer
from kvbudget.model import parse_config


def test_every_model_type_has_one_family() -> None:
    seen: dict[str, str] = {}
    for arch in ARCHITECTURES:
        for t in arch.model_types:
            assert t not in seen, f"{t} registered by {seen[t]} and {arch.family}"
            seen[t] = arch.family
    assert set(seen) == set(BY_MODEL_TYPE) == set(SUPPORTED_MODEL_TYPES)
    assert list(SUPPORTED_MODEL_TYPES) == sorted(SUPPORTED_MODEL_TYPES)
    assert BY_MODEL_TYPE["glm4_moe"].family == "glm4_moe"


def test_glm45_air_cache_layers() -> None:
    m = load_model("zai-org/GLM-4.5-Air")
    assert m.model_type == "glm4_moe" and m.num_layers == 46
    assert all(
        isinstance(x, AttentionLayer)
        and (x.num_kv_heads, x.head_dim, x.sliding_window) == (8, 128, None)
        for x in m.layers
    )
    # one MTP layer of the target's geometry, indexed after the 46 decoder layers
    assert m.mtp_layers == (AttentionLayer(index=46, num_kv_heads=8, head_dim=128),)


def test_glm45_mtp_plan_bytes_per_token() -> None:
    p = plan("zai-org/GLM-4.5", spec="mtp", tp=8, kv_budget="40GiB", max_seq_len=32768)
    (target,) = p.managers
    # 92 + 1 MTP layers x 2 (K, V) x ceil(8 KV heads / 8 ranks) x 128 x 2 B (bf16) = 47,616
    assert target.slope_bytes_per_token == 93 * 2 * 1 * 128 * 2 == 47_616
    sep = plan(
        "zai-org/GLM-4.5",
        spec="mtp",
        tp=8,
        kv_budget="40GiB",
        max_seq_len=32768,
        separate_draft_cache=True,
    )
    assert [m.slope_bytes_per_token for m in sep.managers] == [92 * 512, 1 * 512]


def test_glm45_air_params_by_hand() -> None:
    """Every component of GLM-4.5-Air from its config (H 4096, 96 heads, 8 KV heads,
    head 128, vocab 151552, 46 layers: 1 dense (FFN 10944) + 45 MoE (128 experts and 1
    shared of 1408), attention_bias on q/k/v only, no q/k norm, 1 MTP layer)."""
    h, v = 4096, 151552
    attn = (96 * 128 * h + 96 * 128) + 2 * (8 * 128 * h + 8 * 128) + h * 96 * 128
    assert attn == 109_066_240
    router = 128 * h + 128  # gate weight (fp32) + e_score_correction_bias
    experts = 128 * 3 * h * 1408
    shared = 3 * h * 1408
    c = count_params(load_model("zai-org/GLM-4.5-Air"))
    assert c.embeddings == c.lm_head == v * h == 620_756_992
    assert c.attention == 46 * attn == 5_017_047_040
    assert c.dense_mlp == 3 * h * 10944 == 134_479_872
    assert c.routed_experts == 45 * experts == 99_656_663_040
    assert c.shared_experts == 45 * shared == 778_567_680
    assert c.routers == 45 * router == 23_598_720
    assert c.norms == 46 * 2 * h + h == 380_928
    # MTP: enorm, hnorm, eh_proj (2H -> H), one MoE decoder layer, shared_head.norm
    assert c.mtp == 2 * h + 2 * h * h + (attn + 2 * h + router + experts + shared) + h
    assert c.mtp == 2_375_059_584


def test_glm45_qk_norm_follows_use_qk_norm() -> None:
    """GLM-4.5 sets use_qk_norm: two head_dim norms per layer more than without."""
    full = load_model("zai-org/GLM-4.5")
    cfg = dict(full.raw_config, use_qk_norm=False)
    plain = parse_config(cfg, source="test", name="glm-no-qk-norm")
    assert count_params(full).attention - count_params(plain).attention == 92 * 2 * 128
    h = 5120
    attn = (96 * 128 * h + 96 * 128) + 2 * (8 * 128 * h + 8 * 128) + h * 96 * 128 + 2 * 128
    assert count_params(full).attention == 92 * attn == 12_542_311_424


@pytest.mark.parametrize("name", ["zai-org/GLM-4.5", "zai-org/GLM-4.5-Air", "zai-org/GLM-4.6"])
def test_spec_auto_picks_mtp_for_glm(name: str) -> None:
    p = plan(name, tp=8, kv_budget="40GiB", max_seq_len=8192)
    assert p.spec == "mtp"
    assert p.spec_reason == f"spec auto chose mtp: {name} ships 1 MTP layer(s)"
