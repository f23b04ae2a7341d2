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
seed and order of takes give the same acceptances (per policy, each replay has its own),
however the takes are batched.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from dataclasses import dataclass
from itertools import repeat, starmap
from operator import sub

from kvbudget.errors import InvalidArgumentError

BATCH_DRAWS = 4096  # draws generated ahead at once (AcceptanceDraw)


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

    The draws are one stream, in order: :meth:`draw` takes the next one, :meth:`counts`
    the next ``n`` at once (as ``1 + accepted``, the tokens a step commits), and
    :meth:`unread` puts the last ones taken back, to be taken again by the next call.
    Values are generated ahead in batches of :data:`BATCH_DRAWS` from one
    ``random.Random(seed)`` (one ``u`` each, in stream order), so how a caller splits its
    takes never changes which value a take gets: the step-by-step replay and its fast
    path, which takes a run's draws at once, see the same stream. Memory stays bounded
    (the values taken are dropped at the next batch).

    Mutable (it owns its random generator); one per replay.
    """

    __slots__ = ("_buf", "_pos", "_random", "ascending", "draft_len")

    def __init__(self, model: AcceptanceModel, draft_len: int, seed: int) -> None:
        #: ``P(accepted >= i)`` for ``i = draft_len..1`` (ascending)
        self.ascending = tuple(reversed(model.at_least(draft_len)))
        self.draft_len = draft_len
        self._random = random.Random(seed).random
        self._buf: list[int] = []  # 1 + accepted, generated ahead
        self._pos = 0  # the next value to take

    def counts(self, n: int) -> list[int]:
        """The next ``n`` draws as ``1 + accepted`` (each in ``1..draft_len + 1``)."""
        buf, pos = self.window(n)
        return buf[pos : pos + n]

    def window(self, n: int) -> tuple[list[int], int]:
        """Take the next ``n`` draws, as :meth:`counts` does, without copying them: the
        buffer they lie in and the index of the first (``buf[i : i + n]``). The buffer is
        the draw's own: read it before the next take, never change it."""
        pos = self._pos
        if pos + n > len(self._buf):
            rand, more = self._random, max(n, BATCH_DRAWS)
            u = list(starmap(rand, repeat((), more)))  # one u per draw, in stream order
            # 1 + accepted = draft_len + 1 - #{P(accepted >= i) <= u}, as draw() reads it
            accepted = map(bisect_right, repeat(self.ascending, more), u)
            self._buf = self._buf[pos:] + list(map(sub, repeat(self.draft_len + 1, more), accepted))
            pos = 0
        self._pos = pos + n
        return self._buf, pos

    def unread(self, n: int) -> None:
        """Put back the last ``n`` draws taken (at most what the last :meth:`counts`
        returned): the next takes return them again, in order."""
        self._pos -= n

    def draw(self) -> int:
        """Accepted draft tokens of the next draw, in ``0..draft_len``: how many of the
        non-increasing ``P(accepted >= i)`` exceed its ``u``."""
        return self.counts(1)[0] - 1
