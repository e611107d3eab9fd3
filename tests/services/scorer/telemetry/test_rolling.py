"""services/scorer/telemetry/rolling.py: the rolling mean, std and correlation equal numpy's over the last N pairs."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.scorer.telemetry.rolling import RollingStats

finite = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)


def numpy_figures(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    x = np.array([p[0] for p in pairs])
    y = np.array([p[1] for p in pairs])
    with np.errstate(invalid="ignore", divide="ignore"):  # a constant side: numpy's r is NaN, with a warning
        return float(np.mean(x)), float(np.std(x)), float(np.corrcoef(x, y)[0, 1])


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=2, max_value=40), st.lists(st.tuples(finite, finite), min_size=2, max_size=200))
def test_the_figures_are_numpys_over_the_last_window(window: int, pairs: list[tuple[float, float]]) -> None:
    stats = RollingStats(window)
    for x, y in pairs:
        stats.add(x, y)
    held = pairs[-window:]
    assert stats.count == len(held)
    mean, std, r = numpy_figures(held)
    assert stats.mean == pytest.approx(mean, rel=1e-9, abs=1e-9)
    assert stats.std == pytest.approx(std, rel=1e-6, abs=1e-6)
    if stats.correlation is not None:  # defined: numpy's, to rounding
        assert stats.correlation == pytest.approx(r, abs=1e-6)
    else:  # undefined only where a side is constant (to rounding)
        xs, ys = [p[0] for p in held], [p[1] for p in held]
        assert np.std(xs) <= 1e-5 * (np.abs(xs).max() + 1) or np.std(ys) <= 1e-5 * (np.abs(ys).max() + 1)


def test_a_long_stream_far_from_zero_keeps_its_precision() -> None:
    """Lengths of thousands of characters, rewards near zero, 200,000 pairs through a window of 1,000: the sums
    are taken afresh every window, so rounding does not pile up."""
    rng = random.Random(7)
    stats = RollingStats(1000)
    pairs = []
    for _ in range(200_000):
        length = rng.randint(2000, 3000)
        pair = (0.001 * (length - 2500) + rng.gauss(0, 0.5) + 1e3, float(length))
        pairs.append(pair)
        stats.add(*pair)
    mean, std, r = numpy_figures(pairs[-1000:])
    assert stats.mean == pytest.approx(mean, rel=1e-12)
    assert stats.std == pytest.approx(std, rel=1e-9)
    assert stats.correlation == pytest.approx(r, abs=1e-9)


def test_undefined_figures_are_none() -> None:
    stats = RollingStats(4)
    assert (stats.count, stats.mean, stats.std, stats.correlation) == (0, None, None, None)
    stats.add(1.5, 10)
    assert (stats.mean, stats.std, stats.correlation) == (1.5, 0.0, None)  # one pair: no correlation
    stats.add(2.5, 10)
    assert stats.correlation is None  # every length the same: r is undefined, not 0
    stats.add(0.5, 30)
    assert stats.correlation == pytest.approx(numpy_figures([(1.5, 10), (2.5, 10), (0.5, 30)])[2])


def test_perfectly_related_pairs_give_one_and_minus_one() -> None:
    up, down = RollingStats(10), RollingStats(10)
    for n in range(1, 30):
        up.add(0.5 * n - 3, n)
        down.add(-2.0 * n, n)
    assert up.correlation == pytest.approx(1.0) and down.correlation == pytest.approx(-1.0)
    assert -1.0 <= (down.correlation or 0) <= 1.0


@pytest.mark.parametrize("pair", [(math.nan, 1.0), (1.0, math.inf), (-math.inf, 0.0)])
def test_a_value_that_is_not_finite_is_refused_and_leaves_the_window_as_it_was(pair: tuple[float, float]) -> None:
    stats = RollingStats(3)
    stats.add(1.0, 2.0)
    with pytest.raises(ValueError, match="finite"):
        stats.add(*pair)
    assert (stats.count, stats.mean) == (1, 1.0)


def test_a_window_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="window must be at least 2"):
        RollingStats(1)
