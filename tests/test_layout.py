"""Parallel layouts: a draft on fewer TP ranks, data-parallel groups, DP attention, EP."""

from __future__ import annotations

import pytest

import kvbudget
from kvbudget import InvalidArgumentError
from kvbudget.weights import weights_bytes

TARGET, DRAFT = "meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"


def test_a_tp1_draft_next_to_a_tp4_target_is_planned_per_rank() -> None:
    p = kvbudget.plan(
        TARGET, DRAFT, spec="draft-target", tp=4, draft_tp=1,
        kv_budget="40GiB", max_seq_len=8192, max_batch_size=8,
    )  # fmt: skip
    target, draft = p.managers
    # target at tp4: 80 layers x 2 x (8 / 4 = 2 kv heads) x 128 x 2 B = 81,920 B/token;
    # the draft whole on rank 0: 32 x 2 x 8 x 128 x 2 B = 131,072 B/token
    assert (target.slope_bytes_per_token, draft.slope_bytes_per_token) == (81920, 131072)
    rank0, others = p.stages
    assert (rank0.tp_ranks, others.tp_ranks) == ("0", "1-3")
    # rank 0: 40 GiB // ((81,920 + 131,072) x 32 B per block pair) = 42,949,672,960 //
    # 6,815,744 = 6,301 blocks; ranks 1-3 hold the target's shard only:
    # 42,949,672,960 // (81,920 x 32) = 16,384 blocks
    assert (rank0.blocks, others.blocks) == (6301, 16384)
    # every rank holds the same tokens: rank 0 binds, 6,301 x 32 = 201,632
    assert p.capacity.tokens == 201632 and p.draft_tp == 1
    assert target.gpu.blocks == draft.gpu.blocks == 6301


def test_draft_weights_sit_on_the_draft_ranks_only() -> None:
    p = kvbudget.plan(
        TARGET, DRAFT, spec="draft-target", tp=4, draft_tp=1, gpu="H100", max_seq_len=8192,
    )  # fmt: skip
    rank0, others = p.stages
    target_shard = weights_bytes(kvbudget.load_model(TARGET), tp=4).total_bytes
    whole_draft = weights_bytes(kvbudget.load_model(DRAFT), tp=1).total_bytes
    assert rank0.weights_bytes == target_shard + whole_draft
    assert others.weights_bytes == target_shard
    assert rank0.gpu_bytes < others.gpu_bytes  # the draft's weights leave less KV room


def test_data_parallel_groups_add_up() -> None:
    p = kvbudget.plan(TARGET, spec="none", tp=8, dp=4, kv_budget="40GiB", max_seq_len=8192)
    # tp8: 80 x 2 x 1 kv head x 128 x 2 B = 40,960 B/token; 40 GiB // (40,960 x 32) =
    # 32,768 blocks = 1,048,576 tokens per rank (each of the 8 holds a shard of them)
    assert p.managers[0].slope_bytes_per_token == 40960
    assert p.capacity.tokens == 1048576
    # 4 replicas, each with its own sequences: 4 x 1,048,576
    assert p.capacity.total_tokens == 4194304 and p.capacity.kv_groups == 4
    assert p.budget.gpus_per_node == 8  # 32 ranks, 8 per node


def test_dp_attention_splits_the_tp_group_into_attention_groups() -> None:
    p = kvbudget.plan(
        TARGET, spec="none", tp=8, dp=4, dp_attention=True, kv_budget="40GiB", max_seq_len=8192
    )
    # attention tp = 8 / 4 = 2: 80 x 2 x (8 / 2 = 4 kv heads) x 128 x 2 B = 163,840 B/token;
    # 40 GiB // (163,840 x 32) = 8,192 blocks = 262,144 tokens on each rank
    assert p.managers[0].slope_bytes_per_token == 163840
    assert p.capacity.tokens == 262144
    # 4 attention groups on the same 8 ranks, each its own sequences: 4 x 262,144
    assert p.capacity.total_tokens == 1048576 and p.budget.gpus_per_node == 8


def test_dp_attention_keeps_a_full_attention_copy_per_group() -> None:
    model = kvbudget.load_model("deepseek-ai/DeepSeek-V3")
    tp8 = weights_bytes(model, tp=8)
    dp_attn = weights_bytes(model, tp=8, ep=8, attention_tp=1)
    # the attention weights whole on every rank; experts 256 / 8 = 32 whole per rank, the
    # same bytes as each expert split 8 ways (2,048 / 8 intermediate rows)
    assert dp_attn.routed_experts_bytes == tp8.routed_experts_bytes
    assert dp_attn.attention_bytes > tp8.attention_bytes
    p = kvbudget.plan("deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, dp=8, dp_attention=True,
                      ep=8, gpu="H200", max_seq_len=8192)  # fmt: skip
    # MLA keeps one 576-value latent per layer per token on every rank, TP or not:
    # (61 + 1 MTP) x 576 x 2 B = 71,424 B/token
    assert p.managers[0].slope_bytes_per_token == 71424
    assert p.capacity.total_tokens == 8 * p.capacity.tokens


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(tp=4, draft_tp=3, spec="draft-target", draft=DRAFT), "must divide tp=4"),
        (dict(tp=4, draft_tp=8, spec="draft-target", draft=DRAFT), "must divide tp=4"),
        (dict(tp=4, draft_tp=1, spec="ngram"), "applies to a separate draft"),
        (dict(tp=8, dp=3, dp_attention=True, spec="none"), "must be > 1 and divide tp"),
        (dict(tp=8, dp=1, dp_attention=True, spec="none"), "must be > 1 and divide tp"),
        (dict(tp=8, ep=3, spec="none"), "ep=3 must divide the 8 ranks"),
        (dict(tp=4, draft_tp=1, spec="draft-target", draft=DRAFT, engine="vllm"),
         "draft at the target's tp"),
    ],
)  # fmt: skip
def test_bad_layouts_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        kvbudget.plan(TARGET, kv_budget="40GiB", max_seq_len=8192, **kwargs)  # type: ignore[arg-type]


def test_ep_on_a_dense_model_warns() -> None:
    p = kvbudget.plan(TARGET, spec="none", tp=8, ep=8, kv_budget="40GiB", max_seq_len=8192)
    assert any("--ep 8 changes nothing" in w for w in p.warnings)


@pytest.mark.parametrize(
    ("engine", "flags"),
    [
        # vLLM: 8 engines of 1 rank each, experts over all 8
        ("vllm", ["--tensor-parallel-size 1", "--data-parallel-size 8",
                  "--enable-expert-parallel"]),
        # SGLang: one TP group of 8 whose attention runs as 8 DP groups
        ("sglang", ["--tp-size 8", "--dp-size 8", "--enable-dp-attention", "--ep-size 8"]),
        ("trtllm", ["tensor_parallel_size: 8", "enable_attention_dp: true",
                    "moe_expert_parallel_size: 8"]),
    ],
)  # fmt: skip
def test_dp_attention_is_emitted_in_each_engines_words(engine: str, flags: list[str]) -> None:
    p = kvbudget.plan("deepseek-ai/DeepSeek-V3", spec="mtp", tp=8, dp=8, dp_attention=True,
                      ep=8, gpu="H200", max_seq_len=32768, engine=engine)  # fmt: skip
    text = kvbudget.emit(p, engine)
    for flag in flags:
        assert flag in text, flag
