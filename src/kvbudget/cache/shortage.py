"""A refusal as data: which role, tier and pool lacked how many blocks.

The check half of every check-then-commit operation returns a :class:`Shortage` (or
None); :func:`refuse` turns the first one into an :class:`~kvbudget.errors.OutOfBlocksError`
that carries the same fields, so a scheduler can size a preemption without parsing text.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kvbudget.errors import OutOfBlocksError


@dataclass(frozen=True, slots=True)
class Shortage:
    """``needed`` blocks (slots) of ``pool`` in ``tier`` of ``role``, ``available`` free
    or evictable; ``message`` says it in words, with what to change."""

    role: str
    tier: str
    pool: str
    needed: int
    available: int
    message: str

    def error(self, what: str) -> OutOfBlocksError:
        """The :class:`OutOfBlocksError` ``"<what>: <message>"`` with these fields."""
        return OutOfBlocksError(
            f"{what}: {self.message}",
            role=self.role,
            tier=self.tier,
            pool=self.pool,
            needed=self.needed,
            available=self.available,
        )


def refuse(what: str, shortages: Iterable[Shortage | None]) -> None:
    """Raise the first shortage's error (the check half of check-then-commit, over every
    role); else return."""
    for shortage in shortages:
        if shortage is not None:
            raise shortage.error(what)
