"""Storage formats and their exact byte counts (kvbudget.dtypes)."""

from __future__ import annotations

import pytest

from kvbudget.dtypes import KV_DTYPE_NAMES, DType, normalize_dtype_name, parse_dtype
from kvbudget.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("name", "canonical", "bits"),
    [
        ("fp32", "fp32", 32),
        ("float32", "fp32", 32),
        ("bf16", "bf16", 16),
        ("bfloat16", "bf16", 16),
        ("fp16", "fp16", 16),
        ("float16", "fp16", 16),
        ("half", "fp16", 16),
        ("fp8", "fp8", 8),
        ("fp8_e4m3", "fp8", 8),
        ("fp8_e5m2", "fp8", 8),
        ("int8", "int8", 8),
        ("nvfp4", "nvfp4", 4),
        ("NVFP4", "nvfp4", 4),
        (" BF16 ", "bf16", 16),
    ],
)
def test_parse_dtype_names(name: str, canonical: str, bits: int) -> None:
    dtype = parse_dtype(name)
    assert (dtype.name, dtype.bits) == (canonical, bits)


@pytest.mark.parametrize(
    ("name", "num_values", "expected"),
    [
        ("fp32", 1024, 4096),  # 1024 x 4 B = 4096
        ("bf16", 1024, 2048),  # 1024 x 2 B = 2048
        ("fp16", 3, 6),  # 3 x 2 B = 6
        ("fp8", 1024, 1024),  # 1024 x 1 B = 1024
        ("int8", 576, 576),  # 576 x 1 B = 576
        ("nvfp4", 1024, 576),  # ceil(1024/2)=512 + ceil(1024/16)=64 scales = 576
        ("nvfp4", 576, 324),  # ceil(576/2)=288 + ceil(576/16)=36 = 324
        ("nvfp4", 1, 2),  # ceil(1/2)=1 + ceil(1/16)=1 = 2
        ("nvfp4", 17, 11),  # ceil(17/2)=9 + ceil(17/16)=2 = 11
        ("nvfp4", 0, 0),  # nothing stored, no scale
        ("bf16", 0, 0),
    ],
)
def test_bytes_for(name: str, num_values: int, expected: int) -> None:
    assert parse_dtype(name).bytes_for(num_values) == expected


def test_odd_bit_width_rounds_up_to_whole_bytes() -> None:
    # a 4-bit format without scales: 3 values x 4 bits = 12 bits -> ceil(12/8) = 2 bytes
    assert DType(name="x4", bits=4).bytes_for(3) == 2


def test_auto_resolves_to_model_dtype() -> None:
    assert parse_dtype("auto", auto="bfloat16").name == "bf16"
    assert parse_dtype("AUTO", auto="fp16").name == "fp16"
    assert parse_dtype("auto", auto="float32").name == "fp32"


def test_auto_without_model_dtype_is_an_error() -> None:
    with pytest.raises(InvalidArgumentError, match="auto"):
        parse_dtype("auto")


@pytest.mark.parametrize("name", ["fp6", "", "bf17", "int4", "mxfp4"])
def test_unknown_dtype(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown kv_dtype") as info:
        parse_dtype(name)
    assert isinstance(info.value, ValueError)
    for choice in KV_DTYPE_NAMES:
        assert choice in str(info.value)


def test_unknown_dtype_names_the_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown state_dtype"):
        parse_dtype("fp6", what="state_dtype")


def test_kv_dtype_names_all_parse() -> None:
    for name in KV_DTYPE_NAMES:
        assert parse_dtype(name, auto="bf16").bits in (4, 8, 16, 32)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32"), ("Float16", "fp16")],
)
def test_normalize_dtype_name(raw: str, expected: str) -> None:
    assert normalize_dtype_name(raw) == expected


def test_normalize_unknown_dtype_name_is_none() -> None:
    assert normalize_dtype_name("float8_e8m0") is None


def test_dtype_is_frozen() -> None:
    dtype = parse_dtype("bf16")
    with pytest.raises(AttributeError):
        dtype.bits = 8  # type: ignore[misc]
