"""Gemma-4: per-layer head sizes, sliding and global layers, KV-shared layers, weights.

No verbatim Gemma-4 config is available to this project, so the configs are written
in tests/family_configs.py (shared with the vLLM fidelity harness) or here: fields at
transformers 5.20.2 ``Gemma4TextConfig``'s defaults (30 layers, hidden 2304, 8 heads,
4 KV heads, head 256, ``global_head_dim`` 512, window 512, PLE 256), or values chosen to
exercise a field. Expected figures are by hand; the vLLM ones are also what vLLM
0.33.0's own code gives for the same configs (benchmarks/fidelity/vllm_fidelity.py,
``family/gemma4-*`` cases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import GEMMA4_EAGLE3_HEAD, GEMMA4_KV_SHARED, GEMMA4_TEXT, folder
from hypothesis import given
from hypothesis import strategies as st

from kvbudget import count_params, load_model, plan
from kvbudget.errors import ConfigError, InvalidArgumentError
from kvbudget.layers import AttentionLayer, NoCacheLayer
from kvbudget.model import parse_config

GIB = 1024**3
TEXT = GEMMA4_TEXT
KV_SHARED = GEMMA4_KV_SHARED


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="gemma4-test")


def test_default_pattern_five_sliding_one_global_with_wider_heads() -> None:
    m = parse(TEXT)
    # layer_types default: (i + 1) % 6 == 0 is full attention (Gemma4TextConfig)
    full = [x.index for x in m.layers if isinstance(x, AttentionLayer) and x.sliding_window is None]
    assert full == [5, 11, 17, 23, 29]
    for x in m.layers:
        assert isinstance(x, AttentionLayer)
        if x.index in full:  # per_layer_config: head_dim = global_head_dim, KV heads kept
            assert (x.num_kv_heads, x.head_dim) == (4, 512)
        else:
            assert (x.num_kv_heads, x.head_dim, x.sliding_window) == (4, 256, 512)


def test_bytes_per_token_by_hand() -> None:
    from kvbudget.dtypes import parse_dtype

    bf16 = parse_dtype("bf16")
    m = parse(TEXT)
    per_layer = [x.bytes_per_token(bf16, 1) for x in m.layers]
    # sliding: 2 (K, V) x 4 heads x 256 x 2 B = 4,096; global: 2 x 4 x 512 x 2 B = 8,192
    assert per_layer.count(4096) == 25 and per_layer.count(8192) == 5
    # TP 8: 4 KV heads replicated to one per rank: 2 x 1 x 256 x 2 = 1,024 and 2,048
    assert {x.bytes_per_token(bf16, 8) for x in m.layers} == {1024, 2048}


def test_k_eq_v_global_heads_and_kv_shared_layers_cache_nothing() -> None:
    m = parse(KV_SHARED)
    own, shared = m.layers[:15], m.layers[15:]
    # the last num_kv_shared_layers read earlier layers' caches (vLLM skips their specs)
    assert all(isinstance(x, NoCacheLayer) for x in shared) and len(shared) == 20
    assert all(isinstance(x, AttentionLayer) for x in own)
    geo = [(x.num_kv_heads, x.head_dim, x.sliding_window) for x in own]  # type: ignore[union-attr]
    # full layers 5 and 11 get num_global_key_value_heads (attention_k_eq_v is true)
    assert geo[5] == geo[11] == (1, 512, None)
    assert geo.count((1, 256, 512)) == 13


def test_global_kv_heads_apply_only_with_k_eq_v() -> None:
    # Gemma4TextConfig: num_global_key_value_heads is used iff attention_k_eq_v
    m = parse({**TEXT, "num_global_key_value_heads": 1})
    assert {x.num_kv_heads for x in m.layers if isinstance(x, AttentionLayer)} == {4}


def test_per_layer_config_as_transformers_writes_it_back() -> None:
    # Gemma4TextConfig(...).to_dict() drops global_head_dim and writes the overrides
    written = {k: v for k, v in KV_SHARED.items() if k != "global_head_dim"}
    written["per_layer_config"] = {
        str(i): {"head_dim": 512, "num_key_value_heads": 1} for i in (5, 11, 17, 23, 29, 34)
    }
    assert parse(written).layers == parse(KV_SHARED).layers


def test_last_layer_is_forced_global_and_bidirectional_halves_the_window() -> None:
    types = ["sliding_attention"] * 6
    m = parse({**TEXT, "num_hidden_layers": 6, "layer_types": types})
    last = m.layers[-1]
    assert isinstance(last, AttentionLayer) and last.sliding_window is None
    m = parse({**TEXT, "use_bidirectional_attention": "all"})
    first = m.layers[0]
    assert isinstance(first, AttentionLayer) and first.sliding_window == 512 // 2 + 1


def test_bad_fields_name_the_field() -> None:
    with pytest.raises(ConfigError, match="layer_types"):
        parse({**TEXT, "num_hidden_layers": 2, "layer_types": ["linear", "full_attention"]})
    with pytest.raises(ConfigError, match="num_kv_shared_layers"):
        parse({**TEXT, "num_kv_shared_layers": 30})
    with pytest.raises(ConfigError, match="per_layer_config"):
        parse({**TEXT, "per_layer_config": {"99": {"head_dim": 512}}})


@given(
    layers=st.integers(1, 40),
    shared=st.integers(0, 39),
    keqv=st.booleans(),
    global_kv=st.integers(1, 8),
)
def test_cache_layers_invariants(layers: int, shared: int, keqv: bool, global_kv: int) -> None:
    cfg = {
        **TEXT,
        "num_hidden_layers": layers,
        "num_kv_shared_layers": min(shared, layers - 1),
        "attention_k_eq_v": keqv,
        "num_global_key_value_heads": global_kv,
    }
    m = parse(cfg)
    assert len(m.layers) == layers and [x.index for x in m.layers] == list(range(layers))
    cached = [x for x in m.layers if isinstance(x, AttentionLayer)]
    assert len(cached) == layers - cfg["num_kv_shared_layers"]
    for x in cached:
        wide = x.sliding_window is None
        assert x.head_dim == (512 if wide else 256)
        assert x.num_kv_heads == (global_kv if wide and keqv else 4)


def test_multimodal_wrapper_reads_its_text_config() -> None:
    wrapped = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"]}
    m = parse({**wrapped, "torch_dtype": "bfloat16", "text_config": TEXT})
    assert m.layers == parse(TEXT).layers
    assert any("vision" in note for note in m.assumed)


def test_weights_by_hand() -> None:
    """A small config (hidden 256, 8 heads of 32, global 64, 12 layers, the last 4
    KV-shared, k_eq_v global layers with 1 KV head, PLE 16, vocab 1000, double-wide MLP on
    the shared layers). transformers 5.20.2 ``Gemma4ForCausalLM`` built on the meta device
    holds 9,213,436 values for it besides the tied lm_head, 12 of them its layer_scalar
    buffers (loaded, but no parameters)."""
    cfg = {
        "model_type": "gemma4_text",
        "num_hidden_layers": 12,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "global_head_dim": 64,
        "intermediate_size": 512,
        "num_kv_shared_layers": 4,
        "attention_k_eq_v": True,
        "num_global_key_value_heads": 1,
        "vocab_size": 1000,
        "vocab_size_per_layer_input": 1000,
        "hidden_size_per_layer_input": 16,
        "use_double_wide_mlp": True,
    }
    h = 256
    embeddings = 1000 * h  # embed_tokens (tied lm_head)
    ple = 1000 * 12 * 16 + 12 * 16 * h + 16  # embed_tokens_per_layer, projection, norm
    ple += 12 * (16 * h + h * 16 + h)  # per layer: input gate, projection, post norm
    q_o = lambda hd: 2 * 8 * hd * h + hd  # noqa: E731  q_proj, o_proj, q_norm
    sliding_own = q_o(32) + 2 * 4 * 32 * h + 32  # k_proj, v_proj, k_norm
    global_own = q_o(64) + 1 * 64 * h + 64  # k_proj only (k_eq_v), k_norm
    # layers 0-7 own their KV (7 sliding, 5 global), 8-11 shared (q only; 11 is global)
    attention = 7 * sliding_own + global_own + q_o(32) * 3 + q_o(64)
    assert attention == 7 * 196_672 + 278_656 + 3 * 131_104 + 262_208 == 2_310_880
    mlp = 8 * 3 * h * 512 + 4 * 3 * h * 1024  # double-wide on the shared layers
    norms = 12 * 4 * h + h  # four per layer, the final norm
    c = count_params(parse(cfg))
    assert c.embeddings == embeddings + ple
    assert c.attention == attention
    assert c.dense_mlp == mlp
    assert c.norms == norms
    assert c.lm_head == 0 and c.routed_experts == 0
    assert c.total == 9_213_436 - 12


def test_moe_weights_by_hand() -> None:
    cfg = {
        **TEXT,
        "num_hidden_layers": 6,
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "global_head_dim": 64,
        "intermediate_size": 512,
        "vocab_size": 1000,
        "hidden_size_per_layer_input": 0,
        "num_experts": 4,
        "moe_intermediate_size": 64,
    }
    c = count_params(parse(cfg))
    h = 256
    # Gemma4Router: scale (h), per_expert_scale (4), proj (4 x h); 4 experts of
    # gate_up (2 x 64 x h) and down (h x 64); three more norms per layer
    assert c.routers == 6 * (h + 4 + 4 * h)
    assert c.routed_experts == 6 * 4 * (2 * 64 * h + h * 64)
    assert c.norms == 6 * 7 * h + h
    # transformers 5.20.2 builds 4,960,990 parameters for it (lm_head tied, buffers out)
    assert c.total == 4_960_990 - 6  # its six layer_scalar buffers are no parameters


def test_vllm_groups_by_hand(tmp_path: Path) -> None:
    """vLLM 0.33 (kv_cache_utils ``_get_kv_cache_groups_uniform_page_size``): 15 layers
    own a cache (13 sliding, 2 global) at TP 8 (one KV head per rank): sliding page
    16 x 1,024 = 16,384 B raised to the global page 16 x 2,048 = 32,768 B (block 32);
    group size 2 (the fewest): 7 sliding groups (one padded) + 1 full."""
    p = plan(
        folder(tmp_path, KV_SHARED),
        spec="none",
        engine="vllm",
        kv_budget="8GiB",
        host_budget=0,
        tp=8,
        max_seq_len=32768,
        tokens_per_block=16,
        max_num_batched_tokens=8192,
    )
    e = dict(p.engine.detail) if p.engine else {}
    groups = [
        (g["kind"], g["layers"], g["padding_layers"], g["block_size"]) for g in e["kv_cache_groups"]
    ]
    assert sorted(groups) == sorted(
        [("sliding_window", 2, 0, 32)] * 6
        + [("sliding_window", 1, 1, 32), ("full_attention", 2, 0, 16)]
    )
    assert e["bytes_per_block"] == 2 * 32_768
    assert e["num_gpu_blocks"] == 8 * GIB // 65_536 == 131_072
    # per request: full cdiv(32768, 16) = 2048; sliding 7 x (cdiv(511 + 2 x 8192, 32) + 1)
    per_request = 2048 + 7 * (-(-(511 + 2 * 8192) // 32) + 1)
    assert per_request == 5751
    # the figure vLLM 0.33.0's own code logs for this case (fidelity harness)
    assert e["gpu_kv_cache_tokens"] == int(131_072 / 5751 * 32768) == 746_820


def test_engines_that_do_not_model_it_refuse(tmp_path: Path) -> None:
    target = folder(tmp_path, TEXT)
    # TensorRT-LLM plans it on its V2 manager (tests/test_trtllm_gemma4.py)
    # SGLang 0.5.23 plans the multimodal checkpoint only (tests/test_sglang_gemma4.py)
    with pytest.raises(InvalidArgumentError, match="text-only gemma4_text config"):
        plan(target, spec="none", engine="sglang", kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match="FlashAttention 4"):
        plan(target, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0, kv_dtype="fp8")
    shared = folder(tmp_path / "shared", KV_SHARED)
    with pytest.raises(InvalidArgumentError, match="--pp 2"):
        plan(shared, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0, pp=2)


def test_kvbudget_engine_plans_it(tmp_path: Path) -> None:
    m = load_model(folder(tmp_path, TEXT))
    p = plan(
        m,
        spec="none",
        engine="kvbudget",
        kv_budget="8GiB",
        host_budget=0,
        max_seq_len=32768,
        max_batch_size=4,
    )
    (manager,) = p.managers
    # what grows per token: the 5 global layers, 2 x 4 x 512 x 2 B each
    assert manager.slope_bytes_per_token == 5 * 8192


def test_vllm_with_an_eagle3_head_by_hand(tmp_path: Path) -> None:
    """An EAGLE3 head (one Llama layer, 4 KV heads of 256: 4,096 B per token) after the
    defaults' 25 sliding and 5 global layers. Pages unify to the global page 16 x 8,192 =
    131,072 B: sliding layers and the head at block 32, the global layers at 16, three
    buckets of 25, 5 and 1 layers; group size 1 (the fewest), so 31 groups of one layer.
    vLLM 0.33.0's own code gives the same (fidelity case ``family/gemma4-defaults
    eagle3``: 327,680 blocks, 438,458 tokens)."""
    p = plan(
        folder(tmp_path / "target", TEXT),
        folder(tmp_path / "head", GEMMA4_EAGLE3_HEAD),
        spec="eagle3",
        engine="vllm",
        kv_budget="40GiB",
        host_budget=0,
        max_seq_len=32768,
        tokens_per_block=16,
        max_num_batched_tokens=8192,
    )
    assert p.engine is not None
    e = dict(p.engine.detail)
    groups = sorted(
        (g["kind"], g["layers"], g["draft_layers"], g["block_size"]) for g in e["kv_cache_groups"]
    )
    assert groups == sorted(
        [("sliding_window", 1, 0, 32)] * 25
        + [("full_attention", 1, 0, 16)] * 5
        + [("full_attention", 1, 1, 32)]
    )
    assert e["num_gpu_blocks"] == 40 * GIB // 131_072 == 327_680
    # per request: 25 x (cdiv(511 + 2 x 8192, 32) + 1) + 5 x 2048 + cdiv(32768, 32)
    per_request = 25 * (-(-(511 + 2 * 8192) // 32) + 1) + 5 * 2048 + 1024
    assert per_request == 24_489
    assert e["gpu_kv_cache_tokens"] == int(327_680 / per_request * 32768) == 438_458


ASSISTANT: dict[str, Any] = {
    "model_type": "gemma4_assistant",
    "architectures": ["Gemma4AssistantForCausalLM"],
    "backbone_hidden_size": 2304,
    "use_ordered_embeddings": True,
    "num_centroids": 50,
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "gemma4_text",
        "num_hidden_layers": 4,
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "global_head_dim": 512,
        "intermediate_size": 4096,
        "vocab_size": 1000,
        "hidden_size_per_layer_input": 0,
        "vocab_size_per_layer_input": 0,
        "num_kv_shared_layers": 4,
        "sliding_window": 512,
        "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    },
}


def test_assistant_caches_nothing_and_its_weights_by_hand() -> None:
    """Gemma-4's MTP assistant (vLLM 0.33.0 gemma4_mtp.py): every layer reads the
    target's cache. transformers 5.20.2 ``Gemma4AssistantForCausalLM`` on the meta
    device holds 79,475,948 values for this config besides its tied lm_head, 1,004 of
    them buffers (4 layer_scalar, 1,000 token_ordering)."""
    m = parse_config(ASSISTANT, source="test", name="assistant")
    assert all(isinstance(x, NoCacheLayer) for x in m.layers) and len(m.layers) == 4
    h, b = 1024, 2304
    q_o = lambda hd: 2 * 8 * hd * h + hd  # noqa: E731  q_proj, o_proj, q_norm
    c = count_params(m)
    assert c.attention == 3 * q_o(256) + q_o(512)  # Q-only: the KV is the target's
    assert c.dense_mlp == 4 * 3 * h * 4096
    assert c.norms == 4 * 4 * h + h  # four per layer, the final norm
    assert c.eagle3_fc == 2 * b * h + b * h  # pre_projection, post_projection
    assert c.lm_head == 1000 * h + 50 * h  # its own-width table (tied), the centroids
    assert c.embeddings == 0  # the target's embedding replaces it
    assert c.total == 79_475_948 - 1004


def test_assistant_plans_as_mtp_with_no_cache_of_its_own(tmp_path: Path) -> None:
    target, assistant = folder(tmp_path / "t", TEXT), folder(tmp_path / "a", ASSISTANT)
    args: dict[str, Any] = {
        "engine": "vllm", "kv_budget": "40GiB", "host_budget": 0, "max_seq_len": 32768,
        "tokens_per_block": 16, "max_num_batched_tokens": 8192,
    }  # fmt: skip
    p = plan(target, assistant, **args)
    assert p.spec == "mtp"  # auto: the assistant is an MTP draft
    alone = plan(target, spec="ngram", **args)
    assert p.engine is not None and alone.engine is not None
    # vLLM's pool is the target's alone (fidelity case family/gemma4-defaults mtp)
    for key in ("kv_cache_groups", "num_gpu_blocks", "gpu_kv_cache_tokens"):
        assert p.engine.detail[key] == alone.engine.detail[key]
    config = p.engine.settings["--speculative-config"]
    assert isinstance(config, dict) and config["method"] == "mtp"
    assert config["model"] == assistant
    # SGLang: the text config is refused (tests/test_sglang_gemma4.py plans the assistant)
    with pytest.raises(InvalidArgumentError, match="text-only gemma4_text config"):
        plan(target, assistant, **{**args, "engine": "sglang"})
    with pytest.raises(InvalidArgumentError, match="gemma4_assistant"):
        plan(target, "Qwen/Qwen3-0.6B", spec="mtp", kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match="MTP assistant, not a target model"):
        plan(assistant, spec="none", kv_budget="8GiB", host_budget=0)
