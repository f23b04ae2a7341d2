"""Storage formats of cache values and the exact bytes they take.

A format stores ``n`` values in ``ceil(n * bits / 8)`` bytes plus, for block-scaled
formats, one scale of ``scale_bytes`` per ``scale_group`` values:

==========  ====  ===========  =========================================
name        bits  scale        bytes for n values
==========  ====  ===========  =========================================
fp32        32    -            4n
bf16/fp16   16    -            2n
fp8/int8    8     -            n
nvfp4       4     1 B per 16   ceil(n/2) + ceil(n/16)
==========  ====  ===========  =========================================
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.errors import InvalidArgumentError


@dataclass(frozen=True, kw_only=True)
class DType:
    """A storage format: ``bits`` per value plus optional per-group scales."""

    name: str
    bits: int
    scale_group: int = 0
    scale_bytes: int = 0

    def bytes_for(self, num_values: int) -> int:
        """Exact bytes to store ``num_values`` values (a contiguous run, one scale group)."""
        data = -(-num_values * self.bits // 8)
        scales = -(-num_values // self.scale_group) * self.scale_bytes if self.scale_group else 0
        return data + scales


_FP32 = DType(name="fp32", bits=32)
_BF16 = DType(name="bf16", bits=16)
_FP16 = DType(name="fp16", bits=16)
_FP8 = DType(name="fp8", bits=8)
_INT8 = DType(name="int8", bits=8)
_NVFP4 = DType(name="nvfp4", bits=4, scale_group=16, scale_bytes=1)

# Every accepted spelling (lower case) -> format. Read-only by convention; never mutated.
_ALIASES: dict[str, DType] = {
    "fp32": _FP32,
    "float32": _FP32,
    "float": _FP32,
    "bf16": _BF16,
    "bfloat16": _BF16,
    "fp16": _FP16,
    "float16": _FP16,
    "half": _FP16,
    "fp8": _FP8,
    "fp8_e4m3": _FP8,
    "fp8_e5m2": _FP8,
    "e4m3": _FP8,
    "int8": _INT8,
    "nvfp4": _NVFP4,
    "fp4": _NVFP4,
}

KV_DTYPE_NAMES: tuple[str, ...] = ("auto", "fp32", "bf16", "fp16", "fp8", "int8", "nvfp4")


def parse_dtype(name: str, *, auto: str | None = None, what: str = "kv_dtype") -> DType:
    """Resolve a dtype name; ``"auto"`` resolves to ``auto`` (the model's dtype).

    Raises:
        InvalidArgumentError: unknown name, or ``"auto"`` with no model dtype known.
    """
    key = str(name).strip().lower()
    if key == "auto":
        if auto is None:
            raise InvalidArgumentError(
                f"{what}='auto' needs the model's dtype, but its config has no "
                "'torch_dtype'/'dtype'; pass an explicit dtype such as 'bf16'"
            )
        key = auto.lower()
    try:
        return _ALIASES[key]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown {what} {name!r}; choose one of {', '.join(KV_DTYPE_NAMES)}"
        ) from None


def normalize_dtype_name(name: str) -> str | None:
    """Canonical name of a config dtype string (``"bfloat16"`` -> ``"bf16"``), or None."""
    found = _ALIASES.get(str(name).strip().lower())
    return found.name if found else None
