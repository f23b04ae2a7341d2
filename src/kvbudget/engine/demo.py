"""Tiny demo models written to disk: what ``kvbudget run``, the README and the tests use.

:func:`write_demo_models` writes, under one directory, safetensors checkpoints of

* ``target``: a 4-layer Llama (hidden 64, 4 heads, 2 KV heads, vocabulary 256), random
  weights from ``seed``;
* ``draft``: the target plus ``draft_noise`` relative Gaussian noise (same geometry;
  acceptance falls as the noise grows, 1.0 at no noise under greedy decoding);
* ``small_draft``: a 1-layer Llama of its own geometry (hidden 32, 2 heads, 1 KV head),
  random weights (seed + 1): low acceptance, the draft-target path with another geometry;
* ``eagle3``: a random EAGLE3 head over the target (one layer, hidden 64, fusing target
  layers (2, 2, 1)), its embeddings copied from the target.

Sizes and seeds are fixed by the arguments, so the same call writes the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbudget.engine.checkpoint import build_model, noisy_copy, save_checkpoint
from kvbudget.engine.model import Decoder

DEMO_VOCAB_SIZE = 256


def llama_config(
    *,
    hidden_size: int = 64,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    vocab_size: int = DEMO_VOCAB_SIZE,
    max_position_embeddings: int = 1024,
    **extra: Any,
) -> dict[str, Any]:
    """A tiny ``LlamaForCausalLM`` config.json as a dict (``extra`` keys added as is)."""
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        **extra,
    }


def eagle3_config(target: dict[str, Any]) -> dict[str, Any]:
    """A one-layer EAGLE3 head config for ``target`` (same width and vocabulary)."""
    return {
        **llama_config(
            hidden_size=target["hidden_size"],
            num_layers=1,
            num_heads=target["num_attention_heads"],
            num_kv_heads=target["num_key_value_heads"],
            vocab_size=target["vocab_size"],
            max_position_embeddings=target["max_position_embeddings"],
        ),
        "architectures": ["LlamaForCausalLMEagle3"],
        "draft_vocab_size": target["vocab_size"],
        "target_hidden_size": target["hidden_size"],
    }


def write_model(config: dict[str, Any], directory: str | Path, *, seed: int) -> str:
    """Write ``config`` and random weights from ``seed`` to ``directory``; its path.

    Replaces the weights already there: every ``*.safetensors`` file of ``directory``
    (and a shard index) is deleted first."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    save_checkpoint(_random(config, out, seed), config, out)
    return str(out)


def _random(config: dict[str, Any], directory: Path, seed: int) -> Any:
    import json

    (directory / "config.json").write_text(json.dumps(config))
    for old in (*directory.glob("*.safetensors"), directory / "model.safetensors.index.json"):
        old.unlink(missing_ok=True)
    return build_model(directory, seed=seed, device="cpu")


@dataclass(frozen=True, kw_only=True)
class DemoModels:
    """Paths (strings, as ``kvbudget.plan`` takes them) of the demo checkpoints."""

    target: str
    draft: str
    small_draft: str
    eagle3: str


def write_demo_models(
    directory: str | Path, *, seed: int = 0, draft_noise: float = 0.02
) -> DemoModels:
    """Write the demo checkpoints (module docstring) under ``directory``; their paths."""
    root = Path(directory)
    target_cfg = llama_config()
    target = write_model(target_cfg, root / "target", seed=seed)
    draft = str(noisy_copy(target, root / "draft", noise_std=draft_noise, seed=seed + 7))
    small = write_model(
        llama_config(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1),
        root / "small_draft",
        seed=seed + 1,
    )
    head_dir = root / "eagle3"
    head_dir.mkdir(parents=True, exist_ok=True)
    head_cfg = eagle3_config(target_cfg)
    head = _random(head_cfg, head_dir, seed + 2)
    target_model = build_model(target, seed=seed, device="cpu")
    assert isinstance(target_model, Decoder)
    head.embed_tokens.weight.data.copy_(target_model.model.embed_tokens.weight.data)
    save_checkpoint(head, head_cfg, head_dir)
    return DemoModels(target=target, draft=draft, small_draft=small, eagle3=str(head_dir))
