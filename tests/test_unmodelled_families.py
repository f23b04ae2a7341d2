"""2026 families kvbudget does not model yet: one ``error:`` line naming the model_type.

The configs hold the fields that tell the family apart (field names from vLLM 0.33.0's
config classes, ``vllm/transformers_utils/configs/{kimi_k3,minimax_m3}.py``); none is
read as a generic decoder (DeepSeek-V4.1 is modelled: tests/test_deepseek_v41.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.architectures import SUPPORTED_MODEL_TYPES
from kvbudget.architectures.unmodelled import UNMODELLED
from kvbudget.cli import app
from kvbudget.errors import UnsupportedArchitectureError
from kvbudget.model import parse_config

BASE: dict[str, Any] = {
    "hidden_size": 2048,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
}
CONFIGS: dict[str, dict[str, Any]] = {
    # Kimi K3 (kimi_k3) is modelled (tests/test_kimi_k3.py); its MTP layers on their own
    # are not (vLLM makes that draft config from the target's, config/speculative.py)
    "kimi_k3_mtp": {
        "model_type": "kimi_k3_mtp",
        "text_config": {**BASE, "model_type": "kimi_linear"},
    },
    # MiniMax-M3's text and vision-language types are modelled (tests/test_minimax_m3.py);
    # its standalone MTP model is not (MiniMaxM3MTPConfig: one decoder layer)
    "minimax_m3_mtp": {
        **BASE,
        "model_type": "minimax_m3_mtp",
        "num_hidden_layers": 1,
        "sparse_attention_config": {"use_sparse_attention": True, "sparse_index_dim": 128},
    },
}


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_known_unmodelled_family_is_refused(model_type: str) -> None:
    with pytest.raises(UnsupportedArchitectureError, match=f"model_type '{model_type}' "):
        parse_config(CONFIGS[model_type], source="test", name="t")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("linear_attn_config", {"kda_layers": [1, 2]}),
        ("sparse_attention_config", {"use_sparse_attention": True}),
        ("compress_rates", {"compressed_sparse_attention": 4}),
        ("hybrid_layer_pattern", [0, 1, 0, 1]),
        ("num_kv_shared_layers", 2),
        ("index_head_dim", 128),
        ("per_layer_config", {"0": {"head_dim": 512}}),
    ],
)
def test_unknown_type_with_a_family_marker_is_not_read_as_generic(field: str, value: Any) -> None:
    cfg = {**BASE, "model_type": "some_new_model", field: value}
    with pytest.raises(UnsupportedArchitectureError, match=field):
        parse_config(cfg, source="test", name="t")


def test_no_supported_model_type_is_listed_as_unmodelled() -> None:
    """The refusal by name runs before any family reads the config: a supported type
    listed in UNMODELLED would refuse its presets."""
    assert not set(UNMODELLED) & set(SUPPORTED_MODEL_TYPES)


def test_cli_prints_one_error_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(CONFIGS["kimi_k3_mtp"]), "utf-8")
    result = CliRunner().invoke(
        app, ["plan", "--target", str(tmp_path), "--kv-budget", "8GiB"], env={"NO_COLOR": "1"}
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert (
        "'kimi_k3_mtp' (Kimi K3's MTP layers on their own; plan the kimi_k3 target with "
        in lines[0]
    )
    assert "--spec mtp) is not modelled yet" in lines[0]
    assert "supported: deepseek_v2" in lines[0] and result.stdout == ""


def test_a_hub_config_of_such_a_family_is_one_error_line(tmp_path: Path) -> None:
    """The config from a Hub played on loopback (tests/hub_server.py): refused before any
    safetensors header is read."""
    import os
    import subprocess
    import sys

    from hub_server import FakeHub

    hub = FakeHub().start()
    try:
        hub.add(
            "moonshotai/Kimi-K3-MTP", {"config.json": json.dumps(CONFIGS["kimi_k3_mtp"]).encode()}
        )
        environ = dict(os.environ)
        environ.update(
            HF_ENDPOINT=hub.url,
            HF_HUB_OFFLINE="0",
            HF_HOME=str(tmp_path / "home"),
            HF_HUB_CACHE=str(tmp_path / "cache"),
            NO_COLOR="1",
        )
        done = subprocess.run(
            [sys.executable, "-m", "kvbudget", "plan", "--target", "moonshotai/Kimi-K3-MTP"],
            capture_output=True, text=True, env=environ, timeout=120, check=False,
        )  # fmt: skip
        paths = [path for _, path, _ in hub.requests]
    finally:
        hub.stop()
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "model_type 'kimi_k3_mtp'" in lines[0], done.stderr
    assert lines[0].startswith("error: ") and done.stdout == ""
    assert not any(p.endswith(".safetensors") or "index.json" in p for p in paths)
