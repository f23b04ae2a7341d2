"""Model specs from Hugging Face configs and built-in presets (kvbudget.model)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

import kvbudget
from kvbudget import (
    AttentionLayer,
    ConfigError,
    GatedDeltaNetLayer,
    Mamba2Layer,
    MLALayer,
    ModelSpec,
    NoCacheLayer,
    UnknownModelError,
    UnsupportedArchitectureError,
    list_presets,
    load_model,
)

PRESET_DIR = Path(__file__).resolve().parents[1] / "src" / "kvbudget" / "data" / "models"


def tiny_llama(**overrides: Any) -> dict[str, Any]:
    """A small Llama-style config; ``None`` values remove a key."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "bfloat16",
        "hidden_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "max_position_embeddings": 2048,
        "vocab_size": 1000,
    }
    cfg.update(overrides)
    return {k: v for k, v in cfg.items() if v is not None}


def write_config(tmp_path: Path, cfg: dict[str, Any], name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return path


def kinds(model: ModelSpec) -> dict[str, int]:
    counts: dict[str, int] = {}
    for layer in model.layers:
        counts[layer.kind] = counts.get(layer.kind, 0) + 1
    return counts


def sliding_indices(model: ModelSpec) -> list[int]:
    return [x.index for x in model.layers if x.sliding_window is not None]


# --------------------------------------------------------------------------- presets


def test_preset_list_matches_shipped_files() -> None:
    files = sorted(p.stem.replace("--", "/", 1) for p in PRESET_DIR.glob("*.json"))
    assert list(list_presets()) == files
    # 25 + Qwen3.5 x3, Kimi-K2, DeepSeek-V3.2, MiniMax-M2, AWQ, GPTQ, GLM x3, EAGLE-1,
    # Llama-4 x2, NVFP4, compressed-tensors FP8
    assert len(files) == 42
    assert (PRESET_DIR / "SOURCES.md").is_file()


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_loads(preset: str) -> None:
    model = load_model(preset)
    assert model.name == preset
    assert model.source == f"preset {preset}"
    assert model.num_layers == len(model.layers) > 0
    assert [x.index for x in model.layers] == list(range(model.num_layers))


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/llama-3.1-8b-instruct",
        "META-LLAMA/LLAMA-3.1-8B-INSTRUCT",
        "Llama-3.1-8B-Instruct",
        "llama-3.1-8b-instruct",
    ],
)
def test_preset_ids_are_case_insensitive(name: str) -> None:
    assert load_model(name).name == "meta-llama/Llama-3.1-8B-Instruct"


def test_spec_is_immutable() -> None:
    model = load_model("meta-llama/Llama-3.1-8B")
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.name = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        model.config["num_hidden_layers"] = 1  # type: ignore[index]
    assert isinstance(model.layers, tuple)


# --------------------------------------------------------------------------- full attention


def test_llama_gqa() -> None:
    model = load_model("meta-llama/Llama-3.1-8B")
    assert model.model_type == "llama"
    assert model.dtype == "bf16"
    assert model.max_position_embeddings == 131072
    assert model.num_layers == 32
    assert model.num_attention_heads == 32
    assert model.mtp_layers == ()
    assert not model.is_eagle3
    # head_dim absent: hidden_size 4096 / 32 heads = 128
    assert set(model.layers) == {
        AttentionLayer(index=i, num_kv_heads=8, head_dim=128) for i in range(32)
    }


def test_llama_405b_and_70b_geometry() -> None:
    big = load_model("meta-llama/Llama-3.1-405B-Instruct")
    # 16384 hidden / 128 heads = 128 head_dim; 8 KV heads
    assert (big.num_layers, big.layers[0].num_kv_heads, big.layers[0].head_dim) == (126, 8, 128)  # type: ignore[union-attr]
    mid = load_model("meta-llama/Llama-3.3-70B-Instruct")
    # 8192 hidden / 64 heads = 128
    assert (mid.num_layers, mid.layers[0].num_kv_heads, mid.layers[0].head_dim) == (80, 8, 128)  # type: ignore[union-attr]


