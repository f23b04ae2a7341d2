"""Step-3.5's MTP draft (``--spec mtp``) under SGLang 0.5.23, by hand.

Facts from the SGLang 0.5.23 PyPI wheel (``python/sglang/srt/``), which
benchmarks/fidelity/sglang runs on the same ``family/step3p5-uniform`` config
(``--cases all --match step3p5``: the 16 mtp cases agree):

* ``arg_groups/overrides.py`` ``_step3p_overrides``: ``--speculative-algorithm EAGLE``
  sets ``enable_multi_layer_eagle``; ``managers/tp_worker.py``
  ``_init_multi_layer_eagle_model_runners`` builds ``--speculative-num-steps`` (K = 3)
  draft runners, each allocating its own pool from the target's ``MemoryPoolConfig``;
* ``configs/model_config.py``: the draft is ``Step3p5MTP``, ``get_hybrid_layer_ids``
  makes its one layer (``layer_setup.py`` ``_compute_model_num_layers``) sliding,
  ``[0]``: a ``SWAKVPool`` of one sliding layer over the target's sliding rows;
* ``model_runner_components/spec_aux_hidden_state.py`` ``_resolve_eagle_aux_hidden_state``
  (path-less: the target's config): ``eagle_draft_num_layers`` = 3 MTP layers,
  ``eagle_draft_swa_num_layers`` = 33 sliding layers, so ``pool_configurator.py``
  ``HybridSWAPoolConfigurator`` prices ``min(33, 3)`` = 3 draft layers in the sliding
  share; without a sliding pool (HiCache) ``DefaultPoolConfigurator`` adds
  ``int(cell x 3 / 45)``;
* ``models/step3p5_mtp.py``: each runner's ``Step3p5AMultiTokenPredictor`` has its own
  ``VocabParallelEmbedding`` (``set_embed_and_head`` does nothing), and runner ``i``
  loads MTP layer ``45 + i`` (``load_weights`` raises when its parameters are missing).

Every layer of the config is 1 KV head per rank at TP 8 (8 groups // 8) x (128 + 128) x
2 B = 512 B a token; pages of 32 tokens; every pool has ``T + page`` rows.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Any

import pytest
from family_configs import STEP3P5_UNIFORM, folder

from kvbudget import plan, weights_bytes
from kvbudget.engines.sglang import DEFAULT_PRE_LOAD_BYTES, PROFILE_MARGIN_BYTES
from kvbudget.errors import InvalidArgumentError
from kvbudget.model import load_model

GIB = 1024**3
BUDGET = 40 * GIB  # 42,949,672,960 B
ARGS: dict[str, Any] = {
    "spec": "mtp",
    "engine": "sglang",
    "kv_budget": "40GiB",
    "max_seq_len": 32768,
    "max_batch_size": 256,
    "max_num_batched_tokens": 8192,
    "tp": 8,
    "gpu": "H200",
    "host_budget": 0,
}
# 3 runners x ceil(pad64(128,815) = 128,832 / 8) = 16,104 rows x 4,096 x 2 B
EMBEDDINGS = 3 * 16_104 * 4_096 * 2
H200_BYTES = 150_021_734_400


def mtp_plan(tmp_path: Path, cfg: dict[str, Any] = STEP3P5_UNIFORM, **kw: Any) -> Any:
    return plan(folder(tmp_path, cfg), **{**ARGS, **kw})


def counted(tmp_path: Path) -> int:
    """The weights kvbudget counts on a TP 8 rank, MTP layers included (tested in
    test_step3p5.py), which SGLang's runners' own embeddings come on top of."""
    model = load_model(folder(tmp_path, STEP3P5_UNIFORM))
    return weights_bytes(model, tp=8, include_mtp=True).total_bytes


def fraction(weights: int, profiled: int) -> str:
    """``--mem-fraction-static``: (weights + profiled + margin) / (memory - pre-load),
    rounded up to 3 decimals (``_profile_available_bytes`` solved for the fraction)."""
    need = Decimal(weights + profiled + PROFILE_MARGIN_BYTES)
    memory = Decimal(H200_BYTES - DEFAULT_PRE_LOAD_BYTES)
    return str((need / memory).quantize(Decimal("0.001"), rounding=ROUND_CEILING))


def test_draft_runners_take_the_sliding_rows_by_hand(tmp_path: Path) -> None:
    p = mtp_plan(tmp_path)
    d, pools = p.engine.detail, {x.name: x for x in p.engine.pools}
    # sliding pool for 256 requests: (window 512 + lookahead 3 + 1 + 2 pages of 32) = 580
    # each, + an 8,192 chunk + a page: 256 x 580 + 8,224 = 156,704 (4,897 pages); a
    # sliding row holds the 33 target layers and the 3 runners' layers: 36 x 512 = 18,432 B
    # and a full row 12 x 512 = 6,144 B. The ratio ceil3(156,704 / full) = 0.025 and the
    # largest full whose pools fit 40 GiB is 6,502,688: sliding int(full x 0.025) =
    # 162,567 -> 162,560; (6,502,720 x 6,144 = 39,952,711,680) + (162,592 x 18,432 =
    # 2,996,895,744) = 42,949,607,424 B; a page more (sliding still 162,560) adds
    # 32 x 6,144 = 196,608 B: 42,949,804,032 > 40 GiB
    assert d["max_total_num_tokens"] == 6_502_688 == pools["full"].tokens
    assert d["swa_full_tokens_ratio"] == 0.025
    assert d["swa_tokens"] == 162_560 == int(6_502_688 * 0.025) // 32 * 32
    assert pools["full"].bytes == 6_502_720 * 6_144 == 39_952_711_680
    assert pools["swa"].bytes == 162_592 * 33 * 512 == 2_747_154_432
    # the draft: 3 Step3p5MTP runners, one sliding layer each, over the sliding rows
    mtp = pools["mtp"]
    assert (mtp.role, mtp.kind, mtp.tier) == ("draft", "window", "gpu")
    assert mtp.tokens == 162_560 and mtp.window_tokens == 512
    assert mtp.bytes == 3 * 162_592 * 512 == 249_741_312
    assert d["device_bytes"] == 42_949_607_424 <= BUDGET
    assert BUDGET < 42_949_607_424 + 32 * 6_144
    # the target's cell: 12 x 512 + 0.025 x 512 x (33 + 3) = 6,604.8 B (the draft
    # priced as 3 sliding layers), over the full pool's 6,502,720 rows, + 1
    assert d["profiled_budget_bytes"] == int(6_502_720 * (6_144 + 0.025 * 512 * 36)) + 1
    assert d["profiled_budget_bytes"] == 42_949_165_057


def test_emits_multi_layer_eagle(tmp_path: Path) -> None:
    s = mtp_plan(tmp_path).engine.settings
    # EAGLE, not NEXTN: _step3p_overrides compares the flag before NEXTN is aliased
    assert s["--speculative-algorithm"] == "EAGLE"
    # multi-layer EAGLE asserts num_draft_tokens == num_steps + 1
    assert s["--speculative-num-steps"] == 3
    assert s["--speculative-num-draft-tokens"] == 4
    assert s["--speculative-eagle-topk"] == 1
    assert s["--max-total-tokens"] == 6_502_688


def test_runner_embeddings_are_in_the_fraction(tmp_path: Path) -> None:
    p = mtp_plan(tmp_path)
    d = p.engine.detail
    assert EMBEDDINGS == 395_771_904
    assert d["weights_bytes"] == counted(tmp_path) + EMBEDDINGS
    assert d["mem_fraction_static"] == fraction(d["weights_bytes"], d["profiled_budget_bytes"])
    assert any("395,771,904 B" in w for w in p.engine.warnings)
    # a user's --weights-bytes stands as given
    given = mtp_plan(tmp_path, weights_bytes=50 * GIB)
    assert given.engine.detail["weights_bytes"] == 50 * GIB
    assert not any("embed_tokens" in w for w in given.engine.warnings)


def test_fewer_steps_than_mtp_layers_by_hand(tmp_path: Path) -> None:
    # K = 2 runners; the target still prices all 3 MTP layers (eagle_draft_num_layers)
    p = mtp_plan(tmp_path, max_draft_len=2)
    d, pools = p.engine.detail, {x.name: x for x in p.engine.pools}
    full, swa = d["max_total_num_tokens"], d["swa_tokens"]
    ratio = d["swa_full_tokens_ratio"]
    assert pools["mtp"].bytes == 2 * (swa + 32) * 512
    # the pools: full rows of 6,144 B, sliding rows of (33 + 2) x 512 = 17,920 B
    assert d["device_bytes"] == (full + 32) * 6_144 + (swa + 32) * 17_920 <= BUDGET
    assert d["profiled_budget_bytes"] == int((full + 32) * (6_144 + ratio * 512 * 36)) + 1
    assert p.engine.settings["--speculative-num-steps"] == 2
    assert d["weights_bytes"] == counted(tmp_path) + 2 * 16_104 * 4_096 * 2


def test_hicache_runners_take_the_full_rows_by_hand(tmp_path: Path) -> None:
    # HiCache: _step3p_overrides sets disable_hybrid_swa_memory, so the target's 45
    # layers (23,040 B a token) and each runner's one layer (MHATokenToKVPool, 512 B)
    # have the full pool's rows: 23,040 + 3 x 512 = 24,576 B a token;
    # (42,949,672,960 // 24,576 = 1,747,626) - 32, to the page: 1,747,584
    p = mtp_plan(tmp_path, host_budget="64GB")
    d, pools = p.engine.detail, {x.name: x for x in p.engine.pools}
    assert d["max_total_num_tokens"] == 1_747_584 and d["swa_tokens"] is None
    assert pools["full"].bytes == 1_747_616 * 23_040 == 40_265_072_640
    assert pools["mtp"].kind == "kv"
    assert pools["mtp"].bytes == 1_747_616 * 3 * 512 == 2_684_338_176
    # DefaultPoolConfigurator: 23,040 + int(23,040 x 3 / 45) = 24,576 B a token
    assert d["profiled_budget_bytes"] == 1_747_616 * 24_576 + 1
    # the 3 runners' pools are packed into the target's host pool (_can_pack_hicache_mtp):
    # (int(63e9 // 24,576) = 2,563,476 // 32 + 1) x 32 = 2,563,488 tokens; 64 GB would
    # pin (2,604,166 // 32 + 1) x 32 = 2,604,192 x 24,576 = 64,000,622,592 B > 64e9
    assert d["hicache_size_gb"] == 63
    assert d["host_tokens"] == 2_563_488
    assert d["host_bytes"] == 2_563_488 * 24_576 == 63_000_281_088
    host = pools["host full"]
    assert host.role == "target+draft" and host.bytes == 63_000_281_088


@pytest.mark.parametrize(
    ("cfg", "kw", "match"),
    [
        # runner 3 would load MTP layer 48, which the checkpoint lacks: load_weights raises
        (STEP3P5_UNIFORM, {"max_draft_len": 4}, r"--max-draft-len 4 runs 4 Step3p5MTP"),
        # SGLang's Step3p5Config reads num_nextn_predict_layers only
        (
            {
                **{k: v for k, v in STEP3P5_UNIFORM.items() if k != "num_nextn_predict_layers"},
                "num_mtp_layers": 3,
            },
            {},
            r"another key than num_nextn_predict_layers",
        ),
        # the runners under pipeline parallelism are not checked
        (STEP3P5_UNIFORM, {"pp": 3}, r"at --pp 3 are not checked"),
    ],
)
def test_refusals(tmp_path: Path, cfg: dict[str, Any], kw: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        mtp_plan(tmp_path, cfg, **kw)


def test_a_derived_budget_leaves_room_for_the_runners_embeddings(tmp_path: Path) -> None:
    """With no --kv-budget, SGLang's own --mem-fraction-static on an H200 at TP 8 (0.897,
    benchmarks/fidelity/sglang --cases memdefault) derives the budget beside the ledger's
    weights; SGLang also loads the 3 runners' embeddings (EMBEDDINGS), so the pools get
    that much less and the emitted fraction is SGLang's own, not above it."""
    p = mtp_plan(tmp_path, kv_budget=None)
    d = p.engine.detail
    assert p.budget.memory_fraction == 0.897
    assert d["weights_bytes"] == p.budget.weights_bytes + EMBEDDINGS
    assert d["profiled_budget_bytes"] <= p.budget.gpu_bytes - EMBEDDINGS
    assert p.engine.settings["--mem-fraction-static"] == "0.897"
    assert any("the KV budget derived from the GPU's memory leaves them room" in w
               for w in p.warnings)  # fmt: skip
