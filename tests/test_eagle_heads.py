"""EAGLE-1/EAGLE-2 heads: ``--spec eagle`` (a separate draft manager with the head's
geometry, the target's embeddings and lm_head shared)."""

from __future__ import annotations

import pytest

from kvbudget import count_params, emit, load_model, plan, weights_bytes
from kvbudget.errors import InvalidArgumentError
from kvbudget.spec_modes import SPEC_MODE_TABLE

HEAD = "yuhuili/EAGLE-LLaMA3-Instruct-8B"
TARGET = "meta-llama/Llama-3.1-8B-Instruct"


def test_the_head_is_recognised_by_its_name_as_vllm_does() -> None:
    m = load_model(HEAD)
    assert m.is_eagle_head and m.is_head and not m.is_eagle3
    assert m.describe() == f"{HEAD}: 1 attention [eagle head]"
    assert not load_model(TARGET).is_head


def test_spec_auto_picks_eagle_for_an_eagle_head() -> None:
    p = plan(TARGET, HEAD, kv_budget="20GiB", max_seq_len=8192)
    assert p.spec == "eagle"
    assert p.spec_reason == f"spec auto chose eagle: --draft {HEAD} is an EAGLE head"
    target, draft = p.managers
    assert target.slope_bytes_per_token == 32 * 2 * 8 * 128 * 2 == 131_072
    assert draft.slope_bytes_per_token == 1 * 2 * 8 * 128 * 2 == 4_096  # its own 1 layer
    assert target.gpu.blocks == draft.gpu.blocks  # lockstep
    assert p.capacity.lookahead_tokens == 3


def test_head_params_by_hand() -> None:
    """One Llama-3-8B decoder layer without its input norm, and fc (2H -> H, no bias:
    the config's ``"bias": false``); embeddings and lm_head are the target's."""
    h = 4096
    attn = h * h + 2 * (8 * 128) * h + h * h  # q, k, v (8 KV heads of 128), o
    mlp = 3 * h * 14336
    c = count_params(load_model(HEAD))
    assert c.attention == attn == 41_943_040
    assert c.dense_mlp == mlp == 176_160_768
    assert c.norms == h  # post_attention_layernorm only
    assert c.eagle3_fc == 2 * h * h == 33_554_432
    assert c.embeddings == c.lm_head == 0
    assert c.total == 251_662_336  # 41,943,040 + 176,160,768 + 4,096 + 33,554,432
    # float16 storage, all on the last stage
    assert weights_bytes(load_model(HEAD), pp=2).total_bytes == 2 * 251_662_336


def test_draft_prefix_of_eagle_recomputes_the_last_block() -> None:
    assert SPEC_MODE_TABLE["eagle"].draft_prefix == "drop_last_block"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"spec": "eagle"}, "spec eagle needs --draft"),
        (
            {"spec": "eagle", "draft": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"},
            "is an EAGLE3 head; use --spec eagle3",
        ),
        ({"spec": "eagle", "draft": "meta-llama/Llama-3.2-1B"}, "has 16 decoder layers"),
        ({"spec": "eagle3", "draft": HEAD}, "is not an EAGLE3 head"),
        ({"spec": "draft-target", "draft": HEAD}, "is an EAGLE head, not a draft model"),
        (
            {"spec": "eagle", "draft": HEAD, "engine": "trtllm"},
            "TensorRT-LLM main@38198e34 has no speculation mode for --spec eagle",
        ),
    ],
)
def test_wrong_heads_are_refused(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        plan(TARGET, kv_budget="20GiB", max_seq_len=8192, **kwargs)  # type: ignore[arg-type]


def test_a_head_is_not_a_target() -> None:
    with pytest.raises(InvalidArgumentError, match="is an EAGLE draft head, not a target"):
        plan(HEAD, kv_budget="1GiB")


@pytest.mark.parametrize(
    ("engine", "needle"),
    [("vllm", '"method": "eagle"'), ("sglang", "--speculative-algorithm EAGLE ")],
)
def test_engines_name_the_eagle_method(engine: str, needle: str) -> None:
    p = plan(TARGET, HEAD, kv_budget="20GiB", max_seq_len=8192, engine=engine)
    assert needle in emit(p, engine)
