"""Weights from safetensors headers: reading them (kvbudget.checkpoint), placing their
bytes per rank by tensor name (kvbudget.weights.headers), and the plan's figure and
warnings for a local folder."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hub_server import TINY_CONFIG, header_sum, safetensors_bytes, tiny_files, tiny_shards

import kvbudget
from kvbudget.checkpoint import local_checkpoint, read_header, tensor_bytes
from kvbudget.errors import ConfigError
from kvbudget.model import load_model
from kvbudget.weights import weights_bytes


def write(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


# the tiny Llama of hub_server, norms stored in F32:
# embeddings 256 x 64 x 2 = 32,768; per layer q 8,192 + k 4,096 + v 4,096 + o 8,192 +
# gate/up/down 3 x 16,384 + two F32 norms 2 x 256 = 74,240; final norm 256; lm_head 32,768
TINY_HEADER_BYTES = 32_768 + 2 * 74_240 + 256 + 32_768  # 214,272
# the inventory counts the norms in the config's bf16: 640 B less (0.30%, under 0.5%)
TINY_INVENTORY_BYTES = TINY_HEADER_BYTES - 5 * 64 * 2  # 213,632


def test_dtype_widths() -> None:
    assert tensor_bytes("BF16", (256, 64), where="t") == 32_768  # 256 x 64 x 2
    assert tensor_bytes("F8_E4M3", (3, 5), where="t") == 15
    assert tensor_bytes("I64", (7,), where="t") == 56
    assert tensor_bytes("BOOL", (9,), where="t") == 9
    assert tensor_bytes("F4", (3, 3), where="t") == 5  # 9 x 4 bits = 36 bits: 5 bytes
    assert tensor_bytes("F32", (), where="t") == 4  # a scalar


def test_local_headers_sum_to_the_tensor_sizes(tmp_path: Path) -> None:
    folder = write(tmp_path / "tiny", tiny_files())
    checkpoint = local_checkpoint(folder)
    assert checkpoint is not None
    assert checkpoint.total_bytes == TINY_HEADER_BYTES == header_sum(tiny_shards())
    assert checkpoint.index_total_bytes == TINY_HEADER_BYTES
    assert checkpoint.files == (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    )
    assert len(checkpoint.tensors) == 1 + 2 * 9 + 2


def test_a_local_folder_plans_with_its_header_bytes(tmp_path: Path) -> None:
    folder = write(tmp_path / "tiny", tiny_files())
    model = load_model(folder)
    counted = weights_bytes(model, source="inventory")
    assert counted.total_bytes == TINY_INVENTORY_BYTES and counted.source == "inventory"
    loaded = weights_bytes(model)
    assert loaded.total_bytes == TINY_HEADER_BYTES and loaded.source == "safetensors headers"
    assert loaded.norms_bytes == 5 * 256 and loaded.other_bytes == 0  # every tensor matched
    plan = kvbudget.plan(str(folder), max_seq_len=4096, max_batch_size=4)
    assert plan.budget.weights_bytes == TINY_HEADER_BYTES
    assert plan.weights_source == {"target": "safetensors headers"}
    assert plan.target_revision is None
    assert not [w for w in plan.warnings if "safetensors" in w]  # 0.30% is within 0.5%


def test_tensor_parallel_shards_each_stored_tensor_by_its_inventory_tensor(
    tmp_path: Path,
) -> None:
    model = load_model(write(tmp_path / "tiny", tiny_files()))
    # TP 2: embeddings and lm_head 128 of 256 rows (16,384 each); per layer q 2 of 4
    # heads (4,096), k and v 1 of 2 KV heads (2,048 each), o half its columns (4,096),
    # gate/up/down half of 128 (8,192 each), F32 norms whole (2 x 256) = 37,376
    per_rank = 16_384 + 2 * 37_376 + 256 + 16_384
    assert weights_bytes(model, tp=2).total_bytes == per_rank == 107_776
    # TP 8: 4 heads and 2 KV heads replicated once a rank has fewer than one: q 1 head
    # (2,048), k, v 1 KV head each (2,048), o 16 columns (2,048); MLP 16 of 128 (2,048
    # each); embeddings and lm_head 32 rows (4,096 each)
    layer8 = 2_048 + 2 * 2_048 + 2_048 + 3 * 2_048 + 512
    assert weights_bytes(model, tp=8).total_bytes == 4_096 + 2 * layer8 + 256 + 4_096


def test_a_text_model_nested_in_a_multimodal_wrapper_is_matched(tmp_path: Path) -> None:
    # transformers' newer multimodal wrappers store the text model as
    # model.language_model.layers.N... (the tiny Llama renamed so): every tensor still
    # matches its model.layers.N... inventory tensor, so TP 2 shards it as before
    from hub_server import sharded

    nested = {
        shard: {name.replace("model.", "model.language_model.", 1): t for name, t in spec.items()}
        for shard, spec in tiny_shards().items()
    }
    assert (
        "model.language_model.layers.1.mlp.down_proj.weight"
        in nested["model-00002-of-00002.safetensors"]
    )
    files = {"config.json": json.dumps(TINY_CONFIG).encode(), **sharded(nested)}
    model = load_model(write(tmp_path / "nested", files))
    at_tp2 = weights_bytes(model, tp=2)
    assert at_tp2.total_bytes == 107_776  # the per-rank sum of the TP 2 test above
    assert at_tp2.other_bytes == 0  # nothing fell through to "held whole"
    assert weights_bytes(model, pp=2, pp_stage=0).total_bytes == 32_768 + 74_240


def test_pipeline_stages_hold_their_layers_tensors(tmp_path: Path) -> None:
    model = load_model(write(tmp_path / "tiny", tiny_files()))
    first = weights_bytes(model, pp=2, pp_stage=0)
    last = weights_bytes(model, pp=2, pp_stage=1)
    assert first.total_bytes == 32_768 + 74_240  # embeddings + layer 0
    assert last.total_bytes == 74_240 + 256 + 32_768  # layer 1 + norm + lm_head
    assert weights_bytes(model, pp=2).pp_stage == 1  # the larger stage is reported


def test_a_difference_over_half_a_percent_is_a_warning(tmp_path: Path) -> None:
    files = tiny_files(norm="BF16", head="F32")  # an lm_head stored in F32
    folder = write(tmp_path / "f32head", files)
    # headers: 32,768 + 2 x 73,984 (bf16 norms) + 128 + 65,536 (256 x 64 x 4) = 246,400
    assert header_sum(tiny_shards(norm="BF16", head="F32")) == 246_400
    plan = kvbudget.plan(str(folder), max_seq_len=4096, max_batch_size=4)
    assert plan.budget.weights_bytes == 246_400
    (note,) = [w for w in plan.warnings if "safetensors headers hold" in w]
    # 246,400 - 213,632 = +32,768 B = +15.34% of the inventory's count
    assert "246,400 B" in note and "213,632 B" in note and "(+32,768 B, +15.34%)" in note


def test_unmatched_tensors_are_held_whole_and_reported(tmp_path: Path) -> None:
    shards = tiny_shards()
    extra = {"model.layers.1.self_attn.rotary_emb.inv_freq": ("F32", (8,))}  # 32 B
    shards["model-00002-of-00002.safetensors"] |= extra
    from hub_server import sharded

    folder = write(
        tmp_path / "tiny", {"config.json": json.dumps(TINY_CONFIG).encode(), **sharded(shards)}
    )
    model = load_model(folder)
    # the rotary buffer matches no inventory tensor: 32 B, whole on every TP rank, on
    # layer 1's stage
    assert weights_bytes(model, tp=2).other_bytes == 32
    assert weights_bytes(model, tp=2).total_bytes == 107_776 + 32
    assert weights_bytes(model, pp=2, pp_stage=1).other_bytes == 32
    assert weights_bytes(model, pp=2, pp_stage=0).other_bytes == 0


def test_packed_int4_checkpoints_count_their_stored_tensors(tmp_path: Path) -> None:
    cfg = {**TINY_CONFIG, "num_hidden_layers": 1, "torch_dtype": "float16"}
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 32}

    def awq(name: str, out: int, inp: int) -> dict[str, tuple[str, tuple[int, ...]]]:
        # AutoAWQ: qweight I32 [in, out/8], qzeros I32 [in/32, out/8], scales F16 [in/32, out]
        return {
            f"{name}.qweight": ("I32", (inp, out // 8)),
            f"{name}.qzeros": ("I32", (inp // 32, out // 8)),
            f"{name}.scales": ("F16", (inp // 32, out)),
        }

    p = "model.layers.0"
    tensors = {
        "model.embed_tokens.weight": ("F16", (256, 64)),
        **awq(f"{p}.self_attn.q_proj", 64, 64),  # 2,048 + 64 + 256 = 2,368
        **awq(f"{p}.self_attn.k_proj", 32, 64),  # 1,024 + 32 + 128 = 1,184
        **awq(f"{p}.self_attn.v_proj", 32, 64),  # 1,184
        **awq(f"{p}.self_attn.o_proj", 64, 64),  # 2,368
        **awq(f"{p}.mlp.gate_proj", 128, 64),  # 4,096 + 128 + 512 = 4,736
        **awq(f"{p}.mlp.up_proj", 128, 64),  # 4,736
        **awq(f"{p}.mlp.down_proj", 64, 128),  # 4,096 + 128 + 512 = 4,736
        f"{p}.input_layernorm.weight": ("F16", (64,)),
        f"{p}.post_attention_layernorm.weight": ("F16", (64,)),
        "model.norm.weight": ("F16", (64,)),
        "lm_head.weight": ("F16", (256, 64)),
    }
    files = {
        "config.json": json.dumps(cfg).encode(),
        "model.safetensors": safetensors_bytes(tensors),
    }
    model = load_model(write(tmp_path / "awq", files))
    got = weights_bytes(model)
    # 32,768 + (2,368 + 1,184 + 1,184 + 2,368 + 3 x 4,736 + 2 x 128) + 128 + 32,768
    assert got.total_bytes == 87_232 and got.source == "safetensors headers"
    assert got.quantization == "awq-int4-g32"


def write_raw(path: Path, header: bytes, data: bytes = b"") -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def test_damaged_headers_are_config_errors(tmp_path: Path) -> None:
    entry = {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 6]}  # 8 bytes needed
    bad = write_raw(tmp_path / "a.safetensors", json.dumps({"w": entry}).encode(), bytes(6))
    from kvbudget.checkpoint import header_tensors

    with pytest.raises(ConfigError, match=r"BF16 x \[2, 2\] is 8 bytes but its data_offsets"):
        header_tensors(read_header(bad), "a.safetensors", str(bad))
    odd = {"w": {"dtype": "Q3", "shape": [2], "data_offsets": [0, 1]}}
    path = write_raw(tmp_path / "b.safetensors", json.dumps(odd).encode(), bytes(1))
    with pytest.raises(ConfigError, match="'Q3' is not a safetensors dtype"):
        header_tensors(read_header(path), "b.safetensors", str(path))
    long = tmp_path / "c.safetensors"
    long.write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(ConfigError, match="does not fit a file of 10 bytes"):
        read_header(long)
    with pytest.raises(ConfigError, match="not JSON"):
        read_header(write_raw(tmp_path / "d.safetensors", b"\xff\xfe"))


def test_an_index_naming_a_shard_outside_its_folder_is_refused(tmp_path: Path) -> None:
    folder = write(tmp_path / "m", {"config.json": json.dumps(TINY_CONFIG).encode()})
    index = {"weight_map": {"w": "../elsewhere.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="outside the checkpoint directory"):
        load_model(folder)


def test_an_index_naming_a_shard_with_a_nul_character_is_refused(tmp_path: Path) -> None:
    """A NUL in a shard name made pathlib raise ValueError ("embedded null byte"), a
    traceback; both readers (the headers here, the reference engine's loader) now refuse
    it with one ConfigError naming the index's weight_map (found by test_fuzz_inputs)."""
    folder = write(tmp_path / "m", {"config.json": json.dumps(TINY_CONFIG).encode()})
    index = {"weight_map": {"w": "model\u0000.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConfigError, match="NUL character") as err:
        load_model(folder)
    assert err.value.field == "weight_map"
    from kvbudget.engine.checkpoint import read_tensors

    with pytest.raises(ConfigError, match="NUL character"):
        read_tensors(folder)


def test_a_folder_missing_a_shard_counts_from_the_inventory(tmp_path: Path) -> None:
    files = tiny_files()
    del files["model-00002-of-00002.safetensors"]  # a partial download
    model = load_model(write(tmp_path / "partial", files))
    assert model.checkpoint is None
    assert weights_bytes(model).total_bytes == TINY_INVENTORY_BYTES


def test_expert_parallelism_holds_whole_experts_per_rank(tmp_path: Path) -> None:
    cfg = {
        **TINY_CONFIG,
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "num_hidden_layers": 1,
        "num_experts": 3,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
    }
    p = "model.layers.0"
    tensors = {
        "model.embed_tokens.weight": ("BF16", (256, 64)),  # 32,768
        f"{p}.self_attn.q_proj.weight": ("BF16", (64, 64)),  # 8,192
        f"{p}.self_attn.k_proj.weight": ("BF16", (32, 64)),  # 4,096
        f"{p}.self_attn.v_proj.weight": ("BF16", (32, 64)),  # 4,096
        f"{p}.self_attn.o_proj.weight": ("BF16", (64, 64)),  # 8,192
        f"{p}.self_attn.q_norm.weight": ("BF16", (16,)),  # 32
        f"{p}.self_attn.k_norm.weight": ("BF16", (16,)),  # 32
        f"{p}.input_layernorm.weight": ("BF16", (64,)),  # 128
        f"{p}.post_attention_layernorm.weight": ("BF16", (64,)),  # 128
        f"{p}.mlp.gate.weight": ("BF16", (3, 64)),  # 384
        **{
            f"{p}.mlp.experts.{e}.{proj}.weight": ("BF16", shape)  # 4,096 each
            for e in range(3)
            for proj, shape in (
                ("gate_proj", (32, 64)),
                ("up_proj", (32, 64)),
                ("down_proj", (64, 32)),
            )
        },
        "model.norm.weight": ("BF16", (64,)),  # 128
        "lm_head.weight": ("BF16", (256, 64)),  # 32,768
    }
    files = {
        "config.json": json.dumps(cfg).encode(),
        "model.safetensors": safetensors_bytes(tensors),
    }
    model = load_model(write(tmp_path / "moe", files))
    # 32,768 + attention 24,640 + norms 256 + router 384 + 3 experts x 12,288 + 128 + 32,768
    assert weights_bytes(model).total_bytes == 127_808
    # TP 2, EP 2: embeddings and lm_head halved (16,384 each), q 4,096, k and v 2,048,
    # o 4,096, q/k norms whole (64), norms 256, router 384, ceil(3 / 2) = 2 whole
    # experts (24,576), final norm 128
    ep = weights_bytes(model, tp=2, ep=2)
    assert ep.total_bytes == 16_384 + 12_352 + 256 + 384 + 24_576 + 128 + 16_384 == 70_464
    assert ep.routed_experts_bytes == 24_576 and ep.source == "safetensors headers"
    # TP 2 alone splits each expert's 32 rows: 3 x 6,144 = 18,432
    assert weights_bytes(model, tp=2).routed_experts_bytes == 18_432
    assert weights_bytes(model, tp=2, ep=2, source="inventory").total_bytes == 70_464
