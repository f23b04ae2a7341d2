"""DeepSeek-V4 and V4.1 in kvbudget's own cache (``--engine kvbudget``).

A compressed layer (:class:`~kvbudget.layers.CompressedMLALayer`) keeps, in the project's
own terms (there is no engine to compare with; the contract is the ledger, DESIGN rules 2,
3 and 8):

* growing: one entry per ``ratio`` tokens, the latent (``head_dim`` values) and on the
  ratio-4 layers the indexer key (``index_head_dim`` fp8 values and an fp32 scale per
  128), in the kv blocks: exact when ``tokens_per_block`` is a multiple of every ratio
  and an entry is whole bytes a token;
* window groups (``window_parts``): the window cache (``sliding_window`` tokens of one
  latent, every layer; the MTP layers' only cache) and each compressor's fp32 inputs of
  the ``coff x ratio`` tokens it pools next (kv and score of ``coff x dim`` values;
  ``coff`` 2 at ratio 4), the indexer's compressor too.

V4.1's layers (:class:`~kvbudget.layers.SharedCompressedMLALayer`) share compressed caches:
only a KV source keeps entries (ratio 1 or 2; its indexer key where it is an index source
too), every layer its window cache, a ratio-2 source its compressor's inputs of a pair.

Window groups hold ``window + lookahead`` tokens at worst-case block alignment:
``ceil((window + lookahead - 1) / tokens_per_block) + 1`` blocks a sequence. The configs
are tests/family_configs.py's (transformers 5.20.2 ``DeepseekV4Config`` defaults; the
8-layer sliding variant) or a small one written here.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from family_configs import DEEPSEEK_V4, DEEPSEEK_V4_SLIDING, DEEPSEEK_V41_RINGS, folder
from hypothesis import settings
from test_cache_stateful import SETTINGS, CacheMachine

import kvbudget
from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.cost import WindowGroup
from kvbudget.errors import InvalidArgumentError
from kvbudget.plan_types import Plan

GIB = 1024**3
A, B = RequestId("a"), RequestId("b")
LATENT = 512 * 2  # one bf16 latent (head_dim 512)
INDEX_KEY = 128 + 128 // 128 * 4  # index_head_dim 128 fp8 values + one fp32 scale: 132


def own_plan(cfg: dict[str, Any], tmp_path: Path, **kwargs: Any) -> Plan:
    args: dict[str, Any] = {
        "engine": "kvbudget",
        "spec": "mtp",
        "kv_dtype": "bf16",
        "tokens_per_block": 128,
        "kv_budget": 8 * GIB,
        "host_budget": 0,
        "max_seq_len": 32768,
        "max_batch_size": 16,
        **kwargs,
    }
    return kvbudget.plan(folder(tmp_path, cfg), **args)


def test_sliding_variant_by_hand(tmp_path: Path) -> None:
    # 2 window-only layers, 3 x (ratio 4 with the indexer, ratio 128), 3 MTP layers
    # (window only), packed in the target's manager; lookahead 3 (--max-draft-len)
    p = own_plan(DEEPSEEK_V4_SLIDING, tmp_path)
    (target,) = p.managers
    assert (target.layers, target.num_layers) == ("all", 11)
    # growing: (1,024 + 132) / 4 = 289 on a ratio-4 layer, 1,024 / 128 = 8 on a ratio-128
    assert (LATENT + INDEX_KEY) % 4 == 0 and LATENT % 128 == 0
    assert target.slope_bytes_per_token == 3 * ((LATENT + INDEX_KEY) // 4 + LATENT // 128) == 891
    # window 8: the ratio-4 compressors, 2 x 2 x 512 x 4 + the indexer's 2 x 2 x 128 x 4
    w8 = 3 * (2 * 2 * 512 * 4 + 2 * 2 * 128 * 4)
    # window 128: every layer's window cache (11 x 1,024) and the ratio-128 compressors
    # (2 x 1 x 512 x 4 each)
    w128 = 11 * LATENT + 3 * 2 * 512 * 4
    assert (w8, w128) == (30_720, 23_552)
    # blocks a sequence: ceil((8 + 3 - 1) / 128) + 1 = 2, ceil((128 + 3 - 1) / 128) + 1 = 3
    assert target.window_groups == (
        WindowGroup(window_tokens=8, num_layers=3, bytes_per_token=w8, blocks_per_seq=2),
        WindowGroup(window_tokens=128, num_layers=11, bytes_per_token=w128, blocks_per_seq=3),
    )
    window_bytes = 16 * 128 * (2 * w8 + 3 * w128)
    assert target.fixed_bytes == target.window_bytes == window_bytes == 270_532_608
    assert (target.state_bytes_per_seq, target.cached_states) == (0, 0)
    blocks = (8 * GIB - window_bytes) // (891 * 128)
    assert blocks == 72_946 and p.capacity.gpu_blocks == blocks
    assert target.gpu.padding_bytes == 8 * GIB - window_bytes - blocks * 114_048 == 56_576
    pools = [(x.kind, x.window_tokens, x.blocks, x.bytes) for x in p.engine.pools]
    assert pools == [
        ("kv", None, blocks, 8 * GIB - window_bytes),
        ("window", 8, 2 * 16, 2 * 16 * 128 * w8),
        ("window", 128, 3 * 16, 3 * 16 * 128 * w128),
    ]


def test_what_it_cannot_hold_exactly_is_refused(tmp_path: Path) -> None:
    # 32-token blocks would split a ratio-128 entry over 4 blocks
    with pytest.raises(InvalidArgumentError, match=r"needs a multiple of 128 \(e\.g\."):
        own_plan(DEEPSEEK_V4, tmp_path, tokens_per_block=32)
    # the fp8_ds_mla row (448 fp8 + 64 bf16 values, 8 scales, a pad byte: 584 B) per 128
    # tokens is 4.5625 bytes a token
    with pytest.raises(InvalidArgumentError, match=r"584 bytes per 128 tokens.*--kv-dtype bf16"):
        own_plan(DEEPSEEK_V4, tmp_path / "fp8", kv_dtype="fp8")


def test_the_cache_keeps_window_blocks_beside_the_compressed_blocks(tmp_path: Path) -> None:
    p = own_plan(DEEPSEEK_V4, tmp_path, max_batch_size=2, max_seq_len=8192)
    cache = SpecDecodeCache.from_plan(p)
    assert cache.roles == ("target",) and cache.prefix_reuse
    prompt = list(range(1000, 1300))  # 300 tokens: 3 blocks of 128
    cache.admit(A, prompt)
    assert len(cache.block_table(A, "target")) == 3
    # the window 8 and window 128 groups keep the blocks of the tokens token 300 reads:
    # 293.. (block 2) and 173.. (blocks 1 and 2)
    tables = cache.window_tables(A, "target")
    assert [(first, len(ids)) for first, ids in tables] == [(2, 1), (1, 2)]
    cache.reserve(A, 4)
    cache.commit(A, [1, 2])  # two of four accepted: the rest rolls back
    assert (cache.num_tokens(A), cache.num_reserved(A)) == (302, 0)
    # the window pools: blocks_per_seq x max_batch_size blocks each, 2 x 2 and 3 x 2
    stats = cache.stats()
    assert [stats.pool("target", "gpu", f"window{w}").total_blocks for w in (8, 128)] == [4, 6]
    assert [stats.pool("target", "gpu", f"window{w}").used_blocks for w in (8, 128)] == [1, 2]
    cache.free(A)
    # MTP hashes a block with the token after it: B follows block 1 with A's token 256,
    # so two blocks hit, the window blocks they need at 256 tokens (block 1 of each
    # group) still cached
    assert cache.admit(B, [*prompt[:257], 7]) == 256
    cache.check_invariants()


def test_v41_shared_sources_by_hand(tmp_path: Path) -> None:
    # family/deepseek-v41-rings: 8 layers of ratios 0, 2, 2, 2, 2, 1, 1, 1; KV sources
    # 1..5 (each its own), index source 1; ngram, lookahead 3; 32-token blocks (even:
    # whole ratio-2 entries a block)
    p = own_plan(DEEPSEEK_V41_RINGS, tmp_path, spec="ngram", tokens_per_block=32)
    (target,) = p.managers
    # growing: source 1 (1,024 + 132) / 2 = 578, sources 2..4 1,024 / 2 = 512, source 5
    # (ratio 1) 1,024; layers 0, 6 and 7 read another's cache or none
    assert target.slope_bytes_per_token == 578 + 3 * 512 + 1_024 == 3_138
    # window 2: the ratio-2 sources' compressor inputs, 2 x 512 x 4 each; window 128: the
    # 8 window caches. Blocks a sequence: ceil((2 + 3 - 1) / 32) + 1 = 2 and
    # ceil((128 + 3 - 1) / 32) + 1 = 6
    assert target.window_groups == (
        WindowGroup(window_tokens=2, num_layers=4, bytes_per_token=16_384, blocks_per_seq=2),
        WindowGroup(window_tokens=128, num_layers=8, bytes_per_token=8_192, blocks_per_seq=6),
    )
    window_bytes = 16 * 32 * (2 * 16_384 + 6 * 8_192)
    assert target.fixed_bytes == window_bytes == 41_943_040
    blocks = (8 * GIB - window_bytes) // (3_138 * 32)
    assert blocks == 85_125 and p.capacity.gpu_blocks == blocks
    # fp8: 584-byte entries are whole bytes a token at ratio 2 (292), so no refusal
    fp8 = own_plan(DEEPSEEK_V41_RINGS, tmp_path / "fp8", spec="none", kv_dtype="fp8",
                   tokens_per_block=32)  # fmt: skip
    assert fp8.managers[0].slope_bytes_per_token == (584 + 132) // 2 + 3 * 292 + 584 == 1_818
    # an odd block size splits a ratio-2 entry
    with pytest.raises(InvalidArgumentError, match="needs a multiple of 2"):
        own_plan(DEEPSEEK_V41_RINGS, tmp_path / "odd", spec="none", tokens_per_block=33)


# --------------------------------------------------------------------------- stateful

# A small DeepSeek-V4: one window-only layer, one ratio-4 layer with the indexer, one MTP
# layer; head_dim 16 (bf16 latent 32 B), index_head_dim 8 (8 B key), an 8-token window,
# 4-token blocks, lookahead 3. By hand:
#   kv: (32 + 8) / 4 = 10 B a token, 40 B a block
#   window 8: 3 window caches x 32 + compressor 2 x 2 x 16 x 4 + indexer's 2 x 2 x 8 x 4
#             = 96 + 256 + 128 = 480 B a token; ceil((8 + 3 - 1) / 4) + 1 = 4 blocks
#   fixed: 3 sequences x 4 x 4 x 480 = 23,040
TINY_FIXED = 23_040


def tiny_v4() -> dict[str, Any]:
    cfg = copy.deepcopy(DEEPSEEK_V4)
    cfg.update(
        num_hidden_layers=2,
        layer_types=["sliding_attention", "compressed_sparse_attention"],
        mlp_layer_types=["moe", "moe"],
        head_dim=16,
        qk_rope_head_dim=8,
        index_head_dim=8,
        sliding_window=8,
        num_nextn_predict_layers=1,
        hidden_size=64,
        num_attention_heads=4,
        q_lora_rank=16,
        o_lora_rank=16,
        o_groups=2,
        n_routed_experts=4,
        index_n_heads=2,
        vocab_size=4096,
    )
    return cfg


def tiny_plan_v4(tmp_path: Path) -> Plan:
    return own_plan(
        tiny_v4(),
        tmp_path,
        kv_budget=TINY_FIXED + 16 * 40,
        host_budget=4 * 40,
        max_seq_len=64,
        max_batch_size=3,
        tokens_per_block=4,
    )


def test_the_small_config_by_hand(tmp_path: Path) -> None:
    (target,) = tiny_plan_v4(tmp_path).managers
    assert (target.slope_bytes_per_token, target.block_bytes) == (10, 40)
    assert target.window_groups == (
        WindowGroup(window_tokens=8, num_layers=3, bytes_per_token=480, blocks_per_seq=4),
    )
    assert (target.fixed_bytes, target.gpu.blocks, target.host.blocks) == (TINY_FIXED, 16, 4)


def test_window_and_compressed_blocks_stay_consistent(tmp_path: Path) -> None:
    """The generic machine (random admit / reserve / commit / free / preempt, invariants
    after every step, every running request reading its own kv bytes back through
    eviction and host offload) on the small DeepSeek-V4's plan."""
    pytest.importorskip("torch")
    machine = type(
        "V4Machine",
        (CacheMachine,),
        {"plan": tiny_plan_v4(tmp_path), "device": "cpu", "can_swap": False},
    )
    machine.TestCase.settings = settings(SETTINGS, max_examples=60)
    machine.TestCase("runTest").runTest()