def test_mha_defaults_kv_heads_to_attention_heads(tmp_path: Path) -> None:
    path = write_config(tmp_path, tiny_llama(num_key_value_heads=None))
    model = load_model(path)
    # no num_key_value_heads: 8 KV heads = 8 attention heads; head_dim 256 / 8 = 32
    assert model.layers == tuple(
        AttentionLayer(index=i, num_kv_heads=8, head_dim=32) for i in range(4)
    )


def test_mqa(tmp_path: Path) -> None:
    model = load_model(write_config(tmp_path, tiny_llama(num_key_value_heads=1)))
    assert {x.num_kv_heads for x in model.layers} == {1}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("preset", "explicit", "derived"),
    [
        ("Qwen/Qwen3-0.6B", 128, 64),  # head_dim 128; 1024 hidden / 16 heads would be 64
        ("Qwen/Qwen3-32B", 128, 80),  # head_dim 128; 5120 / 64 would be 80
        ("openai/gpt-oss-120b", 64, 45),  # head_dim 64; 2880 / 64 would be 45
        ("google/gemma-3-27b-it", 128, 168),  # head_dim 128; 5376 / 32 would be 168
    ],
)
def test_explicit_head_dim_wins(preset: str, explicit: int, derived: int) -> None:
    model = load_model(preset)
    assert model.hidden_size // model.num_attention_heads == derived
    assert {x.head_dim for x in model.layers if isinstance(x, AttentionLayer)} == {explicit}


def test_head_dim_from_hidden_size(tmp_path: Path) -> None:
    model = load_model(write_config(tmp_path, tiny_llama(hidden_size=512)))
    assert model.layers[0] == AttentionLayer(index=0, num_kv_heads=2, head_dim=64)  # 512 / 8


def test_qwen3_moe_four_kv_heads() -> None:
    model = load_model("Qwen/Qwen3-235B-A22B")
    assert model.model_type == "qwen3_moe"
    assert kinds(model) == {"attention": 94}
    assert sliding_indices(model) == []  # use_sliding_window false
    assert {x.num_kv_heads for x in model.layers} == {4}  # type: ignore[union-attr]


# --------------------------------------------------------------------------- sliding window


def test_mistral_uniform_sliding_window() -> None:
    model = load_model("mistralai/Mistral-7B-v0.1")
    assert model.max_position_embeddings == 32768
    assert model.layers == tuple(
        AttentionLayer(index=i, num_kv_heads=8, head_dim=128, sliding_window=4096)
        for i in range(32)
    )


def test_mistral_use_sliding_window_false(tmp_path: Path) -> None:
    cfg = tiny_llama(model_type="mistral", sliding_window=512, use_sliding_window=False)
    assert sliding_indices(load_model(write_config(tmp_path, cfg))) == []


def test_mistral_null_sliding_window(tmp_path: Path) -> None:
    cfg = tiny_llama(model_type="mistral")
    cfg["sliding_window"] = None
    assert sliding_indices(load_model(write_config(tmp_path, cfg))) == []


@pytest.mark.parametrize("model_type", ["qwen2", "qwen3", "qwen3_moe"])
def test_qwen_sliding_window_off_unless_enabled(tmp_path: Path, model_type: str) -> None:
    # transformers: Qwen's use_sliding_window defaults to false, so sliding_window alone
    # does not make any layer slide
    cfg = tiny_llama(model_type=model_type, sliding_window=512)
    assert sliding_indices(load_model(write_config(tmp_path, cfg))) == []


def test_qwen_sliding_window_from_max_window_layers(tmp_path: Path) -> None:
    cfg = tiny_llama(
        model_type="qwen2", sliding_window=512, use_sliding_window=True, max_window_layers=2
    )
    model = load_model(write_config(tmp_path, cfg))
    # layers i >= max_window_layers (2) slide: 2, 3 of 4
    assert sliding_indices(model) == [2, 3]
    assert {x.sliding_window for x in model.layers[2:]} == {512}


