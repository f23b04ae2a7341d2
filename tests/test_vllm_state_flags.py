"""``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype`` in a vLLM plan with ``--state-dtype``.

vLLM keeps a Mamba2 or Gated DeltaNet layer's conv state in ``mamba_cache_dtype`` and its
temporal state in ``mamba_ssm_cache_dtype`` (auto: the conv dtype), vLLM 0.33.0
``model_executor/layers/mamba/mamba_utils.py`` ``MambaStateDtypeCalculator._mamba_state_dtype``;
kvbudget's ``--state-dtype`` keeps both in one dtype, so the plan must name both. The
fidelity harness's ``state-`` cases run vLLM with these flags (7 cases, 7 agree).
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget import InvalidArgumentError, plan

QWEN3_NEXT = "Qwen/Qwen3-Next-80B-A3B-Instruct"
NEMOTRON_H = "nvidia/Nemotron-H-8B-Base-8K"


def _settings(target: str, **kw: Any) -> dict[str, Any]:
    p = plan(target, engine="vllm", kv_budget="40GiB", host_budget=0, spec="none", **kw)
    return dict(p.engine.settings)


@pytest.mark.parametrize(
    ("target", "state", "name"),
    [(QWEN3_NEXT, "fp32", "float32"), (NEMOTRON_H, "bf16", "bfloat16")],
)
def test_a_state_dtype_names_both_vllm_state_flags(target: str, state: str, name: str) -> None:
    settings = _settings(target, state_dtype=state, max_seq_len=8192)
    assert settings["--mamba-cache-dtype"] == name
    assert settings["--mamba-ssm-cache-dtype"] == name


def test_auto_and_attention_only_models_name_neither() -> None:
    for settings in (
        _settings(QWEN3_NEXT, max_seq_len=8192),  # auto: vLLM's own default
        _settings("meta-llama/Llama-3.1-8B-Instruct", state_dtype="fp32"),  # no state
    ):
        assert "--mamba-cache-dtype" not in settings
        assert "--mamba-ssm-cache-dtype" not in settings


def test_a_state_dtype_vllm_has_no_cache_for_is_refused() -> None:
    # MambaDType (config/cache.py): auto, float32, float16, bfloat16
    with pytest.raises(InvalidArgumentError, match="not --state-dtype fp8"):
        _settings(QWEN3_NEXT, state_dtype="fp8", max_seq_len=8192)
