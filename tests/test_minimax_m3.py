"""MiniMax-M3: GQA K/V on every layer, a bf16 index key on the sparse ones, vLLM's pool.

No verbatim MiniMax-M3 config is reachable from this project: the configs are vLLM
0.33.0's ``MiniMaxM3TextConfig`` defaults in the ``minimax_m3_vl`` wrapper
(tests/family_configs.py, shared with the vLLM fidelity harness:
``family/minimax-m3-defaults``, ``family/minimax-m3-pattern``) or variants of them
written here. Expected figures are by hand from vLLM 0.33.0's code (the PyPI wheel):
``models/minimax_m3/nvidia/model.py`` (``MiniMaxM3Attention``,
``MiniMaxM3SparseAttention.get_kv_cache_spec``, ``MiniMaxM3DecoderLayer``,
``MiniMaxM3MoE``, ``MiniMaxM3MLP``), ``models/minimax_m3/common/indexer.py``
(``MiniMaxM3IndexerCache.get_kv_cache_spec``: an ``MLAAttentionSpec`` of one bf16 head),
``models/minimax_m3/common/sparse_attention.py`` (kernel blocks ``[128]``),
``model_executor/layers/linear.py`` (``MinimaxM3QKVParallelLinearWithIndexer``),
``v1/kv_cache_interface.py`` (``UniformTypeKVCacheSpecs``: one group, a block of every
layer's page) and ``v1/core/kv_cache_utils.py`` (capacity); the harness runs that code on
the same configs and agrees with each vLLM figure here. The MTP draft: ``config/
speculative.py`` (``minimax_m3_vl`` -> ``minimax_m3_mtp``, ``n_predict = num_mtp_modules``,
K a multiple of it above it), ``models/minimax_m3/nvidia/mtp.py`` (``MiniMaxM3MTP``: one
``MiniMaxM3DecoderLayer(force_sparse_attn=True, force_moe=True)`` per module, checkpoint
names ``_map_checkpoint_name``), ``v1/spec_decode/llm_base_proposer.py`` (``load_model``:
the draft's layers ``is_draft_layer``; embedding and lm_head shared with the target).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from family_configs import (
    MINIMAX_M3,
    MINIMAX_M3_EAGLE3_HEAD,
    MINIMAX_M3_MTP2,
    MINIMAX_M3_PATTERN,
    folder,
    vllm_plan,
)

from kvbudget import count_params, plan, weights_bytes
from kvbudget.architectures import model_inventory
from kvbudget.dtypes import parse_dtype
from kvbudget.errors import ConfigError, EngineRefusedError, InvalidArgumentError
from kvbudget.layers import AttentionLayer
from kvbudget.model import parse_config

GIB = 1024**3
BF16, FP8 = parse_dtype("bf16"), parse_dtype("fp8")
H, VOCAB = 6144, 200064


def parse(cfg: dict[str, Any]) -> Any:
    return parse_config(cfg, source="test", name="minimax-m3-test")


def with_text(**fields: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(MINIMAX_M3)
    cfg["text_config"].update(fields)
    return cfg


def with_sparse(**fields: Any) -> dict[str, Any]:
    cfg = copy.deepcopy(MINIMAX_M3)
    cfg["text_config"]["sparse_attention_config"].update(fields)
    return cfg


def test_layers_follow_sparse_attention_freq() -> None:
    m = parse(MINIMAX_M3)
    assert m.model_type == "minimax_m3_vl" and len(m.layers) == 60
    assert all(isinstance(x, AttentionLayer) for x in m.layers)
    assert {(x.num_kv_heads, x.head_dim, x.sliding_window) for x in m.layers} == {(4, 128, None)}
    # _sparse_attention_layer_ids: the layers whose sparse_attention_freq entry is non-zero
    assert [x.index for x in m.layers if not x.index_head_dim] == [0, 1, 2]
    assert {x.index_head_dim for x in m.layers[3:]} == {128}
    # num_mtp_modules 1: one MTP module after the 60 layers, sparse (force_sparse_attn)
    assert m.mtp_layers == (
        AttentionLayer(index=60, num_kv_heads=4, head_dim=128, index_head_dim=128),
    )
    assert any("vision tower keeps no KV cache" in note for note in m.assumed)
    pattern = parse(MINIMAX_M3_PATTERN)
    assert [x.index for x in pattern.layers if x.index_head_dim] == [2, 3, 4, 5, 7, 8, 9, 10, 11]


def test_a_config_without_the_patterns_takes_vllms_defaults() -> None:
    """MiniMaxM3TextConfig fills a missing (or null) sparse_attention_config and
    moe_layer_freq with its 60-layer defaults: 3 plain dense layers, 57 sparse MoE."""
    text = {k: v for k, v in MINIMAX_M3["text_config"].items()
            if k not in ("sparse_attention_config", "moe_layer_freq")}  # fmt: skip
    m = parse({**MINIMAX_M3, "text_config": text})
    assert [x.index_head_dim for x in m.layers] == [0] * 3 + [128] * 57
    nulls = parse(with_text(sparse_attention_config=None, moe_layer_freq=None))
    assert count_params(nulls) == count_params(parse(MINIMAX_M3))
    # with another layer count the 60-entry defaults do not fit: vLLM would index past them
    with pytest.raises(ConfigError, match="_freq': has 60 entries but the model has 12 layers"):
        parse({**MINIMAX_M3, "text_config": {**text, "num_hidden_layers": 12}})


def test_bytes_per_token_by_hand() -> None:
    m = parse(MINIMAX_M3)
    plain, sparse = m.layers[0], m.layers[3]
    # FullAttentionSpec: 2 (K, V) x max(1, 4 // tp) heads x 128 x 2 B
    assert plain.bytes_per_token(BF16, 1) == 2 * 4 * 128 * 2 == 2048
    assert plain.bytes_per_token(BF16, 8) == 2 * 1 * 128 * 2 == 512  # replicated KV head
    # + MiniMaxM3IndexerCache: one bf16 key of sparse_index_dim 128, every rank, any KV dtype
    assert sparse.bytes_per_token(BF16, 1) == 2048 + 128 * 2 == 2304
    assert sparse.bytes_per_token(FP8, 1) == 1024 + 256 == 1280
    assert sparse.bytes_per_token(FP8, 8) == 256 + 256 == 512
    total = sum(x.bytes_per_token(BF16, 1) for x in m.layers)
    assert total == 60 * 2048 + 57 * 256 == 137_472


def test_vllm_plan_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, MINIMAX_M3)
    # the sparse and indexer backends page 128 tokens (get_supported_kernel_block_sizes
    # [128]), whatever --tokens-per-block says (kvbudget's default here)
    assert e["block_size"] == 128 and e["settings"]["--block-size"] == 128
    # every spec is a full-attention type of block 128 (FullAttentionSpec and its
    # MLAAttentionSpec subclass): one UniformTypeKVCacheSpecs group of the 60 K/V layers
    # and the 57 index caches, its largest page the K/V one, 128 x 2048 B
    (group,) = e["kv_cache_groups"]
    assert (group["kind"], group["layers"], group["padding_layers"], group["page_bytes"]) == (
        "full_attention+mla",
        117,
        0,
        128 * 2048,
    )
    # a block holds every layer's page: 60 x 262,144 + 57 x 128 x 256 B
    assert e["bytes_per_block"] == 60 * 262_144 + 57 * 32_768 == 17_596_416
    assert e["num_gpu_blocks"] == 40 * GIB // 17_596_416 == 2440
    # one request of 32,768 tokens: cdiv(32768, 128) = 256 blocks
    assert e["blocks_per_request"] == 256
    assert e["max_concurrency"] == 2440 / 256 == 9.53125
    assert e["gpu_kv_cache_tokens"] == int(2440 / 256 * 32768) == 312_320  # the harness's


def test_a_text_config_plans_the_same_pool_and_says_vllm_serves_the_wrapper(
    tmp_path: Path,
) -> None:
    text = plan(folder(tmp_path, MINIMAX_M3["text_config"]), spec="none", engine="vllm",
                kv_budget="40GiB", host_budget=0, max_seq_len=32768)  # fmt: skip
    assert text.engine.detail["num_gpu_blocks"] == 2440  # test_vllm_plan_by_hand's
    (warned,) = [w for w in text.warnings if "minimax_m3_text" in w]
    assert "serve the vision-language checkpoint" in warned


def test_vllm_tp8_fp8_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, MINIMAX_M3, tp=8, kv_dtype="fp8")
    # K/V: one replicated fp8 head a rank, 128 x 2 x 128 x 1 B; the index key stays bf16
    assert e["bytes_per_block"] == 60 * 32_768 + 57 * 32_768 == 3_833_856
    assert e["num_gpu_blocks"] == 40 * GIB // 3_833_856 == 11_202
    assert e["gpu_kv_cache_tokens"] == int(11_202 / 256 * 32768) == 1_433_856


def test_vllm_eagle3_head_joins_the_group_by_hand(tmp_path: Path) -> None:
    head = folder(tmp_path / "head", MINIMAX_M3_EAGLE3_HEAD)
    e = vllm_plan(tmp_path / "target", MINIMAX_M3, draft=head, spec="eagle3", max_draft_len=3)
    # the head's one Llama layer: a FullAttentionSpec of 8 KV heads of 128 at the model's
    # 128-token block, so still one uniform-type group, now its largest page the head's
    (group,) = e["kv_cache_groups"]
    assert (group["layers"], group["draft_layers"], group["page_bytes"]) == (
        118,
        1,
        128 * 2 * 8 * 128 * 2,
    )
    assert e["bytes_per_block"] == 17_596_416 + 524_288 == 18_120_704
    assert e["num_gpu_blocks"] == 40 * GIB // 18_120_704 == 2370
    assert e["gpu_kv_cache_tokens"] == int(2370 / 256 * 32768) == 303_360  # the harness's


def test_mtp_modules_are_sparse_layers_after_the_decoder() -> None:
    two = parse(MINIMAX_M3_MTP2)
    assert [(x.index, x.num_kv_heads, x.index_head_dim) for x in two.mtp_layers] == [
        (12, 8, 128),
        (13, 8, 128),
    ]
    # force_sparse_attn: a module keeps its index key even where no decoder layer is sparse
    dense = parse(with_sparse(sparse_attention_freq=[0] * 60))
    assert {x.index_head_dim for x in dense.layers} == {0}
    assert dense.mtp_layers[0].index_head_dim == 128
    # ... so the fused projection's checks apply to it (index heads = KV heads)
    with pytest.raises(ConfigError, match="sparse_num_index_heads': 2 index heads"):
        parse(with_sparse(sparse_attention_freq=[0] * 60, sparse_num_index_heads=2))
    assert parse(with_text(num_mtp_modules=0)).mtp_layers == ()


def test_vllm_mtp_module_joins_the_group_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, MINIMAX_M3, spec="mtp", max_draft_len=3)
    # the module's sparse layer registers its index cache and its K/V (2 specs, both
    # is_draft): still full-attention types of block 128, one uniform-type group
    (group,) = e["kv_cache_groups"]
    assert (group["layers"], group["draft_layers"], group["page_bytes"]) == (119, 2, 128 * 2048)
    # a block: the target's 17,596,416 B + the module's 128 x 2,048 K/V + 128 x 256 index
    assert e["bytes_per_block"] == 17_596_416 + 262_144 + 32_768 == 17_891_328
    assert e["num_gpu_blocks"] == 40 * GIB // 17_891_328 == 2400
    assert e["blocks_per_request"] == 256  # cdiv(32768, 128): K adds no block here
    assert e["gpu_kv_cache_tokens"] == int(2400 / 256 * 32768) == 307_200  # the harness's
    assert e["settings"]["--speculative-config"] == {"method": "mtp", "num_speculative_tokens": 3}
    # one module runs every step (step k on module k % 1): K = 1 and 5 size the same pool
    for k in (1, 5):
        assert (
            vllm_plan(tmp_path / f"k{k}", MINIMAX_M3, spec="mtp", max_draft_len=k)["num_gpu_blocks"]
            == 2400
        )


def test_vllm_mtp_tp8_fp8_and_pp2_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path / "tp8", MINIMAX_M3, spec="mtp", tp=8, kv_dtype="fp8")
    # the module: one fp8 KV head a rank 128 x 2 x 128 x 1 B, its bf16 index key 32,768 B
    assert e["bytes_per_block"] == 3_833_856 + 32_768 + 32_768 == 3_899_392
    assert e["num_gpu_blocks"] == 40 * GIB // 3_899_392 == 11_014
    assert e["gpu_kv_cache_tokens"] == int(11_014 / 256 * 32768) == 1_409_792
    # PP 2: layers 0-29 and 30-59 (get_pp_indices), the module on the last stage; the
    # largest stage sets the block: 30 sparse layers + the module, 31 x 294,912 B
    pp = vllm_plan(tmp_path / "pp2", MINIMAX_M3, spec="mtp", pp=2)
    assert pp["bytes_per_block"] == 31 * (262_144 + 32_768) == 9_142_272
    assert pp["num_gpu_blocks"] == 40 * GIB // 9_142_272 == 4697
    assert pp["gpu_kv_cache_tokens"] == int(4697 / 256 * 32768) == 601_216


def test_vllm_two_mtp_modules_by_hand(tmp_path: Path) -> None:
    e = vllm_plan(tmp_path, MINIMAX_M3_MTP2, spec="mtp", max_draft_len=2)
    # 12 layers of 8 KV heads (K/V page 128 x 2 x 8 x 128 x 2 = 524,288 B), 9 sparse with a
    # 32,768 B index page, and the two modules' K/V and index pages
    (group,) = e["kv_cache_groups"]
    assert (group["layers"], group["draft_layers"]) == (12 + 9 + 4, 4)
    target = 12 * 524_288 + 9 * 32_768
    assert e["bytes_per_block"] == target + 2 * (524_288 + 32_768) == 7_700_480
    assert e["num_gpu_blocks"] == 40 * GIB // 7_700_480 == 5577
    assert e["gpu_kv_cache_tokens"] == int(5577 / 256 * 32768) == 713_856
    # SpeculativeConfig: num_speculative_tokens above n_predict must be a multiple of it
    assert (
        vllm_plan(tmp_path / "k4", MINIMAX_M3_MTP2, spec="mtp", max_draft_len=4)["num_gpu_blocks"]
        == 5577
    )
    with pytest.raises(InvalidArgumentError, match="3 must be divisible by n_predict=2"):
        vllm_plan(tmp_path / "k3", MINIMAX_M3_MTP2, spec="mtp", max_draft_len=3)


def test_spec_auto_runs_the_mtp_module(tmp_path: Path) -> None:
    p = plan(folder(tmp_path, MINIMAX_M3), spec="auto", engine="vllm", kv_budget="40GiB",
             host_budget=0, max_seq_len=32768)  # fmt: skip
    assert p.engine.settings["--speculative-config"]["method"] == "mtp"
    assert p.engine.detail["num_gpu_blocks"] == 2400  # test_vllm_mtp_module_joins_the_group


def test_vllm_refuses_a_budget_short_of_one_request(tmp_path: Path) -> None:
    # 4 GiB: 244 blocks of 17,596,416 B; one request needs 256 beside the null block
    with pytest.raises(EngineRefusedError, match=r"To serve at least one request"):
        vllm_plan(tmp_path, MINIMAX_M3, kv_budget="4GiB")


def test_weights_by_hand() -> None:
    c = count_params(parse(MINIMAX_M3))
    # MiniMaxM3Attention: q 64 x 128 rows, k and v 4 x 128, o 6144 x 8192, q/k norms 128
    attn = 8192 * H + 2 * 512 * H + H * 8192 + 2 * 128
    # MiniMaxM3SparseAttention adds index_q (4 x 128 rows) and index_k (one head of 128)
    # to the fused qkv_proj, and index_q/index_k norms of 128
    index = 512 * H + 128 * H + 2 * 128
    assert c.attention == 60 * attn + 57 * index == 6_641_448_192
    # layers 3..59: MiniMaxM3MoE, 128 experts of 3 x 3072 x 6144 (w1, w3, w2), a shared
    # expert of intermediate_size x n_shared_experts, the router 128 x 6144 + its bias 128
    assert c.routed_experts == 57 * 128 * 3 * 3072 * H
    assert c.shared_experts == 57 * 3 * 3072 * H
    assert c.routers == 57 * (128 * H + 128)
    # layers 0..2: MiniMaxM3MLP of dense_intermediate_size 12288
    assert c.dense_mlp == 3 * 3 * 12288 * H
    assert c.embeddings == c.lm_head == VOCAB * H
    assert c.norms == 60 * 2 * H + H
    assert c.language_model == 426_174_572_928
    assert c.total == 426_174_572_928 + c.mtp  # test_mtp_weights_by_hand


def test_default_weights_match_transformers() -> None:
    c = count_params(parse(MINIMAX_M3))
    # transformers 5.20.2 MiniMaxM3VLTextModel(MiniMaxM3VLTextConfig(**the text config))
    # on the meta device (no lm_head): 424,945,372,416 parameters, plus 57 x 128
    # e_score_correction_bias buffers (a Parameter in vLLM's MiniMaxM3MoE); no MTP module
    assert c.language_model - c.lm_head == 424_945_372_416 + 57 * 128


def test_mtp_weights_by_hand() -> None:
    c = count_params(parse(MINIMAX_M3))
    # MiniMaxM3MultiTokenPredictorLayer: enorm, hnorm, final_layernorm and the decoder
    # layer's two norms (5 x 6144), eh_proj 6144 x 12288, a sparse attention (as above)
    # and an MoE block (as above); no embedding or lm_head (shared with the target)
    attn = 8192 * H + 2 * 512 * H + H * 8192 + 2 * 128 + 512 * H + 128 * H + 2 * 128
    moe = 128 * 3 * 3072 * H + 3 * 3072 * H + 128 * H + 128
    assert c.mtp == 5 * H + H * 2 * H + attn + moe == 7_491_582_592
    m = parse(MINIMAX_M3)
    extra = weights_bytes(m, include_mtp=True).total_bytes - weights_bytes(m).total_bytes
    # bf16, the router and its bias fp32
    assert extra == (7_491_582_592 - (128 * H + 128)) * 2 + (128 * H + 128) * 4 == 14_984_738_304
    # TP 8: q and o split, the 4 KV / index heads one a rank, index_k and eh_proj whole,
    # experts and the shared expert split 8 ways, the router whole
    attn8 = (1024 + 128 + 128 + 1024 + 128 + 128) * H + 2 * 128 + 2 * 128
    bf16 = 5 * H + 2 * H * H + attn8 + (128 * 3 * 3072 * H + 3 * 3072 * H) // 8
    at8 = weights_bytes(m, tp=8, include_mtp=True).total_bytes - weights_bytes(m, tp=8).total_bytes
    assert at8 == bf16 * 2 + (128 * H + 128) * 4 == 2_011_756_032
    names = {w.name for w in model_inventory(m)}
    # the checkpoint's names (MiniMaxM3MTP._map_checkpoint_name strips language_model.
    # and .mtp.)
    for name in ("eh_proj", "self_attn.index_k_proj", "block_sparse_moe.experts.w2",
                 "final_layernorm"):  # fmt: skip
        assert f"language_model.model.mtp.layers.0.{name}" in names


def test_weight_bytes_by_hand() -> None:
    m = parse(MINIMAX_M3)
    w = weights_bytes(m, tp=1)
    # GateLinear(params_dtype=torch.float32) and the fp32 e_score_correction_bias
    assert w.routers_bytes == 57 * (128 * H + 128) * 4 == 179_335_680
    assert w.total_bytes == (426_174_572_928 - 57 * (128 * H + 128)) * 2 + 179_335_680
    w8 = weights_bytes(m, tp=8)
    # TP 8: q and o split 8 ways, the 4 KV heads and 4 index heads replicated one a rank,
    # the index key head on every rank
    attn8 = (1024 * H + 2 * 128 * H + H * 1024 + 2 * 128) * 60 + (128 * H + 128 * H + 256) * 57
    assert w8.attention_bytes == attn8 * 2


def test_vl_weights_sit_under_language_model() -> None:
    names = {w.name for w in model_inventory(parse(MINIMAX_M3))}
    assert "language_model.model.layers.3.self_attn.index_k_proj" in names
    assert "language_model.model.layers.3.block_sparse_moe.gate" in names
    # the checkpoint's expert names (MiniMaxM3Model.get_expert_mapping: w1, w2, w3)
    assert "language_model.model.layers.3.block_sparse_moe.experts.w2" in names
    assert "language_model.lm_head" in names
    text = parse(MINIMAX_M3["text_config"])
    assert "model.layers.0.mlp.gate_proj" in {w.name for w in model_inventory(text)}


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (with_sparse(sparse_num_index_heads=2), "sparse_num_index_heads': 2 index heads"),
        (with_sparse(sparse_index_dim=64), "sparse_index_dim': 64"),
        (with_sparse(sparse_attention_freq=[1] * 59), "has 59 entries"),
        (with_text(moe_layer_freq="dense"), "moe_layer_freq': expected a list"),
        (with_text(hidden_act="silu"), "hidden_act': 'silu' is not modelled"),
        (with_text(attention_output_gate=True), "attention_output_gate"),
        (with_text(qk_norm_type="per_layer"), "qk_norm_type"),
        (with_text(shared_intermediate_size=1024), "shared_intermediate_size': 1024"),
    ],
)
def test_configs_vllm_cannot_build_are_refused(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        parse(cfg)
    assert err.value.field is not None and err.value.field.startswith("text_config.")


def test_engines_that_do_not_model_it_refuse(tmp_path: Path) -> None:
    # SGLang 0.5.23's pool is modelled (tests/test_sglang_minimax.py), not its MTP
    target = folder(tmp_path, MINIMAX_M3)
    with pytest.raises(
        InvalidArgumentError,
        match=r"manager\); plan it with --engine vllm or --engine sglang or --engine kvbudget$",
    ):
        plan(target, spec="none", engine="trtllm", kv_budget="8GiB", host_budget=0)
    for engine in ("sglang", "trtllm"):  # and so with the MTP module
        with pytest.raises(InvalidArgumentError, match=r"--engine vllm"):
            plan(target, spec="mtp", engine=engine, kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match=r"has no MTP layers"):
        plan(folder(tmp_path / "no-mtp", with_text(num_mtp_modules=0)), spec="mtp",
             engine="vllm", kv_budget="8GiB", host_budget=0)  # fmt: skip
    odd = folder(tmp_path / "odd", with_sparse(sparse_block_size=64))
    with pytest.raises(InvalidArgumentError, match=r"sparse_block_size 64"):
        plan(odd, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0)
    with pytest.raises(InvalidArgumentError, match=r"nvfp4 KV cache"):
        plan(target, spec="none", engine="vllm", kv_budget="8GiB", host_budget=0,
             kv_dtype="nvfp4")  # fmt: skip


def test_kvbudget_engine_counts_the_index_keys(tmp_path: Path) -> None:
    p = plan(folder(tmp_path, MINIMAX_M3), spec="none", engine="kvbudget", kv_budget="40GiB",
             host_budget=0, max_seq_len=32768, max_batch_size=256)  # fmt: skip
    # 137,472 B a token (test_bytes_per_token_by_hand), in blocks of 32 tokens (kvbudget's
    # default): 40 GiB // (32 x 137,472 B) = 9763 blocks
    assert p.capacity.tokens_per_block == 32
    assert p.capacity.gpu_blocks == 40 * GIB // (32 * 137_472) == 9763
    assert p.capacity.tokens == 9763 * 32 == 312_416
    # with the MTP module: its 2,304 B a token in the same manager (as MTP layers are):
    # 40 GiB // (32 x (137,472 + 2,304) B) = 9602 blocks
    mtp = plan(folder(tmp_path / "mtp", MINIMAX_M3), spec="mtp", engine="kvbudget",
               kv_budget="40GiB", host_budget=0, max_seq_len=32768, max_batch_size=256)  # fmt: skip
    assert mtp.capacity.gpu_blocks == 40 * GIB // (32 * 139_776) == 9602


# A tiny MiniMax-M3 checkpoint as the vision-language wrapper stores it (vLLM's
# MiniMaxM3Model.load_weights names: q/k/v/index_q/index_k projections apart, experts
# experts.{j}.w1/w3/w2, the router stored fp32): hidden 64, 4 heads and 2 KV (and index)
# heads of 16, layer 0 plain and dense (MLP 48), layer 1 sparse with 2 experts of 32 and
# one shared expert, vocabulary 128.
_TINY_TEXT: dict[str, Any] = {
    **MINIMAX_M3["text_config"],
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 32,
    "dense_intermediate_size": 48,
    "shared_intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 2,
    "moe_layer_freq": [0, 1],
    "sparse_attention_config": {
        **MINIMAX_M3["text_config"]["sparse_attention_config"],
        "sparse_index_dim": 16,
        "sparse_num_index_heads": 2,
        "sparse_attention_freq": [0, 1],
        "sparse_disable_index_value": [0, 1],
    },
}


def _tiny_tensors() -> dict[str, tuple[str, tuple[int, ...]]]:
    """The tiny checkpoint's tensors: name -> (safetensors dtype, shape)."""
    p = "language_model.model"
    bf16: dict[str, tuple[int, ...]] = {"embed_tokens": (128, 64), "norm": (64,)}
    for i in (0, 1):
        attn = {"q_proj": (64, 64), "k_proj": (32, 64), "v_proj": (32, 64), "o_proj": (64, 64)}
        for name, shape in {**attn, "q_norm": (16,), "k_norm": (16,)}.items():
            bf16[f"layers.{i}.self_attn.{name}"] = shape
        for norm in ("input_layernorm", "post_attention_layernorm"):
            bf16[f"layers.{i}.{norm}"] = (64,)
    for name, shape in (("gate_proj", (48, 64)), ("up_proj", (48, 64)), ("down_proj", (64, 48))):
        bf16[f"layers.0.mlp.{name}"] = shape
    for name, shape in (("index_q_proj", (32, 64)), ("index_k_proj", (16, 64)),
                        ("index_q_norm", (16,)), ("index_k_norm", (16,))):  # fmt: skip
        bf16[f"layers.1.self_attn.{name}"] = shape
    moe = "layers.1.block_sparse_moe"
    for name, shape in (("gate_proj", (32, 64)), ("up_proj", (32, 64)), ("down_proj", (64, 32))):
        bf16[f"{moe}.shared_experts.{name}"] = shape
    for j in (0, 1):
        for name, shape in (("w1", (32, 64)), ("w3", (32, 64)), ("w2", (64, 32))):
            bf16[f"{moe}.experts.{j}.{name}"] = shape
    t = {f"{p}.{name}.weight": ("BF16", shape) for name, shape in bf16.items()}
    t[f"{p}.{moe}.gate.weight"] = ("F32", (2, 64))
    t[f"{p}.{moe}.e_score_correction_bias"] = ("F32", (2,))
    t["language_model.lm_head.weight"] = ("BF16", (128, 64))
    # the MTP module, as the bundled checkpoint stores it (MiniMaxM3MTP._map_checkpoint_name)
    mtp = "language_model.model.mtp.layers.0"
    for name, shape in {
        **{f"self_attn.{n}": (32 if n in ("k_proj", "v_proj", "index_q_proj") else 64, 64)
           for n in ("q_proj", "k_proj", "v_proj", "o_proj", "index_q_proj")},
        "self_attn.index_k_proj": (16, 64),
        **{f"self_attn.{n}": (16,) for n in ("q_norm", "k_norm", "index_q_norm", "index_k_norm")},
        **{n: (64,) for n in ("enorm", "hnorm", "input_layernorm", "post_attention_layernorm",
                              "final_layernorm")},
        "eh_proj": (64, 128),
        **{f"block_sparse_moe.shared_experts.{n}": (32, 64) for n in ("gate_proj", "up_proj")},
        "block_sparse_moe.shared_experts.down_proj": (64, 32),
        **{f"block_sparse_moe.experts.{j}.{n}": (64, 32) if n == "w2" else (32, 64)
           for j in (0, 1) for n in ("w1", "w3", "w2")},
    }.items():  # fmt: skip
        t[f"{mtp}.{name}.weight"] = ("BF16", shape)
    t[f"{mtp}.block_sparse_moe.gate.weight"] = ("F32", (2, 64))
    t[f"{mtp}.block_sparse_moe.e_score_correction_bias"] = ("F32", (2,))
    return t


