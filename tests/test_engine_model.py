"""The engine's decoder against transformers, checkpoints, and sliding-window layers."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_engine_support import make_plan

torch = pytest.importorskip("torch")

from kvbudget.engine import Engine, SamplingParams, noisy_copy  # noqa: E402
from kvbudget.engine.checkpoint import INDEX_FILE, build_model, read_tensors  # noqa: E402
from kvbudget.engine.config import read_decoder_config  # noqa: E402
from kvbudget.engine.demo import llama_config, write_model  # noqa: E402
from kvbudget.engine.model import Decoder  # noqa: E402
from kvbudget.engine.reference import dense_logits  # noqa: E402
from kvbudget.errors import ConfigError, UnsupportedArchitectureError  # noqa: E402

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,  # small, so the scaling changes tiny models
}
PROMPT = [3, 141, 59, 26, 53, 58, 97, 93, 23, 84, 62, 64, 33, 83, 27, 95, 2, 88, 41, 97]


def _decoder(path: str | Path, seed: int = 0) -> Decoder:
    model = build_model(path, seed=seed, device="cpu")
    assert isinstance(model, Decoder)
    return model


@pytest.mark.parametrize("tied", [False, True])
def test_logits_match_transformers(tmp_path: Path, tied: bool) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = llama_config(
        num_layers=3, rope_theta=500000.0, rope_scaling=LLAMA3, tie_word_embeddings=tied
    )
    directory = write_model(cfg, tmp_path / "m", seed=4)
    # reshard into files of at most 40 kB, with an index, and read it back
    model = _decoder(directory)
    from kvbudget.engine import save_checkpoint

    shutil.rmtree(directory)
    save_checkpoint(model, cfg, directory, max_shard_bytes=40_000)
    index = json.loads((Path(directory) / INDEX_FILE).read_text())
    assert len(set(index["weight_map"].values())) > 3
    ours = _decoder(directory, seed=99)  # seed unused: the weights are loaded
    hf = transformers.LlamaForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        want = hf(torch.tensor([PROMPT])).logits[0]
    got = dense_logits(ours, PROMPT)
    assert float((got - want).abs().max()) <= 1e-4
    # the comparison can fail: another model's logits are far off
    other = write_model(cfg, tmp_path / "other", seed=5)
    assert float((dense_logits(_decoder(other), PROMPT) - want).abs().max()) > 1e-1


def test_llama3_rope_scaling_changes_the_logits(tmp_path: Path) -> None:
    plain = write_model(llama_config(rope_theta=500000.0), tmp_path / "plain", seed=4)
    scaled = tmp_path / "scaled"
    shutil.copytree(plain, scaled)
    cfg = json.loads((scaled / "config.json").read_text())
    (scaled / "config.json").write_text(json.dumps({**cfg, "rope_scaling": LLAMA3}))
    diff = dense_logits(_decoder(plain), PROMPT) - dense_logits(_decoder(scaled), PROMPT)
    assert float(diff.abs().max()) > 1e-3


def test_checkpoint_errors_name_the_problem(tmp_path: Path) -> None:
    directory = Path(write_model(llama_config(), tmp_path / "m", seed=0))
    wrong = tmp_path / "wrong"
    shutil.copytree(directory, wrong)
    cfg = json.loads((wrong / "config.json").read_text())
    (wrong / "config.json").write_text(json.dumps({**cfg, "intermediate_size": 96}))
    with pytest.raises(ConfigError, match="mlp"):
        build_model(wrong, seed=0, device="cpu")
    (wrong / "config.json").write_text(json.dumps({**cfg, "model_type": "gemma2"}))
    with pytest.raises(UnsupportedArchitectureError, match="model_type"):
        read_decoder_config(wrong)
    with pytest.raises(ConfigError, match=r"no config\.json"):
        read_decoder_config(tmp_path / "missing")
    assert set(read_tensors(directory)) == set(dict(_decoder(directory).named_parameters()))


def test_saving_over_a_sharded_checkpoint_replaces_it(tmp_path: Path) -> None:
    import torch

    from kvbudget.engine import save_checkpoint

    cfg = llama_config()
    old = _decoder(write_model(cfg, tmp_path / "a", seed=0))
    new = _decoder(write_model(cfg, tmp_path / "b", seed=1))
    save_checkpoint(old, cfg, tmp_path / "c", max_shard_bytes=40_000)  # sharded, indexed
    save_checkpoint(new, cfg, tmp_path / "c")  # then one file over it
    assert not (tmp_path / "c" / INDEX_FILE).exists()
    loaded = dict(_decoder(tmp_path / "c").named_parameters())
    for name, p in new.named_parameters():
        assert torch.equal(loaded[name], p), name


def test_weights_it_cannot_read_are_errors_not_random_weights(tmp_path: Path) -> None:
    directory = Path(write_model(llama_config(), tmp_path / "m", seed=0))
    bin_only = tmp_path / "bin"
    bin_only.mkdir()
    shutil.copy(directory / "config.json", bin_only / "config.json")
    (bin_only / "pytorch_model.bin").write_bytes(b"\0" * 16)
    with pytest.raises(ConfigError, match=r"does not read \(pytorch_model\.bin\)"):
        build_model(bin_only, seed=0, device="cpu")
    no_shards = tmp_path / "index_only"
    no_shards.mkdir()
    shutil.copy(directory / "config.json", no_shards / "config.json")
    (no_shards / INDEX_FILE).write_text(json.dumps({"weight_map": {"x": "model-1.safetensors"}}))
    with pytest.raises(ConfigError, match="which is missing"):
        build_model(no_shards, seed=0, device="cpu")
    corrupt = tmp_path / "corrupt"
    shutil.copytree(directory, corrupt)
    (corrupt / "model.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ConfigError, match="cannot read safetensors weights"):
        build_model(corrupt, seed=0, device="cpu")


@pytest.mark.parametrize(
    "where", ["../outside.safetensors", "absolute", "sub/../../outside.safetensors"]
)
def test_an_index_cannot_name_shards_outside_its_directory(tmp_path: Path, where: str) -> None:
    # a complete, readable checkpoint outside the folder: before the check, an index
    # naming it loaded its weights
    outside = Path(write_model(llama_config(), tmp_path / "elsewhere", seed=0))
    shard = outside / "model.safetensors"
    target = tmp_path / "ckpt" / "model"
    (target / "sub").mkdir(parents=True)
    shutil.copy(outside / "config.json", target / "config.json")
    shutil.copy(shard, tmp_path / "ckpt" / "outside.safetensors")  # for "../" and "sub/"
    name = str(shard) if where == "absolute" else where
    names = dict.fromkeys(read_tensors(outside), name)
    (target / INDEX_FILE).write_text(json.dumps({"weight_map": names}))
    with pytest.raises(ConfigError, match="outside the checkpoint directory") as err:
        build_model(target, seed=0, device="cpu")
    assert repr(name) in str(err.value) and str(target / INDEX_FILE) in str(err.value)
    assert err.value.field == "weight_map"


def _rewrite_tensor(directory: Path, name: str, change: Callable[[Any], Any]) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(directory / "model.safetensors"))
    tensors[name] = change(tensors[name])
    save_file(tensors, str(directory / "model.safetensors"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.index_fill(0, torch.tensor([2]), float("nan")), r"holds 64 NaN and 0 inf"),
        (lambda t: t.index_fill(0, torch.tensor([0]), float("inf")), r"holds 0 NaN and 64 inf"),
        (lambda t: t.to(torch.int8), r"is int8; the model needs floating-point"),
        (lambda t: t > 0, r"is bool; the model needs floating-point"),
    ],
    ids=["nan", "inf", "int8", "bool"],
)
def test_weights_the_model_cannot_use_are_refused(
    tmp_path: Path, change: Callable[[Any], Any], message: str
) -> None:
    # before: NaN / inf loaded silently, int8 and bool were cast to float32 weights.
    # model.embed_tokens.weight is [256, 64]: one row = 64 values
    directory = Path(write_model(llama_config(), tmp_path / "m", seed=0))
    _rewrite_tensor(directory, "model.embed_tokens.weight", change)
    with pytest.raises(ConfigError, match=rf"tensor model\.embed_tokens\.weight {message}"):
        build_model(directory, seed=0, device="cpu")


@pytest.mark.parametrize(
    ("weight_map", "message"),
    [
        (["model-1.safetensors"], "got list"),
        ({"x": 5}, "tensor 'x' maps to 5, not a shard file name"),
        ({}, "got dict"),
        (None, "got none"),
    ],
)
def test_a_malformed_weight_map_is_a_config_error(
    tmp_path: Path, weight_map: object, message: str
) -> None:
    # before: a list was an AttributeError (.values()), an int a TypeError (dir / 5)
    directory = Path(write_model(llama_config(), tmp_path / "m", seed=0))
    (directory / "model.safetensors").unlink()
    (directory / INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ConfigError, match=message) as err:
        read_tensors(directory)
    assert err.value.field == "weight_map" and err.value.source == str(directory / INDEX_FILE)


@pytest.mark.parametrize("indexed", [True, False])
def test_a_shard_that_is_not_a_regular_file_is_named(tmp_path: Path, indexed: bool) -> None:
    # a shard linked to /dev/zero: before, the error said the index named a missing
    # file (and, without an index, named an index file that does not exist)
    directory = Path(write_model(llama_config(), tmp_path / "m", seed=0))
    shard = directory / "model.safetensors"
    names = dict.fromkeys(read_tensors(directory), "model.safetensors")
    shard.unlink()
    shard.symlink_to("/dev/zero")
    if indexed:
        (directory / INDEX_FILE).write_text(json.dumps({"weight_map": names}))
    with pytest.raises(ConfigError) as err:
        build_model(directory, seed=0, device="cpu")
    assert str(err.value) == (
        f"{shard}: not a regular file: a link to /dev/zero, a device, FIFO or socket"
    )
    shard.unlink()
    shard.symlink_to(tmp_path / "gone.safetensors")  # a dangling link
    with pytest.raises(ConfigError) as err:
        build_model(directory, seed=0, device="cpu")
    gone = tmp_path.resolve() / "gone.safetensors"
    if indexed:
        want = f"{directory / INDEX_FILE}: the index names 'model.safetensors', a link to "
        assert str(err.value) == f"{want}{gone}, which is missing"
    else:
        assert str(err.value) == f"{shard}: a link to {gone}, missing"
    # a link to a regular file elsewhere is fine (the Hugging Face cache links its
    # snapshots' files to ../../blobs/<hash>)
    blob = Path(write_model(llama_config(), tmp_path / "blobs", seed=0)) / "model.safetensors"
    shard.unlink()
    shard.symlink_to(blob)
    assert set(read_tensors(directory)) == set(names)


def _greedy_dense(model: Decoder, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(dense_logits(model, ids)[-1].argmax()))
    return ids[len(prompt) :]


def test_sliding_window_layers_through_window_pools_equal_masked_full_attention(
    tmp_path: Path,
) -> None:
    # layers 0 and 2 see the last 8 tokens, layers 1 and 3 everything
    types = ["sliding_attention", "full_attention"] * 2
    cfg = llama_config(layer_types=types, sliding_window=8)
    target = write_model(cfg, tmp_path / "window", seed=3)
    full = tmp_path / "full"  # the same weights, every layer full attention
    shutil.copytree(target, full)
    (full / "config.json").write_text(json.dumps(llama_config()))
    draft = str(noisy_copy(target, tmp_path / "draft", noise_std=0.0, seed=1))
    prompts = [PROMPT, PROMPT[:5], PROMPT[3:17]]
    new = 30
    expected = [_greedy_dense(_decoder(target), p, new) for p in prompts]
    assert expected != [_greedy_dense(_decoder(full), p, new) for p in prompts]
    for spec, drafted in (("none", None), ("draft-target", draft)):
        plan = make_plan(target, drafted, spec)
        group = plan.managers[0].window_groups[0]
        # 2 layers x 2 x 2 KV heads x 16 x 4 B; ceil((8 + lookahead - 1) / 4) + 1 blocks
        assert (group.window_tokens, group.bytes_per_token) == (8, 2 * 2 * 2 * 16 * 4)
        lookahead = plan.capacity.lookahead_tokens
        assert group.blocks_per_seq == -(-(8 + lookahead - 1) // 4) + 1
        engine = Engine(plan, target=target, draft=drafted)
        outs = engine.generate(prompts, SamplingParams(max_new_tokens=new))
        assert [o.token_ids for o in outs] == expected
        storage = engine.cache.storage
        assert storage is not None and bool(storage.roles[0].windows[0].any())
        if drafted is not None:  # the same weights: every draft is accepted
            assert engine.stats()["acceptance_rate"] == 1.0
