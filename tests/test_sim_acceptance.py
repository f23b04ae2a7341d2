"""The acceptance model: probabilities, seeded draws, parsing."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.errors import InvalidArgumentError
from kvbudget.sim.acceptance import AcceptanceDraw, AcceptanceModel


def test_one_rate_per_token() -> None:
    model = AcceptanceModel.parse("0.7")
    # P(>=1) = 0.7, P(>=2) = 0.49, P(>=3) = 0.343; mean = 1.533
    assert model.at_least(3) == pytest.approx((0.7, 0.49, 0.343))
    assert model.expected_accepted(3) == pytest.approx(1.533)


def test_per_position_rates_repeat_the_last() -> None:
    model = AcceptanceModel.parse("0.8,0.6")
    # 0.8; 0.8 x 0.6 = 0.48; 0.48 x 0.6 = 0.288
    assert model.at_least(3) == pytest.approx((0.8, 0.48, 0.288))


def test_draws_are_seeded() -> None:
    model = AcceptanceModel(rates=(0.7,))
    d1, d2, d3 = (
        AcceptanceDraw(model, 3, 1),
        AcceptanceDraw(model, 3, 1),
        AcceptanceDraw(model, 3, 2),
    )
    s1 = [d1.draw() for _ in range(200)]
    assert s1 == [d2.draw() for _ in range(200)]
    assert s1 != [d3.draw() for _ in range(200)]


def test_extreme_rates() -> None:
    assert {AcceptanceDraw(AcceptanceModel(rates=(1.0,)), 3, 0).draw() for _ in range(50)} == {3}
    assert {AcceptanceDraw(AcceptanceModel(rates=(0.0,)), 3, 0).draw() for _ in range(50)} == {0}


def test_the_mean_of_many_draws_is_the_expectation() -> None:
    draw = AcceptanceDraw(AcceptanceModel(rates=(0.7,)), 3, seed=0)
    n = 20000
    mean = sum(draw.draw() for _ in range(n)) / n
    # variance of accepted <= 9/4; 5 sigma of the mean = 5 x 1.5 / sqrt(20000) = 0.053
    assert mean == pytest.approx(1.533, abs=0.053)


@settings(max_examples=50, deadline=None)
@given(
    rates=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5),
    k=st.integers(0, 8),
    seed=st.integers(0, 2**32),
)
def test_draws_stay_in_range_and_follow_the_thresholds(
    rates: list[float], k: int, seed: int
) -> None:
    model = AcceptanceModel(rates=tuple(rates))
    at_least = model.at_least(k)
    assert all(a >= b for a, b in itertools.pairwise(at_least))  # non-increasing
    draw = AcceptanceDraw(model, k, seed)
    for _ in range(20):
        n = draw.draw()
        assert 0 <= n <= k
        if n < k:
            # a rejection at position n + 1 means u >= P(accepted >= n + 1), with u < 1
            assert at_least[n] < 1.0


@pytest.mark.parametrize("text", ["", "x", "0.5,y", "1.5", "-0.1"])
def test_bad_acceptance(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="acceptance"):
        AcceptanceModel.parse(text)


@settings(max_examples=60, deadline=None)
@given(
    takes=st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000)), max_size=12),
    seed=st.integers(0, 3),
)
def test_batched_takes_and_put_backs_read_one_stream(
    takes: list[tuple[int, int]], seed: int
) -> None:
    """However the draws are taken (counts of any size, some put back with unread), the
    values read are the one-at-a-time stream's, in order, each 1 + accepted."""
    import random
    from bisect import bisect_right

    model = AcceptanceModel(rates=(0.7,))
    u = random.Random(seed).random  # the module docstring's draw, one u at a time
    ascending = tuple(reversed(model.at_least(3)))
    batched = AcceptanceDraw(model, 3, seed)
    read: list[int] = []
    for n, back in takes:
        got = batched.counts(n)
        back = min(back, n)
        batched.unread(back)
        read += got[: n - back]
    assert read == [1 + 3 - bisect_right(ascending, u()) for _ in read]
    assert all(1 <= v <= 4 for v in read)
