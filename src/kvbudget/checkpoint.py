"""A checkpoint's tensors as its safetensors headers list them: :class:`Checkpoint`.

A safetensors file starts with an 8-byte little-endian header length, then that many
bytes of JSON: ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{...}}``. Reading the header alone (from a local file, or by an HTTP range request:
:mod:`kvbudget.hub`) gives every tensor's stored bytes, ``product(shape) x dtype width``,
exact for every storage format: a packed int4 weight is its I32 or U8 tensor, its scales
and zero points are tensors of their own, and nothing is guessed from the config. Each
tensor's size is checked against its ``data_offsets``.

A sharded checkpoint names its shards in ``model.safetensors.index.json``'s
``weight_map`` (its ``metadata.total_size`` is kept beside the headers' sum).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from kvbudget.errors import ConfigError

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
SOURCE = "safetensors headers"
MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit

# bits of one stored value, by safetensors dtype name (sub-byte types pack along the
# last dimension; their tensors' byte sizes round up)
DTYPE_BITS: Mapping[str, int] = {
    "F64": 64,
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F4": 4,
    "I64": 64,
    "U64": 64,
    "I32": 32,
    "U32": 32,
    "I16": 16,
    "U16": 16,
    "I8": 8,
    "U8": 8,
    "BOOL": 8,
}


@dataclass(frozen=True, kw_only=True)
class Tensor:
    """One stored tensor: its name, dtype, shape, bytes and the shard holding it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    file: str


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """The tensors of a safetensors checkpoint, read from its headers.

    ``files`` are the shards read; ``index_total_bytes`` the index's
    ``metadata.total_size`` when it has one (None for a single file). ``total_bytes`` is
    the sum of every tensor's ``product(shape) x dtype width``.
    """

    tensors: tuple[Tensor, ...]
    files: tuple[str, ...]
    index_total_bytes: int | None = None
    source: str = SOURCE

    @property
    def total_bytes(self) -> int:
        """Bytes of every tensor in the checkpoint."""
        return sum(t.nbytes for t in self.tensors)


def tensor_bytes(dtype: str, shape: tuple[int, ...], *, where: str) -> int:
    """``product(shape) x`` the width of ``dtype`` in bytes (sub-byte types rounded up)."""
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        raise ConfigError(
            f"dtype {dtype!r} is not a safetensors dtype kvbudget knows "
            f"({', '.join(DTYPE_BITS)}); pass --weights-bytes instead",
            source=where,
        )
    return -(-math.prod(shape) * bits // 8)


def header_tensors(header: Mapping[str, Any], file: str, where: str) -> tuple[Tensor, ...]:
    """The tensors a parsed header lists, each size checked against its offsets.

    Raises ConfigError naming the shard and the tensor when an entry is malformed.
    """
    out = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, Mapping):
            raise ConfigError(f"tensor {name!r}: expected an object, got {entry!r}", source=where)
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if not isinstance(dtype, str) or not _int_list(shape) or not _int_list(offsets, 2):
            raise ConfigError(
                f"tensor {name!r}: needs a dtype, a shape of sizes and two data_offsets, "
                f"got {dict(entry)!r}",
                source=where,
            )
        assert isinstance(shape, list) and isinstance(offsets, list)
        nbytes = tensor_bytes(dtype, tuple(shape), where=f"{where}: tensor {name!r}")
        if offsets[1] - offsets[0] != nbytes:
            raise ConfigError(
                f"tensor {name!r}: {dtype} x {shape} is {nbytes} bytes but its data_offsets "
                f"{offsets} span {offsets[1] - offsets[0]}; the file is damaged",
                source=where,
            )
        out.append(Tensor(name=name, dtype=dtype, shape=tuple(shape), nbytes=nbytes, file=file))
    return tuple(out)


def _int_list(value: object, length: int | None = None) -> bool:
    return (
        isinstance(value, list)
        and (length is None or len(value) == length)
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    )


