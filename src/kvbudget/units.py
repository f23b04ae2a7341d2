"""Byte sizes as people write them: ``10GiB``, ``64GB``, ``512MiB``, ``4096B``, ``0``.

Binary units (KiB, MiB, GiB, TiB) are powers of 1024; decimal units (KB, MB, GB, TB;
also K, M, G, T) powers of 1000, as engines and vendors use them. Results are whole
bytes: a size copied from an engine's log (``3.81GiB``, ``23.58 GiB``) is rounded down to
the byte below, and :func:`rounding_note` says so.

A string with no unit is bytes only from 1 MiB up (``"1073741824"``) or when it is 0:
``--host-budget 64`` is surely 64 GiB or 64 GB mistyped, not 64 bytes, so a unitless
string of 1 to 1,048,575 bytes is refused with the units named (write ``64B`` to mean
bytes). Ints, as the Python API passes them, are always bytes.
"""

from __future__ import annotations

import re
from fractions import Fraction

from kvbudget.errors import InvalidArgumentError

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
# the units a message lists (K, M, G, T are accepted too, as KB, MB, GB, TB)
UNIT_NAMES = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
_SIZE = re.compile(r"^\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")

GIB = 1024**3
# 16 EiB: more than any rank, node or cluster holds; larger sizes are typing mistakes
MAX_BYTES = 2**64
_MAX_TEXT = 64  # characters of a size string read at all
# a unitless string below this many bytes (and not 0) is refused as a missing unit
MIN_UNITLESS_BYTES = 1024**2


def parse_bytes(value: str | int, *, name: str = "size") -> int:
    """Whole bytes of ``value`` (an int, or a string with an optional unit), a fraction
    of a byte rounded down (:func:`rounding_note` words it).

    Raises InvalidArgumentError for negative or garbled values, an unknown unit (the
    message lists the accepted ones), more than :data:`MAX_BYTES`, and a string without
    a unit that is not 0 and below :data:`MIN_UNITLESS_BYTES` (module docstring).
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidArgumentError(
            f"{name} must be a byte size (an int, or a string such as '40GiB'), got {value!r}"
        )
    if isinstance(value, int):
        if value < 0:
            raise InvalidArgumentError(f"{name} must not be negative, got {value}")
        return _bounded(value, name)
    number, unit = _split(value, name)
    exact = number * _UNITS[unit.lower()]
    whole = _bounded(exact.numerator // exact.denominator, name)
    if not unit and exact != 0 and exact < MIN_UNITLESS_BYTES:
        text = value.strip()
        raise InvalidArgumentError(
            f"{name} {text} has no unit: {text} bytes is surely not meant; write {text}GiB "
            f"or {text}GB, or {text}B for bytes (units: {UNIT_NAMES})"
        )
    return whole


def _split(value: str, name: str) -> tuple[Fraction, str]:
    """The exact number and the unit as written (``""`` for none) of the string
    ``value``. Raises InvalidArgumentError for a garbled, negative or too long one, or an
    unknown unit."""
    if len(value) > _MAX_TEXT:
        raise InvalidArgumentError(f"{name}: {value[:20]!r}... is too long to be a byte size")
    if value.strip().startswith("-"):
        raise InvalidArgumentError(f"{name} must not be negative, got {value!r}")
    match = _SIZE.match(value)
    if not match:
        raise InvalidArgumentError(
            f"{name}: cannot read {value!r} as a byte size; write e.g. 40GiB, 64GB or "
            f"512MiB (units: {UNIT_NAMES})"
        )
    if match.group(2).lower() not in _UNITS:
        raise InvalidArgumentError(
            f"{name}: unknown unit {match.group(2)!r} in {value.strip()!r}; the units are "
            f"{UNIT_NAMES}"
        )
    try:
        number = Fraction(match.group(1).replace("_", ""))  # exact, whatever the digits
    except ValueError:
        raise InvalidArgumentError(f"{name}: cannot read {value!r} as a number") from None
    return number, match.group(2)


def rounding_note(value: str | int | None, *, name: str) -> str | None:
    """A sentence when :func:`parse_bytes` rounds ``value`` down (a fraction of a byte,
    as sizes copied from logs have), else None.

    Raises what :func:`parse_bytes` raises for a value it refuses (so a caller that asks
    for the note first still gets the typed error, never a KeyError).
    """
    if not isinstance(value, str):
        return None
    parse_bytes(value, name=name)
    number, unit = _split(value, name)
    exact = number * _UNITS[unit.lower()]
    if exact.denominator == 1:
        return None
    whole = exact.numerator // exact.denominator
    return (
        f"{name} {value.strip()!r} is {float(exact):,.2f} bytes; rounded down to {whole:,} "
        "(whole bytes)"
    )


def _bounded(num_bytes: int, name: str) -> int:
    if num_bytes > MAX_BYTES:
        raise InvalidArgumentError(
            f"{name}: a {num_bytes.bit_length()}-bit number of bytes is more than 16 EiB, "
            "larger than any machine; check the unit (e.g. 40GiB)"
        )
    return num_bytes


def format_bytes(num_bytes: int) -> str:
    """Human form in binary units, e.g. ``'40.00 GiB'``; exact bytes stay in the JSON."""
    if abs(num_bytes) >= 1024**5:  # beyond float's exact range for this purpose
        return f"{num_bytes // 1024**4:,} TiB"
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.2f} {unit}" if unit != "B" else f"{num_bytes} B"
        size /= 1024
    raise AssertionError("unreachable")


def count_of(n: int, word: str) -> str:
    """``"1 sequence"``, ``"2 sequences"``: ``n`` and ``word``, plural unless n is 1."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
