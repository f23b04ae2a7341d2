"""How many draft tokens the target accepts per speculative step.

A step proposes ``K`` draft tokens (the plan's ``max_draft_len``). Draft position ``i``
(1-based) is accepted with probability ``rates[i-1]`` given that positions ``1..i-1``
were, and the target stops at the first rejection (greedy or rejection sampling
verification alike), so::

    P(accepted >= i) = rates[0] x rates[1] x ... x rates[i-1]
    E[accepted]      = sum over i of P(accepted >= i)

``--acceptance 0.7`` is one rate for every position; ``--acceptance 0.8,0.6,0.4`` one per
position (the last repeats when ``K`` is longer). Each step commits ``1 + accepted``
tokens (the accepted drafts and the target's own token).

Draws: one uniform number ``u`` per step from a ``random.Random(seed)`` owned by the
caller's :class:`AcceptanceDraw`; ``accepted = #{i : u < P(accepted >= i)}``. The same
seed and call order give the same acceptances (per policy, each replay has its own).
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass

from kvbudget.errors import InvalidArgumentError


@dataclass(frozen=True, kw_only=True)
class AcceptanceModel:
    """Per-position acceptance rates (each in [0, 1]); see the module docstring."""

    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates:
            raise InvalidArgumentError("acceptance needs at least one rate, e.g. 0.7")
        for r in self.rates:
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 <= r <= 1.0:
                raise InvalidArgumentError(
                    f"acceptance rates must be numbers in [0, 1], got {r!r} (--acceptance)"
                )

    @classmethod
    def parse(cls, text: str | float) -> AcceptanceModel:
        """``0.7`` or ``"0.8,0.6,0.4"``. Raises InvalidArgumentError."""
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            return cls(rates=(float(text),))
        parts = [p.strip() for p in str(text).split(",")]
        try:
            rates = tuple(float(p) for p in parts)
        except ValueError:
            raise InvalidArgumentError(
                f"--acceptance must be a rate such as 0.7 or per-position rates such as "
                f"0.8,0.6,0.4; got {text!r}"
            ) from None
        return cls(rates=rates)

    def at_least(self, draft_len: int) -> tuple[float, ...]:
        """``P(accepted >= i)`` for ``i = 1..draft_len``, non-increasing."""
        out: list[float] = []
        p = 1.0
        for i in range(draft_len):
            p *= self.rates[min(i, len(self.rates) - 1)]
            out.append(p)
        return tuple(out)

    def expected_accepted(self, draft_len: int) -> float:
        """Mean accepted draft tokens per step with ``draft_len`` proposals."""
        return sum(self.at_least(draft_len))

    def describe(self) -> str:
        """The rates as the flag takes them."""
        return ",".join(f"{r:g}" for r in self.rates)


class AcceptanceDraw:
    """Seeded draws from an :class:`AcceptanceModel` for ``draft_len`` proposals.

    Mutable (it owns its random generator); one per replay.
    """

    __slots__ = ("ascending", "draft_len", "random")

    def __init__(self, model: AcceptanceModel, draft_len: int, seed: int) -> None:
        #: ``P(accepted >= i)`` for ``i = draft_len..1`` (ascending) and ``random()``,
        #: the generator of ``u``: a hot loop may inline :meth:`draw` from them (the same
        #: draws in the same order).
        self.ascending = tuple(reversed(model.at_least(draft_len)))
        self.draft_len = draft_len
        self.random = random.Random(seed).random

    def draw(self) -> int:
        """Accepted draft tokens of one step, in ``0..draft_len``: how many of the
        non-increasing ``P(accepted >= i)`` exceed ``u``."""
        return self.draft_len - bisect_right(self.ascending, self.random())