def test_qwen_max_window_layers_defaults_to_28(tmp_path: Path) -> None:
    cfg = tiny_llama(
        model_type="qwen3", num_hidden_layers=30, sliding_window=512, use_sliding_window=True
    )
    assert sliding_indices(load_model(write_config(tmp_path, cfg))) == [28, 29]


def test_gpt_oss_layer_types() -> None:
    model = load_model("openai/gpt-oss-120b")
    assert model.dtype is None  # the checkpoint names no torch_dtype
    assert kinds(model) == {"attention": 36}
    # layer_types alternates sliding_attention, full_attention: even indices slide
    assert sliding_indices(model) == list(range(0, 36, 2))
    assert {x.sliding_window for x in model.layers[0::2]} == {128}
    assert {x.sliding_window for x in model.layers[1::2]} == {None}
    assert {(x.num_kv_heads, x.head_dim) for x in model.layers} == {(8, 64)}  # type: ignore[union-attr]
    small = load_model("openai/gpt-oss-20b")
    assert sliding_indices(small) == list(range(0, 24, 2))


def test_gpt_oss_default_alternates_without_layer_types(tmp_path: Path) -> None:
    cfg = tiny_llama(model_type="gpt_oss", sliding_window=128)
    # transformers' GptOssConfig: layer i slides iff (i + 1) % 2 == 1
    assert sliding_indices(load_model(write_config(tmp_path, cfg))) == [0, 2]


def test_layer_types_override(tmp_path: Path) -> None:
    types = ["full_attention", "full_attention", "sliding_attention", "full_attention"]
    cfg = tiny_llama(model_type="mistral", sliding_window=64, layer_types=types)
    assert sliding_indices(load_model(write_config(tmp_path, cfg))) == [2]


def test_gemma2_alternating() -> None:
    model = load_model("google/gemma-2-9b-it")
    assert model.num_layers == 42
    assert model.max_position_embeddings == 8192
    # Gemma-2 default: layer i slides iff (i + 1) % 2 == 1, i.e. even indices
    assert sliding_indices(model) == list(range(0, 42, 2))
    assert {x.sliding_window for x in model.layers[0::2]} == {4096}
    assert {(x.num_kv_heads, x.head_dim) for x in model.layers} == {(8, 256)}  # type: ignore[union-attr]


def test_gemma3_five_local_one_global() -> None:
    model = load_model("google/gemma-3-27b-it")
    assert model.model_type == "gemma3"
    assert model.dtype == "bf16"  # from the outer config
    assert model.num_layers == 62
    # text_config leaves these out: transformers' Gemma3TextConfig defaults
    assert model.max_position_embeddings == 131072
    assert model.vocab_size == 262208
    full = [x.index for x in model.layers if x.sliding_window is None]
    # pattern 6: layer i is global iff (i + 1) % 6 == 0 -> 5, 11, ..., 59 (10 layers)
    assert full == list(range(5, 62, 6))
    assert len(full) == 10
    assert len(sliding_indices(model)) == 52
    assert {x.sliding_window for x in model.layers if x.sliding_window} == {1024}
    assert {(x.num_kv_heads, x.head_dim) for x in model.layers} == {(16, 128)}  # type: ignore[union-attr]
    assert model.config["sliding_window"] == 1024  # the text config is the one exposed


def test_gemma3_custom_pattern(tmp_path: Path) -> None:
    text = {
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "num_hidden_layers": 6,
        "sliding_window": 512,
        "sliding_window_pattern": 3,
    }
    path = write_config(tmp_path, {"model_type": "gemma3", "text_config": text})
    model = load_model(path)
    assert sliding_indices(model) == [0, 1, 3, 4]  # global at (i + 1) % 3 == 0: 2, 5
    assert model.dtype is None


# --------------------------------------------------------------------------- MLA and MTP


