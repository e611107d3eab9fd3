"""Mean, standard deviation and Pearson correlation of the last N pairs (x, y): pure, no I/O.

    stats = RollingStats(window=1024)
    stats.add(reward, length)          # O(1): the oldest pair leaves once the window is full
    stats.count, stats.mean, stats.std, stats.correlation

Adding is O(1) (the scorer adds a pair per response it scores); the figures are taken from the pairs held when they
are read (a scrape, GetModelInfo: seconds apart), O(window), in two passes with `math.fsum` (the mean first, then
sums of the differences from it), and kept until the next `add`. Running sums would be O(1) to read, but a large
value that leaves the window leaves its rounding behind in them: a window of equal values would then show a spread.

`std` is the population standard deviation (numpy's `std`, ddof 0); `correlation` is numpy's `corrcoef` of the
two: None while fewer than two pairs are held or either side is constant (the correlation is undefined there).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class _Figures:
    mean: float
    std: float
    correlation: float | None


class RollingStats:
    """The last `window` pairs (x, y): x's mean and std, and x's correlation with y."""

    def __init__(self, window: int) -> None:
        if window < 2:
            raise ValueError(f"window must be at least 2 (a correlation needs two pairs), got {window}")
        self.window = window
        self._pairs: deque[tuple[float, float]] = deque(maxlen=window)
        self._figures: _Figures | None = None  # of the pairs held now; None: not taken since the last add

    @property
    def count(self) -> int:
        """Pairs held now (at most `window`)."""
        return len(self._pairs)

    def add(self, x: float, y: float) -> None:
        """One pair in; the oldest out once `window` are held. A non-finite value is refused (ValueError): one
        NaN would make every figure NaN for a whole window."""
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"rolling statistics take finite values, got ({x}, {y})")
        self._pairs.append((x, y))
        self._figures = None

    def _taken(self) -> _Figures | None:
        if not self._pairs:
            return None
        if self._figures is None:
            self._figures = _figures(list(self._pairs))
        return self._figures

    @property
    def mean(self) -> float | None:
        """x's mean over the window (None when empty)."""
        figures = self._taken()
        return figures.mean if figures is not None else None

    @property
    def std(self) -> float | None:
        """x's population standard deviation over the window (None when empty)."""
        figures = self._taken()
        return figures.std if figures is not None else None

    @property
    def correlation(self) -> float | None:
        """Pearson's r of x and y over the window, in [-1, 1]; None with fewer than two pairs or a constant side."""
        figures = self._taken()
        return figures.correlation if figures is not None else None


def _figures(pairs: list[tuple[float, float]]) -> _Figures:
    n = len(pairs)
    mx = math.fsum(x for x, _ in pairs) / n
    my = math.fsum(y for _, y in pairs) / n
    dx = [x - mx for x, _ in pairs]
    dy = [y - my for _, y in pairs]
    sxx = math.fsum(d * d for d in dx)
    syy = math.fsum(d * d for d in dy)
    if all(x == pairs[0][0] for x, _ in pairs):  # equal values: no spread (their mean may round off them)
        return _Figures(mx, 0.0, None)
    std = math.sqrt(sxx / n)
    if n < 2 or syy == 0.0 or all(y == pairs[0][1] for _, y in pairs):
        return _Figures(mx, std, None)
    sxy = math.fsum(a * b for a, b in zip(dx, dy, strict=True))
    spread = math.sqrt(sxx) * math.sqrt(syy)  # not sqrt(sxx * syy): that product underflows for tiny values
    if spread == 0.0:
        return _Figures(mx, std, None)
    return _Figures(mx, std, max(-1.0, min(1.0, sxy / spread)))
