"""Mean, standard deviation and Pearson correlation of the last N pairs (x, y), O(1) per pair: pure, no I/O.

    stats = RollingStats(window=1024)
    stats.add(reward, length)          # the oldest pair leaves once the window is full
    stats.count, stats.mean, stats.std, stats.correlation

The window keeps running sums of x, y, x², y² and xy, each taken about a shift (a recent mean), so the
differences that give the variance and covariance do not cancel catastrophically when the values sit far from
zero (lengths of hundreds of characters). Adding a pair and dropping the oldest moves the sums in constant time;
every `window` additions the sums are taken again from the pairs held, with the shift moved to their mean, so
rounding never accumulates past one window's worth (amortised O(1): N work every N additions).

`std` is the population standard deviation (numpy's `std`, ddof 0); `correlation` is numpy's `corrcoef` of the
two: None while fewer than two pairs are held or either side is constant (the correlation is undefined there).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


@dataclass
class _Sums:
    """Sums of the shifted pairs held: (x - kx), (y - ky), their squares and their product."""

    kx: float = 0.0
    ky: float = 0.0
    x: float = 0.0
    y: float = 0.0
    xx: float = 0.0
    yy: float = 0.0
    xy: float = 0.0

    def move(self, x: float, y: float, sign: float) -> None:
        dx, dy = x - self.kx, y - self.ky
        self.x += sign * dx
        self.y += sign * dy
        self.xx += sign * dx * dx
        self.yy += sign * dy * dy
        self.xy += sign * dx * dy


class RollingStats:
    """The last `window` pairs (x, y): x's mean and std, and x's correlation with y."""

    def __init__(self, window: int) -> None:
        if window < 2:
            raise ValueError(f"window must be at least 2 (a correlation needs two pairs), got {window}")
        self.window = window
        self._pairs: deque[tuple[float, float]] = deque()
        self._sums = _Sums()
        self._added = 0  # additions since the sums were last taken afresh

    @property
    def count(self) -> int:
        """Pairs held now (at most `window`)."""
        return len(self._pairs)

    def add(self, x: float, y: float) -> None:
        """One pair in; the oldest out once `window` are held. A non-finite value is refused (ValueError): one
        NaN would poison the sums for a whole window."""
        if not (math.isfinite(x) and math.isfinite(y)):
            raise ValueError(f"rolling statistics take finite values, got ({x}, {y})")
        if not self._pairs:
            self._sums = _Sums(x, y)  # shifted by the first pair: sums of small differences from the start
        elif len(self._pairs) == self.window:
            old_x, old_y = self._pairs.popleft()
            self._sums.move(old_x, old_y, -1.0)
        self._pairs.append((x, y))
        self._sums.move(x, y, 1.0)
        self._added += 1
        if self._added >= self.window:
            self._rebuild()

    def _rebuild(self) -> None:
        """The sums taken again from the pairs held, about their means (O(window), once per `window` additions)."""
        n = len(self._pairs)
        sums = _Sums(math.fsum(x for x, _ in self._pairs) / n, math.fsum(y for _, y in self._pairs) / n)
        for x, y in self._pairs:
            sums.move(x, y, 1.0)
        self._sums, self._added = sums, 0

    @property
    def mean(self) -> float | None:
        """x's mean over the window (None when empty)."""
        n = len(self._pairs)
        return self._sums.kx + self._sums.x / n if n else None

    def _variance(self, square: float, total: float) -> float:
        n = len(self._pairs)
        return max(square / n - (total / n) ** 2, 0.0)

    @property
    def std(self) -> float | None:
        """x's population standard deviation over the window (None when empty)."""
        if not self._pairs:
            return None
        return math.sqrt(self._variance(self._sums.xx, self._sums.x))

    @property
    def correlation(self) -> float | None:
        """Pearson's r of x and y over the window, in [-1, 1]; None with fewer than two pairs or a constant side."""
        n = len(self._pairs)
        if n < 2:
            return None
        s = self._sums
        vx, vy = self._variance(s.xx, s.x), self._variance(s.yy, s.y)
        # a side whose spread is within rounding of its sums is constant: r would be noise divided by noise
        if vx <= 1e-12 * (s.xx / n + 1e-300) or vy <= 1e-12 * (s.yy / n + 1e-300):
            return None
        spread = math.sqrt(vx) * math.sqrt(vy)  # not sqrt(vx * vy): that product underflows for tiny values
        if spread == 0.0:
            return None
        covariance = s.xy / n - (s.x / n) * (s.y / n)
        return max(-1.0, min(1.0, covariance / spread))