def test_a_checkpoints_headers_match_the_inventory_tensor_by_tensor(tmp_path: Path) -> None:
    from hub_server import header_sum, sharded

    from kvbudget.model import load_model

    shards = {"model-00001-of-00001.safetensors": _tiny_tensors()}
    cfg = {**MINIMAX_M3, "text_config": _TINY_TEXT}
    folder(tmp_path, cfg)
    for name, data in sharded(shards).items():
        (tmp_path / name).write_bytes(data)
    model = load_model(tmp_path)
    # bf16 unless said: embeddings and lm_head 128 x 64 x 2 = 16,384 each; attention
    # (q 64, k 32, v 32 rows of 64, o 64 x 64, q/k norms 16) 24,640 a layer; layer 0's MLP
    # 3 x 48 x 64 x 2 = 18,432; layer 1's indexer (index_q 32, index_k 16 rows, two
    # norms of 16) 6,208, its fp32 router 2 x 64 x 4 + bias 2 x 4 = 520, shared expert
    # 3 x 32 x 64 x 2 = 12,288, experts 2 x 12,288; norms 4 x 128 + 128
    layer0 = 24_640 + 18_432 + 256
    layer1 = 24_640 + 6_208 + 520 + 12_288 + 24_576 + 256
    total = 2 * 16_384 + layer0 + layer1 + 128
    # the MTP module: layer 1's attention, indexer, router, shared expert and experts,
    # its 5 norms 5 x 128 and eh_proj 64 x 128 x 2 = 16,384
    mtp = 24_640 + 6_208 + 520 + 12_288 + 24_576 + 640 + 16_384
    assert total + mtp == header_sum(shards) == 144_712 + 85_256
    loaded = weights_bytes(model)
    assert loaded.source == "safetensors headers" and loaded.total_bytes == total
    assert loaded.other_bytes == 0  # every stored tensor matched an inventory tensor
    assert weights_bytes(model, source="inventory").total_bytes == total
    with_mtp = weights_bytes(model, include_mtp=True)
    assert (with_mtp.total_bytes, with_mtp.mtp_bytes, with_mtp.other_bytes) == (
        total + mtp,
        mtp,
        0,
    )
    assert weights_bytes(model, include_mtp=True, source="inventory").total_bytes == total + mtp
    # TP 2: q, o and the MLPs halved, one of 2 KV and index heads a rank, index_k, the
    # router and the norms whole; the vocabulary's 128 rows split in two
    attn2 = 4_096 + 2 * 2_048 + 4_096 + 64
    layer0_2 = attn2 + 18_432 // 2 + 256
    layer1_2 = attn2 + 2_048 + 2_048 + 64 + 520 + 12_288 // 2 + 24_576 // 2 + 256
    at_tp2 = weights_bytes(model, tp=2)
    assert at_tp2.total_bytes == 2 * 8_192 + layer0_2 + layer1_2 + 128 == 74_056
    assert at_tp2.other_bytes == 0


def test_minimax_m2s_mtp_modules_stay_refused() -> None:
    # vLLM 0.33.0 rewrites only minimax_m3_vl / minimax_m3_mtp configs to MiniMaxM3MTP
    # (config/speculative.py); MiniMax-M2's three num_mtp_modules have no draft there
    with pytest.raises(
        InvalidArgumentError,
        match=r"3 MTP module\(s\) \(num_mtp_modules\) are not modelled "
        r"\(vLLM builds no MTP draft for 'minimax_m2'\)",
    ):
        plan("MiniMaxAI/MiniMax-M2", spec="mtp", engine="vllm", kv_budget="8GiB", host_budget=0)