def test_deepseek_v3_mla_and_mtp() -> None:
    model = load_model("deepseek-ai/DeepSeek-V3")
    assert model.num_layers == 61
    assert kinds(model) == {"mla": 61}
    assert set(model.layers) == {
        MLALayer(index=i, kv_lora_rank=512, qk_rope_head_dim=64) for i in range(61)
    }
    # one MTP layer, kept apart from the 61 model layers, indexed after them
    assert model.mtp_layers == (MLALayer(index=61, kv_lora_rank=512, qk_rope_head_dim=64),)
    assert model.layers[0].kv_lora_rank + model.layers[0].qk_rope_head_dim == 576  # type: ignore[union-attr]
    assert "1 mtp" in model.describe()


def test_mtp_on_a_non_mla_model_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="num_nextn_predict_layers"):
        load_model(write_config(tmp_path, tiny_llama(num_nextn_predict_layers=1)))


# --------------------------------------------------------------------------- recurrent


@pytest.mark.parametrize(
    "preset", ["Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3-Next-80B-A3B-Thinking"]
)
def test_qwen3_next(preset: str) -> None:
    model = load_model(preset)
    assert model.num_layers == 48
    assert kinds(model) == {"gated_deltanet": 36, "attention": 12}
    full = [x.index for x in model.layers if isinstance(x, AttentionLayer)]
    # full_attention_interval 4: layer i is full iff (i + 1) % 4 == 0
    assert full == list(range(3, 48, 4))
    assert {x for x in model.layers if isinstance(x, AttentionLayer)} == {
        AttentionLayer(index=i, num_kv_heads=2, head_dim=256) for i in full
    }
    assert model.layers[0] == GatedDeltaNetLayer(
        index=0, num_k_heads=16, num_v_heads=32, k_head_dim=128, v_head_dim=128, conv_kernel=4
    )


def test_qwen3_next_layer_types(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "Qwen--Qwen3-Next-80B-A3B-Instruct.json").read_text())
    cfg["num_hidden_layers"] = 3
    cfg["layer_types"] = ["full_attention", "linear_attention", "full_attention"]
    model = load_model(write_config(tmp_path, cfg))
    assert [x.kind for x in model.layers] == ["attention", "gated_deltanet", "attention"]


def test_nemotron_h_8b() -> None:
    model = load_model("nvidia/Nemotron-H-8B-Base-8K")
    assert model.num_layers == 52
    assert kinds(model) == {"mamba2": 24, "attention": 4, "none": 24}
    assert [x.index for x in model.layers if isinstance(x, AttentionLayer)] == [7, 18, 29, 40]
    assert {x for x in model.layers if isinstance(x, AttentionLayer)} == {
        AttentionLayer(index=i, num_kv_heads=8, head_dim=128) for i in (7, 18, 29, 40)
    }
    assert model.layers[0] == Mamba2Layer(
        index=0, num_heads=128, head_dim=64, n_groups=8, ssm_state_size=128, conv_kernel=4
    )
    assert model.layers[1] == NoCacheLayer(index=1)


def test_nemotron_h_56b() -> None:
    model = load_model("nvidia/Nemotron-H-56B-Base-8K")
    assert kinds(model) == {"mamba2": 54, "attention": 10, "none": 54}
    assert {x.ssm_state_size for x in model.layers if isinstance(x, Mamba2Layer)} == {256}


def test_nemotron_h_moe_char(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "nvidia--Nemotron-H-8B-Base-8K.json").read_text())
    cfg["num_hidden_layers"] = 4
    cfg["hybrid_override_pattern"] = "M*E-"
    model = load_model(write_config(tmp_path, cfg))
    assert [x.kind for x in model.layers] == ["mamba2", "attention", "none", "none"]


# --------------------------------------------------------------------------- EAGLE3


