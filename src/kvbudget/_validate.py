"""Argument checks shared by the public functions; each raises InvalidArgumentError."""

from __future__ import annotations

from kvbudget.errors import InvalidArgumentError


def require_int(name: str, value: object, *, minimum: int = 0) -> int:
    """``value`` as an int >= ``minimum``; bools and floats are rejected, not truncated."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidArgumentError(f"{name} must be >= {minimum}, got {value}")
    return value


def require_model(name: str, value: object) -> None:
    """Reject anything but a :class:`~kvbudget.model.ModelSpec` (e.g. a preset name)."""
    from kvbudget.model import ModelSpec

    if not isinstance(value, ModelSpec):
        raise InvalidArgumentError(
            f"{name} must be a ModelSpec (from kvbudget.load_model), got {value!r}"
        )
