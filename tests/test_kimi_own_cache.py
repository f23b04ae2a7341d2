"""Kimi-Linear and Kimi K3 in kvbudget's own cache (``--engine kvbudget``).

KDA is one more recurrent-state kind: each KDA layer's state
(:class:`~kvbudget.layers.KimiDeltaLayer`: a packed q/k/v conv state in the model dtype and
a ``heads x head_dim x head_dim`` recurrent state, float32 for Kimi-Linear's layer, in the
state dtype for Kimi K3's full-rank-gate layer) is part of the request's state slot, the
MLA latents (``kv_lora_rank + qk_rope_head_dim`` a token and layer) grow in the kv blocks,
and Kimi K3's MTP layers (MLA) are the draft in lockstep, packed in the target's manager as
Qwen3-Next's are (or their own manager with ``separate_draft_cache``). There is no engine
to compare with: the contract is the ledger (DESIGN, rules 2, 3 and 7; ``kvbudget.cost``:
``(1 + lookahead)`` states a running slot, conv rows ``conv_kernel - 1 + lookahead``; one
state of ``conv_kernel - 1`` rows a cached state). The configs are the family configs of
tests/family_configs.py (27 layers: 21 KDA of 32 heads x 128 with a 4-tap conv, 6 MLA of a
512 + 64 latent) or a small one written here; every expected figure is by hand.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from family_configs import KIMI_K3, KIMI_LINEAR, folder
from hypothesis import settings
from hypothesis.stateful import invariant
from test_cache_stateful import SETTINGS, CacheMachine, pattern

import kvbudget
from kvbudget.cache import RequestId, SpecDecodeCache
from kvbudget.errors import OutOfBlocksError
from kvbudget.plan_types import Plan

GIB = 1024**3
KV_BUDGET = 8 * GIB
BATCH = 16
KDA_LAYERS = 21
# one KDA layer at TP 1: 32 heads x 128, so q, k and v convs of 4,096 channels each
CONV_CHANNELS = 3 * 32 * 128  # 12,288
RECURRENT_VALUES = 32 * 128 * 128  # 524,288
MLA_BYTES = (512 + 64) * 2  # one bf16 latent a token and layer: 1,152 B
A, B, C = (RequestId(x) for x in "abc")


def own_plan(cfg: dict[str, Any], tmp_path: Path, **kwargs: Any) -> Plan:
    args: dict[str, Any] = {
        "engine": "kvbudget",
        "kv_budget": KV_BUDGET,
        "host_budget": 0,
        "max_seq_len": 32768,
        "max_batch_size": BATCH,
        **kwargs,
    }
    return kvbudget.plan(folder(tmp_path, cfg), **args)


def test_kimi_linear_state_slots_beside_mla_blocks(tmp_path: Path) -> None:
    p = own_plan(KIMI_LINEAR, tmp_path, spec="none")
    (target,) = p.managers
    # the 6 MLA layers grow; the 21 KDA layers keep a state each
    assert target.num_layers == 27
    assert target.slope_bytes_per_token == 6 * MLA_BYTES == 6_912
    # no speculation: one state a slot, conv rows 4 - 1 = 3 in bf16, the recurrent state
    # float32 (KimiDeltaLayer without a full-rank gate): 21 x (73,728 + 2,097,152)
    per_layer = 3 * CONV_CHANNELS * 2 + RECURRENT_VALUES * 4
    assert per_layer == 73_728 + 2_097_152 == 2_170_880
    assert target.state_bytes_per_seq == KDA_LAYERS * per_layer == 45_588_480
    assert target.state_bytes_per_checkpoint == 45_588_480
    assert target.cached_states == BATCH  # prefix caching on: max_batch_size of them
    fixed = BATCH * 45_588_480 + BATCH * 45_588_480
    assert target.fixed_bytes == fixed == 1_458_831_360
    # rule 3: the fixed cost first, then whole 32-token blocks of 6,912 x 32 = 221,184 B
    blocks = (KV_BUDGET - fixed) // 221_184
    assert blocks == 32_240 and target.gpu.blocks == blocks
    assert target.gpu.padding_bytes == KV_BUDGET - fixed - blocks * 221_184 == 131_072
    pools = {(x.kind, x.tier): (x.blocks, x.bytes) for x in p.engine.pools}
    assert pools == {
        ("kv", "gpu"): (32_240, KV_BUDGET - fixed),
        ("state", "gpu"): (BATCH, BATCH * 45_588_480),
        ("checkpoint", "gpu"): (BATCH, BATCH * 45_588_480),
    }
    assert sum(x.bytes for x in p.engine.pools) == KV_BUDGET
    assert p.capacity.tokens == 32_240 * 32 and p.capacity.max_concurrency == BATCH


def test_kimi_linear_state_is_float32_whatever_the_state_dtype(tmp_path: Path) -> None:
    # KimiDeltaLayer without a full-rank gate keeps its recurrent state float32; the
    # conv state follows --state-dtype (fp32: 4 bytes a value)
    p = own_plan(KIMI_LINEAR, tmp_path, spec="none", state_dtype="fp32")
    (target,) = p.managers
    assert target.state_bytes_per_seq == KDA_LAYERS * (3 * CONV_CHANNELS * 4 + RECURRENT_VALUES * 4)
    bf16 = own_plan(KIMI_LINEAR, tmp_path / "bf16", spec="none", state_dtype="bf16")
    assert bf16.managers[0].state_bytes_per_seq == 45_588_480


def test_kimi_k3_mtp_in_lockstep_with_lookahead_states(tmp_path: Path) -> None:
    p = own_plan(KIMI_K3, tmp_path, spec="mtp")
    assert p.capacity.lookahead_tokens == 3  # --max-draft-len's default
    (target,) = p.managers  # the MTP layer packed in the target's manager
    assert (target.layers, target.num_layers) == ("all", 28)
    assert target.slope_bytes_per_token == 7 * MLA_BYTES == 8_064  # 6 MLA + the MTP layer
    # a running slot: 1 + 3 states (the state after each unverified draft token), each
    # with 4 - 1 + 3 = 6 conv rows in bf16 and the recurrent state in the state dtype,
    # auto: float32 (the family's ssm_state_dtype)
    running = KDA_LAYERS * (6 * CONV_CHANNELS * 2 + RECURRENT_VALUES * 4)
    assert running == 21 * (147_456 + 2_097_152) == 47_136_768
    assert target.state_bytes_per_seq == 4 * running == 188_547_072
    assert target.state_bytes_per_checkpoint == 45_588_480  # one state, 3 conv rows
    fixed = BATCH * 188_547_072 + BATCH * 45_588_480
    assert target.fixed_bytes == fixed == 3_746_168_832
    blocks = (KV_BUDGET - fixed) // (8_064 * 32)
    assert blocks == 18_770 and p.capacity.gpu_blocks == blocks

    # the MTP layer as its own manager: the same blocks in both (rule 3: T = (B - It - Id)
    # / (St + Sd), Id = 0 and St + Sd = 6,912 + 1,152), the draft keeps no state
    sep = own_plan(KIMI_K3, tmp_path / "sep", spec="mtp", separate_draft_cache=True)
    t, d = sep.managers
    assert (t.slope_bytes_per_token, d.slope_bytes_per_token) == (6_912, 1_152)
    assert (t.fixed_bytes, d.fixed_bytes) == (fixed, 0)
    assert t.gpu.blocks == d.gpu.blocks == blocks


def test_kimi_k3_state_dtype_and_tp(tmp_path: Path) -> None:
    # the full-rank-gate layer stores its recurrent state in --state-dtype: bf16 halves it
    bf16 = own_plan(KIMI_K3, tmp_path, spec="mtp", state_dtype="bf16")
    running = KDA_LAYERS * (6 * CONV_CHANNELS * 2 + RECURRENT_VALUES * 2)
    assert bf16.managers[0].state_bytes_per_seq == 4 * running == 100_466_688
    # TP 4: 8 heads a rank (conv 3,072 channels, recurrent 8 x 128 x 128); the MLA latent
    # is replicated on every rank (rule 6)
    tp4 = own_plan(KIMI_K3, tmp_path / "tp4", spec="mtp", tp=4)
    (target,) = tp4.managers
    assert target.slope_bytes_per_token == 8_064
    per_rank = KDA_LAYERS * (6 * 3_072 * 2 + 8 * 128 * 128 * 4)
    assert target.state_bytes_per_seq == 4 * per_rank == 47_136_768


def test_the_cache_enforces_state_slots_and_rolls_back(tmp_path: Path) -> None:
    p = own_plan(KIMI_K3, tmp_path, spec="mtp", max_batch_size=2, max_seq_len=8192)
    cache = SpecDecodeCache.from_plan(p)
    assert cache.roles == ("target",) and cache.prefix_reuse
    assert cache.max_reserve_tokens == 4  # 3 draft tokens + the bonus token
    system = list(range(1000, 1100))  # 100 tokens: 3 full blocks of 32
    cache.admit(A, [*system, 1])
    # MTP hashes a block with the token after it: the prompt's last two boundaries
    assert cache.state_saves(A, "target") == ((64, 0), (96, 1))
    cache.admit(B, range(40))
    assert {cache.state_slot(A, "target"), cache.state_slot(B, "target")} == {0, 1}
    # both slots are taken: a third request is refused for its state, nothing changes
    before = cache.stats()
    with pytest.raises(OutOfBlocksError) as refused:
        cache.admit(C, range(5))
    assert (refused.value.pool, refused.value.needed, refused.value.available) == ("state", 1, 0)
    assert cache.stats() == before
    # reserve the lookahead, accept one draft token and the bonus: the rest rolls back
    cache.reserve(A, 4)
    assert cache.num_reserved(A) == 4
    cache.commit(A, [2, 3])
    assert (cache.num_tokens(A), cache.num_reserved(A)) == (103, 0)
    assert len(cache.block_table(A, "target")) == 4  # ceil(103 / 32)
    cache.free(A)
    # A's slot is free again, and its state after 96 tokens is cached: 101 tokens hit
    # (101 - 1) // 32 = 3 blocks, block 2 hashed with token 96 (the system prompt's)
    assert cache.admit(C, [*system, 2]) == 96
    assert cache.stats().pool("target", "gpu", "state_cache").hit_blocks == 1
    cache.check_invariants()


def test_plan_json_and_simulate_from_the_cli(tmp_path: Path) -> None:
    target = folder(tmp_path / "k3", KIMI_K3)
    common = ["--target", target, "--spec", "mtp", "--engine", "kvbudget", "--kv-budget",
              "8GiB", "--max-seq-len", "32768", "--max-batch-size", "16"]  # fmt: skip
    run = [sys.executable, "-m", "kvbudget"]
    out = subprocess.run([*run, "plan", "--json", *common], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    (m,) = doc["managers"]
    assert (m["slope_bytes_per_token"], m["state_bytes_per_seq"]) == (8_064, 188_547_072)
    assert doc["engine"]["name"] == "kvbudget"
    assert [(x["kind"], x["blocks"]) for x in doc["engine"]["pools"]] == [
        ("kv", 18_770),
        ("state", 16),
        ("checkpoint", 16),
    ]
    # 24 requests arriving within a second, 4 state slots: at most 4 run at once, and the
    # replay holds the plan's blocks: fixed 4 x (188,547,072 + 45,588,480) = 936,542,208,
    # (8 GiB - fixed) // 258,048 = 29,658
    trace = tmp_path / "trace.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:46.{i:06d},{500 + 37 * i},{20 + i}\n" for i in range(24)),
        "utf-8",
    )
    args = [*common[:-1], "4", "--trace", str(trace), "--policies", "kvbudget", "--json"]
    sim = subprocess.run([*run, "simulate", *args], capture_output=True, text=True)
    assert sim.returncode == 0, sim.stderr
    (result,) = json.loads(sim.stdout)["policies"]
    assert (result["policy"], result["completed"], result["max_running"]) == ("kvbudget", 24, 4)
    assert result["gpu_blocks"] == (KV_BUDGET - 936_542_208) // 258_048 == 29_658


# --------------------------------------------------------------------------- stateful

# A small Kimi K3: 3 KDA layers of 2 heads x 4 and one MLA layer of an 8 + 4 latent, one
# MTP layer; 4-token blocks. By hand (bf16, lookahead 3):
#   kv: 2 MLA layers (with MTP) x 12 x 2 = 48 B a token, 192 B a block
#   running slot: 4 x 3 x (6 conv rows x 3 x 2 x 4 x 2 + 2 x 4 x 4 x 4) = 4 x 3 x 416 = 4,992
#   cached state: 3 x (3 x 24 x 2 + 128) = 816
#   fixed: 3 slots + 3 cached states = 3 x 4,992 + 3 x 816 = 17,424
TINY_BLOCKS = 16
TINY_FIXED = 17_424


def tiny_k3() -> dict[str, Any]:
    cfg = copy.deepcopy(KIMI_K3)
    cfg["text_config"].update(
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=2,
        kv_lora_rank=8,
        qk_rope_head_dim=4,
        hidden_size=64,
        vocab_size=4096,
    )
    cfg["text_config"]["linear_attn_config"].update(
        kda_layers=[1, 2, 3], full_attn_layers=[4], num_heads=2, head_dim=4
    )
    return cfg


def tiny_plan_k3(tmp_path: Path, **kwargs: Any) -> Plan:
    return own_plan(
        tiny_k3(),
        tmp_path,
        spec="mtp",
        kv_budget=TINY_FIXED + TINY_BLOCKS * 192,
        max_seq_len=64,
        max_batch_size=3,
        tokens_per_block=4,
        **kwargs,
    )


def test_the_small_config_by_hand(tmp_path: Path) -> None:
    (target,) = tiny_plan_k3(tmp_path).managers
    assert (target.slope_bytes_per_token, target.block_bytes) == (48, 192)
    assert (target.state_bytes_per_seq, target.state_bytes_per_checkpoint) == (4_992, 816)
    assert (target.fixed_bytes, target.gpu.blocks, target.cached_states) == (TINY_FIXED, 16, 3)
    sep = tiny_plan_k3(tmp_path / "sep", separate_draft_cache=True)
    t, d = sep.managers
    assert (t.block_bytes, d.block_bytes, d.state_bytes_per_seq) == (96, 96, 0)
    # T = (B - It) / (St + Sd): the same 16 blocks in each
    assert t.gpu.blocks == d.gpu.blocks == 16


class KdaStates(CacheMachine):
    """The generic machine on a KDA hybrid's plan with real storage, also writing each
    running request's state slot and the cached states the cache asks for, as an engine
    does. A restored state must be the one saved after exactly the hit tokens of the same
    prompt (the state and the kv blocks agree), and no slot may change under another
    request. Recurrent state cannot be swapped (it lives on the GPU only)."""

    device = "cpu"
    can_swap = False

    def __init__(self) -> None:
        super().__init__()
        self.slots: dict[RequestId, tuple[Any, Any]] = {}  # rid -> (its Model, slot bytes)
        self.seen_hit_tokens = 0

    def state_roles(self) -> list[str]:
        return [m.role for m in self.cache.plan.managers if m.state_bytes_per_seq]

    def write_full_blocks(self, rid: RequestId) -> None:
        """Also the request's states, after each admit and commit (the base machine's
        hook): check a fresh request's restored state, then write the cached states
        named by ``state_saves`` and the slot."""
        super().write_full_blocks(rid)
        m = self.model[rid]
        fresh = self.slots.get(rid, (None, None))[0] is not m
        hit = self.hit_tokens - self.seen_hit_tokens  # this admission's, else 0
        self.seen_hit_tokens = self.hit_tokens
        for role in self.state_roles():
            size = next(x for x in self.cache.plan.managers if x.role == role)
            cp_bytes = size.state_bytes_per_checkpoint
            slot = self.cache.state_page(rid, role)
            if fresh and hit:
                want = pattern(f"state/{role}", m.salt, m.tokens[:hit], cp_bytes)
                assert bool((slot[:cp_bytes] == want).all()), (rid, hit)
            for tokens, checkpoint in self.cache.state_saves(rid, role):
                page = self.cache.checkpoint_page(role, checkpoint)
                page.copy_(pattern(f"state/{role}", m.salt, m.tokens[:tokens], cp_bytes))
            mine = pattern(f"slot/{role}/{rid}", m.salt, m.tokens, slot.numel())
            slot.copy_(mine)
            self.slots[rid] = (m, mine)

    @invariant()
    def one_slot_a_running_request(self) -> None:
        for role in self.state_roles():
            owned = [self.cache.state_slot(rid, role) for rid in self.model]
            assert None not in owned and len(set(owned)) == len(owned)
            assert self.cache.stats().pool(role, "gpu", "state").used_blocks == len(owned)
            for rid, m in self.model.items():
                model, mine = self.slots[rid]
                assert model is m
                assert bool((self.cache.state_page(rid, role) == mine).all()), rid


@pytest.mark.parametrize("separate", [False, True])
def test_state_slots_and_kv_blocks_stay_consistent(tmp_path: Path, separate: bool) -> None:
    pytest.importorskip("torch")
    plan = tiny_plan_k3(tmp_path, separate_draft_cache=separate)
    machine = type("KdaMachine", (KdaStates,), {"plan": plan})
    machine.TestCase.settings = settings(SETTINGS, max_examples=80)
    machine.TestCase("runTest").runTest()