def test_eagle3_llama_head() -> None:
    model = load_model("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert model.is_eagle3  # architectures say LlamaForCausalLM; draft_vocab_size marks it
    assert model.dtype == "fp16"
    assert model.layers == (AttentionLayer(index=0, num_kv_heads=8, head_dim=128),)
    assert "[eagle3 head]" in model.describe()


def test_eagle3_gpt_oss_head() -> None:
    model = load_model("nvidia/gpt-oss-120b-Eagle3-long-context")
    assert model.is_eagle3  # LlamaForCausalLMEagle3 and an eagle_config
    assert model.layers == (AttentionLayer(index=0, num_kv_heads=8, head_dim=64),)


def test_eagle3_70b_head() -> None:
    model = load_model("lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B")
    assert model.is_eagle3
    assert model.layers == (AttentionLayer(index=0, num_kv_heads=8, head_dim=128),)


def test_eagle3_by_eagle_config_only(tmp_path: Path) -> None:
    cfg = tiny_llama(num_hidden_layers=1, eagle_config={"use_aux_hidden_state": True})
    assert load_model(write_config(tmp_path, cfg)).is_eagle3


def test_plain_llama_is_not_eagle3(tmp_path: Path) -> None:
    assert not load_model(write_config(tmp_path, tiny_llama())).is_eagle3


# --------------------------------------------------------------------------- paths


def test_path_to_file_and_directory(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    path = write_config(folder, tiny_llama())
    by_file = load_model(path)
    by_dir = load_model(folder)
    by_str = load_model(str(folder))
    assert by_file == by_dir == by_str
    assert by_file.name == "my-model"
    assert by_file.source == str(path)


def test_file_not_named_config_json(tmp_path: Path) -> None:
    model = load_model(write_config(tmp_path, tiny_llama(), name="draft.json"))
    assert model.name == "draft"


def test_preset_file_as_path_equals_preset() -> None:
    by_path = load_model(PRESET_DIR / "meta-llama--Llama-3.1-8B.json")
    by_id = load_model("meta-llama/Llama-3.1-8B")
    assert by_path.layers == by_id.layers


# --------------------------------------------------------------------------- bad input


def assert_typed(exc: BaseException) -> None:
    assert isinstance(exc, ConfigError)
    assert isinstance(exc, ValueError)
    assert not isinstance(exc, KeyError)


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "model_type": "llama",\n  oops\n}\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_model(path)
    assert_typed(info.value)
    assert str(path) in str(info.value)
    assert "line 3" in str(info.value)
    assert info.value.source == str(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"model_type": "\xff\xfe"}')
    with pytest.raises(ConfigError, match="UTF-8") as info:
        load_model(path)
    assert_typed(info.value)
    assert str(path) in str(info.value)


def test_top_level_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match="JSON object"):
        load_model(path)


@pytest.mark.parametrize(
    "missing",
    ["num_hidden_layers", "hidden_size", "num_attention_heads", "max_position_embeddings"],
)
def test_missing_field_is_named(tmp_path: Path, missing: str) -> None:
    path = write_config(tmp_path, tiny_llama(**{missing: None}))
    with pytest.raises(ConfigError) as info:
        load_model(path)
    assert_typed(info.value)
    assert info.value.field == missing
    assert f"'{missing}'" in str(info.value)
    assert str(path) in str(info.value)


def test_missing_model_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, tiny_llama(model_type=None)))
    assert info.value.field == "model_type"
    assert not isinstance(info.value, UnsupportedArchitectureError)


def test_missing_mla_field(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "deepseek-ai--DeepSeek-V3.json").read_text())
    del cfg["kv_lora_rank"]
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, cfg))
    assert info.value.field == "kv_lora_rank"


def test_missing_mamba_field(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "nvidia--Nemotron-H-8B-Base-8K.json").read_text())
    del cfg["ssm_state_size"]
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, cfg))
    assert info.value.field == "ssm_state_size"


def test_missing_field_in_text_config_has_prefix(tmp_path: Path) -> None:
    text = {"hidden_size": 256, "num_attention_heads": 4, "num_hidden_layers": 6}
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, {"model_type": "gemma3", "text_config": text}))
    assert info.value.field == "text_config.sliding_window"


