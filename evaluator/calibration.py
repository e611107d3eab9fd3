"""Expected calibration error of a reward model's pairwise margins (the official code's ECE).

A Bradley-Terry RM claims P(better wins) = sigmoid(r_better - r_worse). Margins are binned by
|margin| into equal-width bins over [0, max |margin|]; each bin compares the share of pairs the
RM ordered right (margin >= 0, so a tie counts as right, as in the official code) with
sigmoid(mean |margin|); ECE is the pair-weighted mean gap. One deliberate difference: the
official bins are half-open, which drops the pair with the largest margin; here the last bin is
closed so every pair counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

DEFAULT_BINS = 5


def expected_calibration_error(margins: Sequence[float], n_bins: int = DEFAULT_BINS) -> float | None:
    """ECE over margins r_better - r_worse; None when there are no pairs."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if not margins:
        return None
    top = max(abs(m) for m in margins)
    step = top / n_bins
    bins: list[list[float]] = [[] for _ in range(n_bins)]
    for m in margins:
        index = n_bins - 1 if step == 0 else min(int(abs(m) / step), n_bins - 1)
        bins[index].append(m)
    gaps = []
    for members in bins:
        if members:
            right = sum(1 for m in members if m >= 0) / len(members)
            confidence = _sigmoid(math.fsum(abs(m) for m in members) / len(members))
            gaps.append(len(members) * abs(right - confidence))
    return math.fsum(gaps) / len(margins)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))
