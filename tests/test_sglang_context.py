"""SGLang's derived context length (``kvbudget.engines.sglang_context``) and its use in plans.

Expected values follow SGLang 0.5.23's ``get_context_length``
(``srt/utils/hf_transformers/common.py``) on transformers 5 (``rope_scaling`` is the
standardized ``rope_parameters``) and ``ModelConfig._derive_context_length``
(``srt/configs/model_config.py``); ``benchmarks/fidelity/sglang/sglang_fidelity.py``
compares the figure with SGLang's own function on every case and runs the emitted
command, variable included, through SGLang's ModelConfig (its ``ctx`` cases).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget import plan
from kvbudget.engines import emit
from kvbudget.engines.sglang_context import ALLOW_LONGER_CONTEXT_ENV, derived_context_length

ENV_KEY = f"env.{ALLOW_LONGER_CONTEXT_ENV}"
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.mark.parametrize(
    ("config", "tokens"),
    [
        # the first key of CONTEXT_LENGTH_KEYS present wins, not the smallest (vLLM's rule)
        ({"max_position_embeddings": 8192, "max_seq_len": 16384}, 16384),
        ({"max_position_embeddings": 8192, "seq_length": 4096}, 4096),
        ({}, 2048),  # none of the keys
        # a linear factor without original_max_position_embeddings: 4096 x 4
        ({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4}}, 16384),
        # llama3 / yarn get an original_max_position_embeddings from transformers 5
        ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8}},
         131072),
        ({"max_position_embeddings": 40960, "rope_scaling": {"rope_type": "yarn", "factor": 4}},
         40960),
        ({"max_position_embeddings": 4096,
          "rope_scaling": {"type": "dynamic", "factor": 2,
                           "original_max_position_embeddings": 2048}}, 4096),
        # per-layer parameters have no top-level factor
        ({"max_position_embeddings": 1000,
          "rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 2}}}, 1000),
    ],
)  # fmt: skip
def test_derived_context_length(config: dict[str, Any], tokens: int) -> None:
    assert derived_context_length(config) == tokens


def test_gemma3s_flat_rope_scaling_is_nested_by_its_config_class() -> None:
    # google/gemma-3-27b-it: max_position_embeddings 131072, rope_scaling linear x 8;
    # Gemma3TextConfig.convert_rope_params_to_dict moves it under "full_attention", so
    # SGLang's rope_scaling.get("factor", 1) is 1 (the harness's 32 gemma-3 cases found it)
    cfg = {"max_position_embeddings": 131072,
           "rope_scaling": {"rope_type": "linear", "factor": 8.0}}  # fmt: skip
    assert derived_context_length(cfg, "gemma3_text") == 131072
    assert derived_context_length(cfg, "llama") == 1048576
    p = _plan("google/gemma-3-27b-it", spec="none", max_seq_len=131073)
    assert p.engine.detail["derived_context_length"] == 131072
    assert p.engine.settings[ENV_KEY] == "1"


def _plan(target: str, **kw: Any) -> Any:
    args: dict[str, Any] = {"engine": "sglang", "kv_budget": "40GiB", "host_budget": 0, **kw}
    return plan(target, **args)


def test_a_target_context_past_its_length_sets_the_variable_and_warns() -> None:
    # Qwen3-8B: max_position_embeddings 40960, no rope scaling
    inside = _plan("Qwen/Qwen3-8B", spec="none", max_seq_len=40960)
    assert inside.engine.detail["derived_context_length"] == 40960
    assert ENV_KEY not in inside.engine.settings
    past = _plan("Qwen/Qwen3-8B", spec="none", max_seq_len=40961)
    assert past.engine.settings[ENV_KEY] == "1"
    (warning,) = [w for w in past.warnings if ALLOW_LONGER_CONTEXT_ENV in w]
    assert "derived context length 40,960" in warning
    assert "--max-seq-len to 40,960" in warning
    command = [x for x in emit(past).splitlines() if not x.startswith("#")]
    assert command[0].startswith(f"{ALLOW_LONGER_CONTEXT_ENV}=1 python -m sglang.launch_server ")


def test_target_and_draft_past_their_lengths_warn_once_each() -> None:
    # Llama-3.1-8B derives 131,072 (llama3 rope); its EAGLE3 head 2,048
    p = _plan(LLAMA8B, spec="eagle3", max_seq_len=131073, tokens_per_block=32)
    found = [w for w in p.warnings if ALLOW_LONGER_CONTEXT_ENV in w]
    assert len(found) == 2
    assert "derived context length 131,072" in found[0]
    assert "trained on 2,048 positions" in found[1]
    assert p.engine.settings[ENV_KEY] == "1"
    # at the target's own length only the draft needs it
    q = _plan(LLAMA8B, spec="eagle3", max_seq_len=131072, tokens_per_block=32)
    (only,) = [w for w in q.warnings if ALLOW_LONGER_CONTEXT_ENV in w]
    assert "for a draft trained on 2,048 positions" in only