def test_gemma3_without_text_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, {"model_type": "gemma3"}))
    assert info.value.field == "text_config"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_hidden_layers", "32"),
        ("num_hidden_layers", 32.0),
        ("num_hidden_layers", True),
        ("num_hidden_layers", 0),
        ("num_key_value_heads", -2),
        ("head_dim", [128]),
        ("architectures", "LlamaForCausalLM"),
    ],
)
def test_wrong_type(tmp_path: Path, field: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, tiny_llama(**{field: value})))
    assert_typed(info.value)
    assert info.value.field == field


def test_unknown_torch_dtype(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, tiny_llama(torch_dtype="float7")))
    assert info.value.field == "torch_dtype"


def test_kv_heads_must_divide_heads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, tiny_llama(num_key_value_heads=3)))
    assert info.value.field == "num_key_value_heads"


def test_head_dim_not_derivable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not divisible") as info:
        load_model(write_config(tmp_path, tiny_llama(hidden_size=260)))
    assert info.value.field == "head_dim"


def test_unknown_model_type(tmp_path: Path) -> None:
    # RWKV's config has no attention heads: not readable as a generic decoder
    cfg = tiny_llama(model_type="rwkv")
    del cfg["num_attention_heads"]
    path = write_config(tmp_path, cfg)
    with pytest.raises(UnsupportedArchitectureError) as info:
        load_model(path)
    assert_typed(info.value)
    assert "'rwkv'" in str(info.value)
    assert str(path) in str(info.value)
    assert "llama" in str(info.value)  # lists what is supported


def test_unknown_preset_suggests() -> None:
    with pytest.raises(UnknownModelError) as info:
        load_model("meta-llama/Llama-3.1-8B-Instrukt")
    assert_typed(info.value)
    assert "did you mean" in str(info.value)
    assert "meta-llama/Llama-3.1-8B-Instruct" in str(info.value)


def test_unknown_preset_without_close_match() -> None:
    with pytest.raises(UnknownModelError, match="no built-in preset named 'zzz'"):
        load_model("zzz")


def test_partial_short_name_is_unknown() -> None:
    # the part after '/' must match a preset exactly; a prefix of it is no match
    with pytest.raises(UnknownModelError):
        load_model("Qwen3-Next-80B")


def test_missing_file_is_unknown_model(tmp_path: Path) -> None:
    with pytest.raises(UnknownModelError):
        load_model(tmp_path / "nope" / "config.json")


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(UnknownModelError, match=r"no config\.json"):
        load_model(tmp_path)


def test_layer_types_wrong_length(tmp_path: Path) -> None:
    cfg = tiny_llama(sliding_window=64, layer_types=["full_attention"] * 3)
    with pytest.raises(ConfigError, match="3 entries but the model has 4 layers") as info:
        load_model(write_config(tmp_path, cfg))
    assert info.value.field == "layer_types"


def test_layer_types_bad_entry(tmp_path: Path) -> None:
    types = ["full_attention", "linear_attention", "full_attention", "full_attention"]
    with pytest.raises(ConfigError, match="entry 1") as info:
        load_model(write_config(tmp_path, tiny_llama(sliding_window=64, layer_types=types)))
    assert info.value.field == "layer_types"


def test_layer_types_not_a_list(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, tiny_llama(layer_types="full_attention")))
    assert info.value.field == "layer_types"


def test_qwen3_next_bad_layer_type(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "Qwen--Qwen3-Next-80B-A3B-Instruct.json").read_text())
    cfg["num_hidden_layers"] = 2
    cfg["layer_types"] = ["full_attention", "mamba"]
    with pytest.raises(ConfigError, match="entry 1"):
        load_model(write_config(tmp_path, cfg))


def test_bad_hybrid_override_pattern_char(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "nvidia--Nemotron-H-8B-Base-8K.json").read_text())
    cfg["hybrid_override_pattern"] = "M-X" + cfg["hybrid_override_pattern"][3:]
    with pytest.raises(ConfigError, match="character 2 is 'X'") as info:
        load_model(write_config(tmp_path, cfg))
    assert_typed(info.value)
    assert info.value.field == "hybrid_override_pattern"


