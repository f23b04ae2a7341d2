"""Weights: seeded random initialisation, and local safetensors checkpoints.

A checkpoint directory holds ``config.json`` and either one ``model.safetensors`` or shards
listed by ``model.safetensors.index.json`` (``weight_map``: tensor name -> file), with
Hugging Face tensor names (see :mod:`kvbudget.engine.model`). :func:`save_checkpoint`
writes the same format (sharded when ``max_shard_bytes`` is given); :func:`noisy_copy`
writes a draft made from a target (same weights plus seeded Gaussian noise), whose
acceptance rate the noise controls. Nothing here downloads anything.
"""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

import torch
from torch import nn

from kvbudget.checkpoint import check_shard_name
from kvbudget.engine.config import DecoderConfig, config_file, read_decoder_config
from kvbudget.engine.model import TORCH_DTYPES, Decoder, Eagle3Head
from kvbudget.errors import ConfigError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


def init_random(module: nn.Module, seed: int) -> None:
    """Fill ``module``'s parameters in place from ``seed``: norms 1, embeddings N(0, 1),
    linear weights N(0, 4 / fan_in). The gain of 2 keeps tiny random models from falling
    into one repeated token under greedy decoding (at gain 1 they often do), and their
    logits spread wide enough that greedy choices are rarely near ties. Deterministic:
    parameters are drawn in name order from one generator."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(module.named_parameters()):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
                continue
            std = 1.0 if "embed_tokens" in name else 2.0 / math.sqrt(p.shape[-1])
            p.copy_(torch.randn(p.shape, generator=gen) * std)


def _inside(name: str, index: Path) -> str:
    """``name``, a shard file the index at ``index`` names, when it lies in the index's
    own directory. Raises ConfigError naming it for an absolute path, one through ``..``
    or a name no file system holds (an index must not make the engine read files
    elsewhere): :func:`kvbudget.checkpoint.check_shard_name`, the header reader's check."""
    check_shard_name(name, str(index))
    return name


def _index_files(index: Path) -> list[str]:
    """The shard files the index at ``index`` names, each checked to lie in its
    directory. Raises ConfigError (field ``weight_map``) for unreadable JSON, a
    ``weight_map`` that is not an object of tensor name -> file name, or a shard outside."""
    try:
        data = json.loads(_regular(index).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"bad index: {exc}", source=str(index), field="weight_map") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ConfigError(
            "must be a non-empty object of tensor name -> shard file name, got "
            f"{type(weight_map).__name__ if weight_map is not None else 'none'}",
            source=str(index),
            field="weight_map",
        )
    for tensor, name in weight_map.items():
        if not isinstance(name, str):
            raise ConfigError(
                f"tensor {tensor!r} maps to {name!r}, not a shard file name",
                source=str(index),
                field="weight_map",
            )
    return sorted({_inside(name, index) for name in weight_map.values()})


def _regular(path: Path, index: Path | None = None) -> Path:
    """``path`` (a shard ``index`` names, the index, or a lone weights file) when it is,
    or links to, a regular file; returns where it leads. Raises ConfigError naming that
    file when it is missing or not a regular file (a device such as /dev/zero, a
    directory, a FIFO)."""
    real = path.resolve()
    link = f"a link to {real}, " if path.is_symlink() else ""
    try:
        mode = real.stat().st_mode
    except OSError:
        if index is None:
            raise ConfigError(f"{link}missing", source=str(path)) from None
        name = str(path.relative_to(index.parent))
        raise ConfigError(
            f"the index names {name!r}, {link}which is missing", source=str(index)
        ) from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a device, FIFO or socket"
        raise ConfigError(f"not a regular file: {link}{kind}", source=str(path))
    return real


