"""The human annotation protocol (paper section 3.2, Appendix D): triple-wise tasks over responses.

For 5 responses the five tasks are the adjacent triples taken circularly, (1,2,3), (2,3,4),
(3,4,5), (4,5,1), (5,1,2), which together cover all 10 pairs. For other N: N <= 3 is one task
with every response; N = 4 uses the 4 circular triples (all 6 pairs); N > 5 starts from the N
circular triples (pairs up to distance 2) and adds triples greedily until every pair is covered.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations


def pairs_covered(groups: Sequence[Sequence[str]]) -> set[frozenset[str]]:
    return {frozenset(p) for g in groups for p in combinations(g, 2)}


def triple_tasks(keys: Sequence[str]) -> list[list[str]]:
    """Groups of response keys to compare, covering every pair."""
    n = len(keys)
    if n <= 3:
        return [list(keys)] if n >= 2 else []
    groups = [[keys[i], keys[(i + 1) % n], keys[(i + 2) % n]] for i in range(n)]
    missing = [frozenset(p) for p in combinations(keys, 2)]
    covered = pairs_covered(groups)
    missing = [p for p in missing if p not in covered]
    while missing:
        a, b = sorted(missing[0], key=keys.index)
        third = max(
            (k for k in keys if k not in (a, b)),
            key=lambda k: (frozenset((a, k)) in missing) + (frozenset((b, k)) in missing),
        )
        groups.append([a, b, third])
        covered = pairs_covered(groups)
        missing = [p for p in missing if p not in covered]
    return groups
