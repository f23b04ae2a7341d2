"""Rejection sampling preserves the target's distribution; a biased sampler is caught.

Harness: a vocabulary of 5 tokens, ``k = 2`` drafts drawn from fixed draft distributions
``q1, q2``, verified against fixed target distributions ``p1, p2, p3`` by
:func:`verify_rejection`, ``N = 6_000`` times from fixed seeds. The first emitted token
must follow ``p1``; the second (emitted when the first draft was accepted) ``p2``.
Pearson's chi-square with 4 degrees of freedom is compared with its 1 - 1e-4 quantile,
23.5127 (``scipy.stats.chi2.ppf(1 - 1e-4, 4)``): a correct sampler fails each check with
probability 1e-4 over seeds, so this pair of checks with probability <= 2e-4; the seeds
are fixed, so the run itself is deterministic. The same harness applied to two biased
samplers (accept every draft; resample from ``p`` instead of the residual) gives a
statistic far above the bound: the expected statistic is ``N x sum((r - p)^2 / p)``,
650 for the subtle one with these ``p, q`` (r = min(p, q) + 0.5 p).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from kvbudget.engine.sampling import (  # noqa: E402
    SamplingParams,
    sample,
    verify_greedy,
    verify_rejection,
)
from kvbudget.errors import InvalidArgumentError  # noqa: E402

CHI2_DF4_1E4 = 23.5127
N = 6_000
P = torch.tensor(
    [[0.4, 0.3, 0.15, 0.1, 0.05], [0.05, 0.1, 0.5, 0.25, 0.1], [0.2, 0.2, 0.2, 0.2, 0.2]]
)
Q = torch.tensor([[0.1, 0.1, 0.2, 0.3, 0.3], [0.3, 0.3, 0.1, 0.2, 0.1]])

Verifier = Callable[[list[int], torch.Tensor, torch.Tensor, torch.Generator], tuple[int, int]]


def chi_square(counts: list[int], probs: torch.Tensor) -> float:
    total = sum(counts)
    expected = probs * total
    observed = torch.tensor(counts, dtype=torch.float32)
    return float(((observed - expected) ** 2 / expected).sum())


def run(verify: Verifier, seed: int) -> tuple[float, float]:
    """Chi-square statistics of the first and second emitted tokens."""
    gen = torch.Generator().manual_seed(seed)
    first, second = [0] * 5, [0] * 5
    for _ in range(N):
        drafts = [sample(Q[0], gen), sample(Q[1], gen)]
        accepted, token = verify(drafts, Q, P, gen)
        emitted = [*drafts[:accepted], token]
        first[emitted[0]] += 1
        if accepted >= 1:
            second[emitted[1]] += 1
    return chi_square(first, P[0]), chi_square(second, P[1])


def accept_all(
    drafts: list[int], q: torch.Tensor, p: torch.Tensor, gen: torch.Generator
) -> tuple[int, int]:
    return len(drafts), sample(p[len(drafts)], gen)


def resample_from_target(
    drafts: list[int], q: torch.Tensor, p: torch.Tensor, gen: torch.Generator
) -> tuple[int, int]:
    for i, d in enumerate(drafts):
        if float(torch.rand(1, generator=gen)) * float(q[i, d]) >= float(p[i, d]):
            return i, sample(p[i], gen)  # the bug: p instead of max(0, p - q)
    return len(drafts), sample(p[len(drafts)], gen)


@pytest.mark.parametrize("seed", [0, 1])
def test_rejection_sampling_keeps_the_target_distribution(seed: int) -> None:
    first, second = run(verify_rejection, seed)
    assert first < CHI2_DF4_1E4
    assert second < CHI2_DF4_1E4


@pytest.mark.parametrize("biased", [accept_all, resample_from_target])
def test_the_check_catches_a_biased_sampler(biased: Verifier) -> None:
    first, _ = run(biased, 0)
    assert first > 10 * CHI2_DF4_1E4


def test_greedy_verification() -> None:
    assert verify_greedy([4, 7, 9], [4, 7, 2, 5]) == (2, 2)
    assert verify_greedy([4, 7], [4, 7, 1]) == (2, 1)
    assert verify_greedy([3], [4, 7]) == (0, 4)
    assert verify_greedy([], [6]) == (0, 6)


def test_identical_draft_and_target_accept_everything() -> None:
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        drafts = [sample(P[0], gen), sample(P[1], gen)]
        accepted, _ = verify_rejection(drafts, P[:2], P, gen)
        assert accepted == 2


@pytest.mark.parametrize(
    "kwargs", [{"max_new_tokens": 0}, {"max_new_tokens": 1.5}, {"temperature": -1.0}]
)
def test_sampling_params_refuse_bad_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgumentError):
        SamplingParams(**kwargs)  # type: ignore[arg-type]