def read_tensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors checkpoint in ``directory`` (CPU).

    Raises ConfigError when the directory has no safetensors file, the index is
    malformed, or a shard it names is missing, outside ``directory``
    (``../x.safetensors``, an absolute path) or not a regular file (symlinks are
    followed; the error names where they lead)."""
    from safetensors.torch import load_file

    index = directory / INDEX_FILE
    single = directory / SINGLE_FILE
    named_by: Path | None = None
    if index.exists() or index.is_symlink():
        files, named_by = _index_files(index), index
    elif single.exists() or single.is_symlink():
        files = [SINGLE_FILE]
    else:
        files = sorted(p.name for p in directory.glob("*.safetensors"))
        if not files:
            raise ConfigError("no safetensors weights in this directory", source=str(directory))
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        path = _regular(directory / name, named_by)
        try:
            tensors.update(load_file(str(path)))
        except Exception as exc:  # safetensors raises its own SafetensorError, or OSError
            raise ConfigError(
                f"cannot read safetensors weights: {type(exc).__name__}: {exc}",
                source=str(path),
            ) from None
    return tensors


# files that mean "this directory holds weights", in a format this engine reads or not
_WEIGHT_PATTERNS = ("*.safetensors", INDEX_FILE, "*.bin", "*.pt", "*.pth", "*.gguf")


def has_weights(path: str | Path) -> bool:
    """Whether ``path`` is a directory with weights (else: random weights).

    Raises ConfigError when it holds weights in a form the engine does not read
    (``pytorch_model.bin``, GGUF) rather than silently using random ones."""
    p = Path(path)
    if not p.is_dir():
        return False
    found = [f.name for pattern in _WEIGHT_PATTERNS for f in p.glob(pattern)]
    if not found:
        return False
    if not any(name.endswith(".safetensors") or name == INDEX_FILE for name in found):
        raise ConfigError(
            f"holds weights the engine does not read ({', '.join(sorted(found)[:3])}); "
            "convert them to safetensors, or point --target/--draft at a directory with "
            "only a config.json for random weights",
            source=str(p),
        )
    return True


def build_model(
    path: str | Path, *, seed: int, device: str, target: Decoder | None = None
) -> Decoder | Eagle3Head:
    """The decoder (or EAGLE3 head) of the config at ``path``: weights from its directory's
    safetensors when there are any, else random from ``seed``. An EAGLE3 head without
    ``embed_tokens`` in its checkpoint takes the ``target``'s (as EAGLE3 heads ship).

    Raises ConfigError / UnsupportedArchitectureError for a config the engine cannot
    build, or tensors that do not fit it (names the tensor)."""
    config = read_decoder_config(path)
    model: Decoder | Eagle3Head = Eagle3Head(config) if config.is_eagle3 else Decoder(config)
    directory = config_file(path).parent
    if has_weights(directory):
        _load(model, read_tensors(directory), config, target)
    else:
        init_random(model, seed)
        if isinstance(model, Eagle3Head) and target is not None:
            _copy_embeddings(model, target, config)
    dtype = TORCH_DTYPES[config.dtype]
    model.to(device=device, dtype=dtype)
    model.eval()
    return model


def _copy_embeddings(head: Eagle3Head, target: Decoder, config: DecoderConfig) -> None:
    weight = target.model.embed_tokens.weight
    if tuple(weight.shape) != tuple(head.embed_tokens.weight.shape):
        raise ConfigError(
            f"the target's embeddings are {tuple(weight.shape)}, the head needs "
            f"{tuple(head.embed_tokens.weight.shape)}",
            source=config.source,
            field="hidden_size",
        )
    with torch.no_grad():
        head.embed_tokens.weight.copy_(weight.float())


def _load(
    model: nn.Module,
    tensors: dict[str, torch.Tensor],
    config: DecoderConfig,
    target: Decoder | None,
) -> None:
    expected = dict(model.named_parameters())
    tensors = {k: v for k, v in tensors.items() if k not in ("d2t", "t2d")}
    missing = sorted(set(expected) - set(tensors))
    if isinstance(model, Eagle3Head) and missing == ["embed_tokens.weight"] and target:
        _copy_embeddings(model, target, config)
        missing = []
    if isinstance(model, Decoder) and config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        what = f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}"
        raise ConfigError(f"the checkpoint does not fit the config: {what}", source=config.source)
    with torch.no_grad():
        for name, tensor in tensors.items():
            param = expected[name]
            if tuple(tensor.shape) != tuple(param.shape):
                raise ConfigError(
                    f"tensor {name} is {tuple(tensor.shape)}, the config needs "
                    f"{tuple(param.shape)}",
                    source=config.source,
                )
            param.copy_(_weight(name, tensor, config.source))


def _weight(name: str, tensor: torch.Tensor, source: str) -> torch.Tensor:
    """Checkpoint tensor ``name`` as float32 (then cast to the config's dtype with the
    model). Raises ConfigError naming it when its dtype is not floating point (int8,
    bool, ...: casting would silently turn them into other weights) or it holds NaN or
    infinite values."""
    if not tensor.is_floating_point():
        raise ConfigError(
            f"tensor {name} is {str(tensor.dtype).removeprefix('torch.')}; the model needs "
            "floating-point weights (float32, bfloat16, float16, ...); dequantize the "
            "checkpoint first",
            source=source,
        )
    value = tensor.float()
    finite = torch.isfinite(value)
    if not bool(finite.all()):
        nan = int(torch.isnan(value).sum())
        raise ConfigError(
            f"tensor {name} holds {nan} NaN and {int((~finite).sum()) - nan} infinite "
            f"values (of {value.numel()})",
            source=source,
        )
    return value


def save_checkpoint(
    model: nn.Module,
    config: dict[str, Any],
    directory: str | Path,
    *,
    max_shard_bytes: int | None = None,
) -> Path:
    """Write ``config`` as ``config.json`` and ``model``'s parameters as safetensors into
    ``directory`` (created); sharded with an index when ``max_shard_bytes`` is given.
    Returns the directory. Removes the safetensors files and index a previous checkpoint
    left there."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    # a previous checkpoint's files would win over (or mix with) the new ones
    for stale in (out / INDEX_FILE, out / SINGLE_FILE, *out.glob("model-*-of-*.safetensors")):
        stale.unlink(missing_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if max_shard_bytes is None:
        save_file(tensors, str(out / SINGLE_FILE))
        return out
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name]
        size += nbytes
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(out / fname))
        weight_map.update(dict.fromkeys(shard, fname))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / INDEX_FILE).write_text(json.dumps(index, indent=2))
    return out


def noisy_copy(source: str | Path, directory: str | Path, *, noise_std: float, seed: int) -> Path:
    """Write a copy of the checkpoint (or random-weight config) at ``source`` into
    ``directory``, every weight plus ``noise_std x`` its own standard deviation of seeded
    Gaussian noise: a draft whose agreement with ``source`` falls as the noise grows
    (0.0: the same model, acceptance 1 under greedy decoding). Returns the directory."""
    config_path = config_file(source)
    config = json.loads(config_path.read_text())
    model = build_model(source, seed=seed, device="cpu")
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if noise_std:
                scale = float(p.float().std()) if p.numel() > 1 else 0.0
                p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * noise_std * scale)
    return save_checkpoint(model, config, directory)
