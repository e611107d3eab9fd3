"""Distant supervision (paper section 4.2, Figure 3) and length debiasing.

Distant supervision: an RM trained on human-resolved data scores every response; an AI relation
is dropped when the RM clearly disagrees (the RM prefers the "worse" response by more than
`margin`, or, for a tie, separates the two by more than `tie_margin`). What remains is resolved
with Algorithm 1 into a consistent partial order.

Length debiasing: preference pairs are split by whether the chosen response is longer or shorter
than the rejected one, and the larger group is downsampled (seeded) to the size of the smaller.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from services.annotation.algorithm.resolve import Relation, Resolution, resolve

T = TypeVar("T")


@dataclass(frozen=True)
class Filtered:
    kept: list[Relation]
    dropped: list[Relation]
    resolution: Resolution


def distant_supervision(
    relations: Sequence[Relation], scores: Mapping[str, float], margin: float = 0.0, tie_margin: float = float("inf")
) -> Filtered:
    """Keep the AI relations the RM does not contradict, then resolve them."""
    kept: list[Relation] = []
    dropped: list[Relation] = []
    for r in relations:
        gap = scores[r.better] - scores[r.worse]
        agrees = abs(gap) <= tie_margin if r.tie else gap >= -margin
        (kept if agrees else dropped).append(r)
    return Filtered(kept, dropped, resolve(kept))


@dataclass(frozen=True)
class Debiased(Generic[T]):
    pairs: list[tuple[T, T]]
    longer_before: int
    shorter_before: int
    equal: int
    longer_after: int
    shorter_after: int


def length_debias(pairs: Sequence[tuple[T, T]], length: Callable[[T], int], seed: int = 0) -> Debiased[T]:
    """Balance pairs (chosen, rejected) whose chosen response is longer against those where it is shorter.

    Pairs with equal lengths are all kept. Output keeps the input order.
    """
    longer = [i for i, (c, r) in enumerate(pairs) if length(c) > length(r)]
    shorter = [i for i, (c, r) in enumerate(pairs) if length(c) < length(r)]
    size = min(len(longer), len(shorter))
    rng = random.Random(seed)
    drop = set(rng.sample(longer, len(longer) - size)) | set(rng.sample(shorter, len(shorter) - size))
    kept = [p for i, p in enumerate(pairs) if i not in drop]
    equal = len(pairs) - len(longer) - len(shorter)
    return Debiased(kept, len(longer), len(shorter), equal, size, size)
