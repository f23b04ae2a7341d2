"""vLLM's longest --max-model-len (``kvbudget.engines.vllm_context``) and its use in plans.

Every expected value follows vLLM's ``_get_and_verify_max_len`` (``vllm/config/model.py``)
and ``ModelArchConfigConvertorBase.derive_max_model_len_and_key``
(``vllm/transformers_utils/model_arch_config_convertor.py``) of the 0.33.0 and 0.29.0
PyPI wheels; ``benchmarks/fidelity/vllm_fidelity.py`` compares the derived figure with
vLLM's own function on every case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from family_configs import STEP3P5_HYBRID, STEP3P5_UPSTREAM, folder
from hypothesis import given
from hypothesis import strategies as st

from kvbudget import InvalidArgumentError, plan
from kvbudget.engines import emit
from kvbudget.engines.vllm import RELEASE as RELEASE_0_33
from kvbudget.engines.vllm_0_29 import RELEASE as RELEASE_0_29
from kvbudget.engines.vllm_context import (
    ALLOW_LONG_ENV,
    LENGTH_KEYS,
    DerivedLength,
    derived_length,
)

RULE_33 = RELEASE_0_33.length_rule
RULE_29 = RELEASE_0_29.length_rule
LLAMA8B = "meta-llama/Llama-3.1-8B-Instruct"
ENV_KEY = f"env.{ALLOW_LONG_ENV}"


def test_the_smallest_key_names_the_maximum() -> None:
    # possible_keys in order; the smallest value wins, its first key names it
    got = derived_length({"max_position_embeddings": 8192, "seq_length": 4096}, "x", RULE_33)
    assert got == DerivedLength(4096.0, "seq_length")
    assert got.text() == "seq_length=4096"


def test_model_max_length_replaces_the_keys_and_allows_up_to_itself() -> None:
    # the Command-R rule: model_max_length is the derived figure outright
    got = derived_length({"max_position_embeddings": 4096, "model_max_length": 8192}, "x", RULE_33)
    assert (got.tokens, got.key, got.model_max_length) == (8192, "model_max_length", 8192)
    assert not got.refuses(8192)
    assert got.refuses(8193)


def test_no_key_is_2048_tokens() -> None:
    # "Assuming the model's maximum length is 2048"
    assert derived_length({}, "x", RULE_33).tokens == 2048


def test_a_linear_rope_factor_scales_the_maximum_in_both_releases() -> None:
    cfg = {"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 4.0}}
    # 4096 x 4.0 = 16384.0
    assert derived_length(cfg, "llama", RULE_33).tokens == 16384.0
    assert derived_length(cfg, "llama", RULE_29).tokens == 16384.0
    # Gemma-3's length is already scaled: no factor for a model type naming gemma3
    assert derived_length(cfg, "gemma3_text", RULE_33).tokens == 4096


def test_llama3_rope_keeps_the_length() -> None:
    cfg = {
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0},
    }
    assert derived_length(cfg, "llama", RULE_33).tokens == 131072
    assert derived_length(cfg, "llama", RULE_29).tokens == 131072


def test_yarn_differs_between_the_releases() -> None:
    # a Qwen3 config with YaRN added as its model card says: 40,960 positions, factor 4
    # over 32,768. 0.33.0 leaves yarn unscaled: 40,960. 0.29.0 restarts from
    # original_max_position_embeddings and scales it: 32,768 x 4.0 = 131,072
    cfg = {
        "max_position_embeddings": 40960,
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 32768,
        },
    }
    assert derived_length(cfg, "qwen3", RULE_33).tokens == 40960
    assert derived_length(cfg, "qwen3", RULE_29).tokens == 131072.0
    # without original_max_position_embeddings transformers fills max_position_embeddings
    # in (standardize_rope_params): 40,960 x 4.0
    bare = {**cfg, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    assert derived_length(bare, "qwen3", RULE_29).tokens == 163840.0


def test_per_layer_rope_takes_the_last_scaling_factor() -> None:
    # "This assumes all layer types have the same scaling factor": the loop keeps the last
    cfg = {
        "max_position_embeddings": 1000,
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 2.0},
            "sliding_attention": {"rope_type": "linear", "factor": 3.0},
        },
    }
    assert derived_length(cfg, "x", RULE_33).tokens == 3000.0


def test_step3p5_takes_0_29s_own_config_default() -> None:
    # 0.29.0's Step3p5Config defaults max_seq_len=4096 (transformers_utils/configs/
    # step3p5.py), the smaller key; 0.33.0 reads transformers' class, which has none
    cfg = {"max_position_embeddings": 262144}
    assert derived_length(cfg, "step3p5", RULE_29) == DerivedLength(4096, "max_seq_len")
    assert derived_length(cfg, "step3p5", RULE_33).tokens == 262144
    # a config that sets it keeps its own
    own = {**cfg, "max_seq_len": 65536}
    assert derived_length(own, "step3p5", RULE_29).tokens == 65536


@given(
    st.dictionaries(
        st.sampled_from([k for k in LENGTH_KEYS if k != "model_max_length"]),
        st.integers(1, 10**7),
        min_size=1,
    )
)
def test_without_rope_the_maximum_is_the_smallest_key(cfg: dict[str, int]) -> None:
    got = derived_length(cfg, "x", RULE_33)
    assert got.tokens == min(cfg.values())
    assert got.key is not None and cfg[got.key] == got.tokens
    assert not got.refuses(min(cfg.values()))
    assert got.refuses(min(cfg.values()) + 1)


def _plan(target: str, **kw: Any) -> Any:
    args: dict[str, Any] = {"engine": "vllm", "kv_budget": "40GiB", "host_budget": 0, **kw}
    return plan(target, **args)


def test_a_plan_past_the_models_length_sets_the_variable_and_warns() -> None:
    # Llama-3.1-8B: max_position_embeddings 131072, a llama3 rope (unscaled)
    inside = _plan(LLAMA8B, max_seq_len=131072)
    assert inside.engine.detail["derived_max_model_len"] == 131072
    assert inside.engine.detail["allow_long_max_model_len"] is False
    assert ENV_KEY not in inside.engine.settings
    assert not any(ALLOW_LONG_ENV in w for w in inside.warnings)

    past = _plan(LLAMA8B, max_seq_len=131073)
    assert past.engine.detail["allow_long_max_model_len"] is True
    assert past.engine.settings[ENV_KEY] == "1"
    (warning,) = [w for w in past.warnings if ALLOW_LONG_ENV in w]
    assert "max_position_embeddings=131072" in warning
    assert "--max-seq-len to 131,072" in warning
    text = emit(past)
    command = [x for x in text.splitlines() if not x.startswith("#")]
    assert command[0] == f"{ALLOW_LONG_ENV}=1 vllm serve {LLAMA8B} \\"
    assert f"# warning: {' '.join(warning.split())}" in text.splitlines()
    # the variable is a prefix, never a flag
    assert "--env" not in text and f"--{ENV_KEY}" not in text


def test_0_29_needs_the_variable_for_step3p5_past_4096(tmp_path: Path) -> None:
    path = folder(tmp_path / "step", STEP3P5_HYBRID)
    old = _plan(path, engine="vllm@0.29.0", spec="none", max_seq_len=4097)
    assert old.engine.detail["derived_max_model_len"] == 4096
    assert old.engine.settings[ENV_KEY] == "1"
    at_limit = _plan(path, engine="vllm@0.29.0", spec="none", max_seq_len=4096)
    assert ENV_KEY not in at_limit.engine.settings
    # 0.33.0 derives the config's max_position_embeddings, 262,144
    new = _plan(path, spec="none", max_seq_len=32768)
    assert new.engine.detail["derived_max_model_len"] == 262144
    assert ENV_KEY not in new.engine.settings


def test_0_29_refuses_step3p5_mtp_types_outside_layer_types(tmp_path: Path) -> None:
    # 0.29.0's Step3p5DecoderLayer indexes layer_types[45] for the MTP layer: the
    # upstream form (45 entries + mtp_layer_types) fails there with IndexError
    upstream = folder(tmp_path / "up", STEP3P5_UPSTREAM)
    with pytest.raises(InvalidArgumentError, match=r"layer_types has 45 entries.*pad"):
        _plan(upstream, engine="vllm@0.29.0", spec="mtp", max_seq_len=4096)
    # without MTP the same config plans, and 0.33.0 reads mtp_layer_types
    assert _plan(upstream, engine="vllm@0.29.0", spec="none", max_seq_len=4096)
    assert _plan(upstream, spec="mtp", max_seq_len=4096)
    # the padded legacy form (45 + 3 entries) plans under 0.29.0 with MTP
    hybrid = folder(tmp_path / "hy", STEP3P5_HYBRID)
    assert _plan(hybrid, engine="vllm@0.29.0", spec="mtp", max_seq_len=4096)


def test_0_29_refuses_step3p5_without_layer_types_and_with_a_window(tmp_path: Path) -> None:
    # no layer_types with a window: 0.29.0 slides every even layer, 0.33.0 none
    windowed = {k: v for k, v in STEP3P5_HYBRID.items() if k != "layer_types"}
    windowed = {**windowed, "num_nextn_predict_layers": 0}
    with pytest.raises(InvalidArgumentError, match="slides every even layer"):
        _plan(folder(tmp_path / "w", windowed), engine="vllm@0.29.0", spec="none")
