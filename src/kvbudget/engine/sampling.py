"""Sampling settings, and the verification of drafted tokens against the target.

Greedy (``temperature < MIN_TEMPERATURE``, 0 included): a draft token is accepted
while it equals the target's argmax at its position; the first disagreement is replaced
by the target's argmax, and when every draft is accepted the target's next argmax is the
bonus token. The output is the target's greedy output exactly.

Sampling (``temperature >= MIN_TEMPERATURE``): speculative rejection sampling (Leviathan
et al. 2023, Chen et al. 2023). Draft token ``x_i ~ q_i`` is accepted with probability
``min(1, p_i(x_i) / q_i(x_i))``; at the first rejection the token is drawn from the
residual ``max(0, p_i - q_i)`` normalised, and when all ``k`` are accepted a bonus
token is drawn from ``p_{k+1}``. Every emitted token is then distributed as the target's
``p`` at its position, whatever the draft.

Logits that are not finite (NaN or infinite: a model whose activations overflowed) raise
:class:`~kvbudget.errors.ModelOutputError` naming the role, in both modes, rather than
a greedy choice of garbage or a crash in ``torch.multinomial``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvbudget.errors import InvalidArgumentError, ModelOutputError

MIN_TEMPERATURE = 1e-5
"""The smallest temperature that samples; below it (0 included) decoding is greedy, as
vLLM does below its ``_SAMPLING_EPS`` of 1e-5. ``softmax(logits / t)`` of float32 logits
is then the argmax's one-hot distribution anyway, and at ``t = 1e-45`` the division
overflows to inf (NaN probabilities)."""


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to generate: at most ``max_new_tokens`` tokens per prompt, greedy when
    ``temperature`` is below :data:`MIN_TEMPERATURE` (0 included), else sampled from
    ``softmax(logits / temperature)``."""

    max_new_tokens: int = 16
    temperature: float = 0.0

    def __post_init__(self) -> None:
        n = self.max_new_tokens
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgumentError(f"max_new_tokens must be an integer >= 1, got {n!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < float("inf"):
            raise InvalidArgumentError(f"temperature must be a number >= 0, got {t!r}")

    @property
    def greedy(self) -> bool:
        """True when decoding takes the argmax (``temperature < MIN_TEMPERATURE``)."""
        return self.temperature < MIN_TEMPERATURE


def check_logits(logits: torch.Tensor, role: str) -> None:
    """Raise ModelOutputError when ``logits`` (of model ``role``) hold NaN or infinite
    values. Reads only."""
    finite = torch.isfinite(logits)
    if bool(finite.all()):
        return
    nan = int(torch.isnan(logits).sum())
    raise ModelOutputError(
        f"the {role} model's logits hold {nan} NaN and {int((~finite).sum()) - nan} "
        f"infinite values (of {logits.numel()}): its weights or activations are not "
        "finite; check the checkpoint, or run it in float32"
    )


def probabilities(logits: torch.Tensor, temperature: float, role: str = "target") -> torch.Tensor:
    """``softmax(logits / temperature)`` in float32 (rows of ``logits``).

    Raises ModelOutputError when the logits of ``role`` are not finite, or overflow
    float32 once divided by ``temperature``."""
    check_logits(logits, role)
    scaled = logits.float() / temperature
    if not bool(torch.isfinite(scaled).all()):
        raise ModelOutputError(
            f"the {role} model's logits (largest magnitude {float(logits.abs().max()):.3g}) "
            f"overflow float32 at temperature {temperature:g}; use a larger temperature, "
            "or 0 for greedy decoding"
        )
    return torch.softmax(scaled, dim=-1)


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token drawn from the distribution ``probs`` ``[vocab]`` (CPU)."""
    return int(torch.multinomial(probs, 1, generator=generator))


def verify_greedy(draft_tokens: list[int], target_argmax: list[int]) -> tuple[int, int]:
    """``(accepted, next_token)``: how many leading drafts equal the target's argmax, and
    the target's argmax after them. ``target_argmax`` has ``len(draft_tokens) + 1``
    entries. Pure."""
    accepted = 0
    while accepted < len(draft_tokens) and draft_tokens[accepted] == target_argmax[accepted]:
        accepted += 1
    return accepted, target_argmax[accepted]


def verify_rejection(
    draft_tokens: list[int],
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> tuple[int, int]:
    """``(accepted, next_token)`` by speculative rejection sampling (module docstring).

    ``draft_probs`` ``[k, vocab]``: the distributions the drafts were drawn from;
    ``target_probs`` ``[k + 1, vocab]``; CPU float32. Draws from ``generator``."""
    k = len(draft_tokens)
    if k:
        rolls = torch.rand(k, generator=generator).tolist()
        p_draft = target_probs[torch.arange(k), draft_tokens].tolist()
        q_draft = draft_probs[torch.arange(k), draft_tokens].tolist()
        for i in range(k):
            if rolls[i] * q_draft[i] < p_draft[i]:  # accept with probability min(1, p/q)
                continue
            residual = (target_probs[i] - draft_probs[i]).clamp(min=0)
            if float(residual.sum()) <= 0:  # p == q: a rejection has probability 0
                residual = target_probs[i]
            return i, sample(residual / residual.sum(), generator)
    return k, sample(target_probs[k], generator)