def test_hybrid_override_pattern_wrong_length(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "nvidia--Nemotron-H-8B-Base-8K.json").read_text())
    cfg["hybrid_override_pattern"] = "M-*"
    with pytest.raises(ConfigError, match="3 characters") as info:
        load_model(write_config(tmp_path, cfg))
    assert info.value.field == "hybrid_override_pattern"


def test_hybrid_override_pattern_missing(tmp_path: Path) -> None:
    cfg = json.loads((PRESET_DIR / "nvidia--Nemotron-H-8B-Base-8K.json").read_text())
    del cfg["hybrid_override_pattern"]
    with pytest.raises(ConfigError) as info:
        load_model(write_config(tmp_path, cfg))
    assert info.value.field == "hybrid_override_pattern"


def test_qwen3_next_ships_one_full_attention_mtp_layer() -> None:
    spec = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct")
    # no num_nextn_predict_layers in the config: 1, as the checkpoint's mtp.* tensors hold
    (mtp,) = spec.mtp_layers
    assert isinstance(mtp, AttentionLayer)
    assert (mtp.index, mtp.num_kv_heads, mtp.head_dim) == (48, 2, 256)


def test_raw_config_keeps_the_top_level_of_multimodal_configs() -> None:
    spec = load_model("google/gemma-3-27b-it")
    assert "vision_config" in spec.raw_config
    assert "vision_config" not in spec.config


def test_model_type_of_the_wrong_type_says_so() -> None:
    with pytest.raises(ConfigError, match="expected a string, got 3"):
        kvbudget.parse_config({"model_type": 3}, source="x.json", name="x")


def _llama_with(**changes: object) -> dict[str, object]:
    import json

    from kvbudget.model import _preset_dir

    cfg: dict[str, object] = json.loads(
        (_preset_dir() / "meta-llama--Llama-3.1-8B-Instruct.json").read_text()
    )
    cfg.update(changes)
    return cfg


def test_an_unknown_model_type_with_standard_fields_is_a_generic_decoder() -> None:
    from kvbudget.model import parse_config

    spec = parse_config(_llama_with(model_type="olmo2"), source="test", name="olmo-like")
    # 32 layers x 2 (K, V) x 8 kv heads x (4096 / 32 = 128) x 2 B = 131,072 B/token, as the
    # Llama it copies
    assert kvbudget.cache_cost(spec).slope == 131072
    (note,) = spec.assumed
    assert "'olmo2' is not one kvbudget models" in note and "head_dim missing: 128" in note
    p = kvbudget.plan(spec, spec="none", kv_budget="40GiB", max_seq_len=8192)
    assert note in p.warnings


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        (dict(kv_lora_rank=512), "kv_lora_rank"),
        (dict(linear_num_value_heads=32), "linear_num_value_heads"),
        (dict(text_config={}), "text_config"),
        (dict(num_attention_heads=None), "num_attention_heads"),
    ],
)
def test_a_generic_decoder_refuses_what_it_cannot_read(
    changes: dict[str, object], field: str
) -> None:
    from kvbudget.errors import UnsupportedArchitectureError
    from kvbudget.model import parse_config

    cfg = _llama_with(model_type="mystery", **changes)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(UnsupportedArchitectureError, match=repr(field)):
        parse_config(cfg, source="test", name="mystery")


def test_a_multimodal_wrapper_plans_its_text_model() -> None:
    from kvbudget.model import parse_config

    text = _llama_with()
    wrapper = {
        "model_type": "llava",
        "architectures": ["LlavaForConditionalGeneration"],
        "torch_dtype": "bfloat16",
        "text_config": {k: v for k, v in text.items() if k != "torch_dtype"},
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024},
    }
    spec = parse_config(wrapper, source="test", name="llava-like")
    # the text model's layers: 32 x 2 x 8 x 128 x 2 B, bf16 from the wrapper
    assert kvbudget.cache_cost(spec).slope == 131072 and spec.dtype == "bf16"
    (note,) = spec.assumed
    assert "wraps a llama text model" in note and "vision tower keeps no KV" in note


