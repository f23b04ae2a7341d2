"""A family's own checkpoint names matched to its inventory (``Architecture.checkpoint_names``).

DeepSeek-V4 and V4.1 checkpoints store DeepSeek's names (``embed.weight``,
``layers.N.attn.wq_a.weight``, ``layers.N.ffn.experts.E.w1.weight`` and its ``.scale``),
which vLLM 0.33.0 renames on loading (models/deepseek_v4/nvidia/model.py
``_make_deepseek_v4_weights_mapper``). Without the rules no such tensor matches the
inventory, so each is held whole on every rank, the TP split lost.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from family_configs import FAMILY_CONFIGS

from kvbudget.architectures import model_inventory
from kvbudget.architectures.deepseek_v4 import V4_CHECKPOINT_NAMES
from kvbudget.architectures.deepseek_v41 import V41_CHECKPOINT_NAMES
from kvbudget.model import load_model
from kvbudget.weights import weights_bytes
from kvbudget.weights.headers import renamed

_DTYPES = {"fp32": ("F32", 4), "int32": ("I32", 4), "int64": ("I64", 8)}


def test_deepseek_names_become_the_inventory_names() -> None:
    for rules in (V4_CHECKPOINT_NAMES, V41_CHECKPOINT_NAMES):
        assert renamed("embed.weight", rules) == "model.embed_tokens.weight"
        assert renamed("head.weight", rules) == "lm_head.weight"
        assert renamed("norm.weight", rules) == "model.norm.weight"
        assert renamed("layers.3.attn.wq_a.scale", rules) == "model.layers.3.attn.wq_a.scale"
        assert (
            renamed("layers.3.ffn.experts.7.w1.weight", rules)
            == "model.layers.3.ffn.experts.7.gate_proj.weight"
        )
        assert (
            renamed("layers.3.ffn.shared_experts.w2.weight", rules)
            == "model.layers.3.ffn.shared_experts.down_proj.weight"
        )
        # an attention projection named like an expert's is left alone
        assert renamed("layers.1.engram.wkv.weight", rules) == "model.layers.1.engram.wkv.weight"
    assert renamed("hc_head_fn", V4_CHECKPOINT_NAMES) == "model.hc_head_fn"
    assert renamed("mtp.0.e_proj.weight", V4_CHECKPOINT_NAMES) == "model.mtp.0.e_proj.weight"
    # V4.1's DSpark stages keep their checkpoint names (architectures/dspark.py)
    assert renamed("mtp.0.main_proj.weight", V41_CHECKPOINT_NAMES) == "mtp.0.main_proj.weight"


def _deepseek_name(name: str) -> str:
    """The inventory's name as DeepSeek's checkpoint stores it (the rules' inverse)."""
    name = {"model.embed_tokens": "embed", "lm_head": "head"}.get(name, name)
    name = name.removeprefix("model.")
    for proj, stored in (("gate_proj", "w1"), ("up_proj", "w3"), ("down_proj", "w2")):
        name = re.sub(rf"\.(experts\.\d+|shared_experts)\.{proj}$", rf".\1.{stored}", name)
    return name


def _checkpoint(folder: Path, cfg: dict[str, Any]) -> None:
    """``cfg`` and a safetensors file whose header lists every inventory tensor under
    DeepSeek's names (experts by index; the data a sparse file of zeros)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    header: dict[str, Any] = {}
    offset = 0
    for w in model_inventory(load_model(folder)):
        dtype, width = _DTYPES.get(w.fixed or "", ("BF16", 2))
        shape = [w.rows] if w.cols == 1 else [w.rows, w.cols]
        copies = range(w.copies) if w.copies > 1 else [None]
        for e in copies:
            name = w.name if e is None else w.name.replace(".experts.", f".experts.{e}.")
            size = w.rows * w.cols * width
            entry = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
            header[_deepseek_name(name) + ".weight"] = entry
            offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    with (folder / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)


@pytest.mark.parametrize("family", ["family/deepseek-v4-defaults", "family/deepseek-v41-dspark"])
def test_a_deepseek_checkpoint_is_placed_by_its_inventory(tmp_path: Path, family: str) -> None:
    cfg = json.loads(json.dumps(FAMILY_CONFIGS[family]))
    text = cfg.get("text_config", cfg)
    text["n_routed_experts"] = 8  # a smaller header; the experts' split is the same
    text.pop("dspark_n_routed_experts", None)
    _checkpoint(tmp_path / "m", cfg)
    model = load_model(tmp_path / "m")
    for tp in (1, 8):
        got = weights_bytes(model, tp=tp, include_mtp=True)
        assert got.source == "safetensors headers"
        assert got.other_bytes == 0  # every stored tensor found its inventory tensor
        # so each is split as the inventory splits it: the same bytes per rank, by part
        counted = weights_bytes(model, tp=tp, include_mtp=True, source="inventory")
        assert replace(got, source="inventory") == counted