def header_length(prefix: bytes, *, size: int | None, where: str) -> int:
    """The JSON header's length from a file's first 8 bytes, checked against the file."""
    if len(prefix) < 8:
        raise ConfigError("shorter than the 8 bytes of a safetensors header length", source=where)
    (length,) = struct.unpack("<Q", prefix[:8])
    if length > MAX_HEADER_BYTES or (size is not None and length > size - 8):
        raise ConfigError(
            f"header length {length:,} bytes does not fit "
            f"{'the file' if size is None else f'a file of {size:,} bytes'}: not safetensors",
            source=where,
        )
    return int(length)


def parse_header(raw: bytes, where: str) -> Mapping[str, Any]:
    """The JSON object of a safetensors header."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ConfigError("the header is not JSON: not a safetensors file", source=where) from None
    if not isinstance(header, dict):
        raise ConfigError("the header is not a JSON object: not safetensors", source=where)
    return header


def read_header(path: Path) -> Mapping[str, Any]:
    """The parsed header of the local safetensors file ``path``: 8 bytes of length, then
    the JSON; the tensor data is never read."""
    where = str(path)
    try:
        with path.open("rb") as f:
            size = path.stat().st_size
            length = header_length(f.read(8), size=size, where=where)
            return parse_header(f.read(length), where)
    except OSError as exc:
        raise ConfigError(f"cannot be read: {exc.strerror or exc}", source=where) from None


def check_shard_name(name: str, where: str) -> None:
    """Raises ConfigError (field ``weight_map``) unless ``name``, a shard file an index
    names, lies in the index's own folder (not empty, not absolute, no ``..`` with either
    separator) and is a name a file system can hold (no NUL character)."""
    pure = PurePosixPath(name.replace("\\", "/"))
    if not name or pure.is_absolute() or ".." in pure.parts:
        raise ConfigError(
            f"the index names the shard {name!r}, outside the checkpoint directory; "
            "shards must be files in the directory of the index",
            source=where,
            field="weight_map",
        )
    if "\x00" in name:
        raise ConfigError(
            f"the index names the shard {name!r}, which holds a NUL character no file "
            "name can; fix the index's weight_map",
            source=where,
            field="weight_map",
        )


def index_shards(index: Mapping[str, Any], where: str) -> tuple[tuple[str, ...], int | None]:
    """The shard files ``model.safetensors.index.json`` names (sorted, each inside the
    index's folder) and its ``metadata.total_size`` (None when absent)."""
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise ConfigError(
            "must be a non-empty object of tensor name -> shard file name",
            source=where,
            field="weight_map",
        )
    for tensor, f in weight_map.items():
        if not isinstance(f, str):
            raise ConfigError(
                f"tensor {tensor!r} maps to {f!r}, not a shard file name",
                source=where,
                field="weight_map",
            )
        check_shard_name(f, where)
    files = sorted(set(weight_map.values()))
    metadata = index.get("metadata")
    total = metadata.get("total_size") if isinstance(metadata, Mapping) else None
    if isinstance(total, bool) or not isinstance(total, int):
        total = None
    return tuple(files), total


def local_checkpoint(folder: Path) -> Checkpoint | None:
    """The checkpoint in ``folder`` from its safetensors headers: the shards its index
    names, else ``model.safetensors``; None when it holds neither."""
    index_path = folder / INDEX_FILE
    if index_path.is_file():
        try:
            index = parse_header(index_path.read_bytes(), str(index_path))
        except OSError as exc:
            raise ConfigError(f"cannot be read: {exc}", source=str(index_path)) from None
        files, total = index_shards(index, str(index_path))
    elif (folder / SINGLE_FILE).is_file():
        files, total = (SINGLE_FILE,), None
    else:
        return None
    tensors: list[Tensor] = []
    for name in files:
        path = folder / name
        if not path.is_file():
            return None  # a partial download: the shards are not all here
        tensors += header_tensors(read_header(path), name, str(path))
    return Checkpoint(tensors=tuple(tensors), files=files, index_total_bytes=total)


__all__ = [
    "DTYPE_BITS",
    "INDEX_FILE",
    "SINGLE_FILE",
    "SOURCE",
    "Checkpoint",
    "Tensor",
    "header_length",
    "header_tensors",
    "index_shards",
    "local_checkpoint",
    "parse_header",
    "read_header",
    "tensor_bytes",
]