def test_qwen35_is_qwen3_next_inside_a_vision_language_wrapper() -> None:
    m = load_model("Qwen/Qwen3.5-397B-A17B")
    # layer_types: every 4th of 60 layers is full attention (3, 7, ..., 59)
    kinds = [x.kind for x in m.layers]
    assert kinds.count("attention") == 15 and kinds.count("gated_deltanet") == 45
    assert [x.index for x in m.layers if x.kind == "attention"][:2] == [3, 7]
    assert m.ssm_state_dtype == "fp32" and len(m.mtp_layers) == 1  # mtp_num_hidden_layers
    detail = kvbudget.cache_cost_detail(m, max_batch_size=1, lookahead_tokens=0)
    # 15 full layers x 2 (K, V) x 2 kv heads x 256 x 2 B = 30,720 B/token
    assert detail.cost.slope == 30720
    # per delta-net layer: conv (2 x 16 x 128 + 64 x 128 = 12,288 channels) x 3 rows x 2 B
    # = 73,728 + fp32 state 64 x 128 x 128 x 4 B = 4,194,304 -> 4,268,032; x 45
    assert detail.state_bytes_per_seq == 45 * 4268032 == 192061440
    assert any("vision tower keeps no KV" in note for note in m.assumed)


def test_kimi_k2_is_deepseek_v3_mla() -> None:
    m = load_model("moonshotai/Kimi-K2-Instruct")
    assert [x.kind for x in m.layers] == ["mla"] * 61 and not m.mtp_layers
    # 61 layers x (512 + 64) latent x 2 B = 70,272 B/token, on every TP rank
    assert kvbudget.cache_cost(m, tp=8).slope == 70272


def test_deepseek_v32_keeps_an_indexer_key_beside_the_latent() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3.2")
    # per layer: latent (512 + 64) x 2 B = 1,152 + indexer 128 fp8 + 128 / 128 x 4 B
    # scale = 132 -> 1,284 B/token; x 61 layers = 78,324
    assert kvbudget.cache_cost(m, tp=8).slope == 78324
    # the indexer key is bytes whatever the KV dtype: fp8 latent 576 + 132 = 708 x 61
    assert kvbudget.cache_cost(m, kv_dtype="fp8").slope == 708 * 61
    with pytest.raises(kvbudget.InvalidArgumentError, match="indexer"):
        kvbudget.plan(m, spec="mtp", engine="vllm", kv_budget="40GiB", max_seq_len=8192)


def test_deepseek_v32_indexer_weights() -> None:
    from kvbudget.weights import count_params

    v32 = count_params(load_model("deepseek-ai/DeepSeek-V3.2")).total
    v3 = count_params(load_model("deepseek-ai/DeepSeek-V3")).total
    # per layer: wq_b 1,536 x 64 x 128 = 12,582,912 + wk 7,168 x 128 = 917,504 + k_norm
    # (weight + bias) 256 + weights_proj 7,168 x 64 = 458,752 -> 13,959,424; x (61 + 1 MTP)
    assert v32 - v3 == 62 * 13959424


def test_minimax_m2_gqa_moe_with_whole_projection_qk_norms() -> None:
    from kvbudget.weights import count_params, weights_bytes

    m = load_model("MiniMaxAI/MiniMax-M2")
    # 62 layers x 2 x 8 kv heads x 128 x 2 B = 253,952 B/token, every layer full attention
    assert kvbudget.cache_cost(m).slope == 253952
    # per layer: q 6,144 x 3,072 + k, v 1,024 x 3,072 each + o 3,072 x 6,144 = 44,040,192;
    # q/k norms 6,144 + 1,024; 2 norms 6,144; router 256 x 3,072 + 256 bias;
    # experts 256 x 3 x 1,536 x 3,072 = 3,623,878,656 -> 3,668,718,848 per layer;
    # x 62 + embeddings and lm_head 2 x 200,064 x 3,072 + final norm 3,072
    assert count_params(m).total == 62 * 3668718848 + 2 * 614596608 + 3072 == 228689764864
    assert weights_bytes(m).quantization == "fp8-block128x128"
