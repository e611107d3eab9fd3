"""Length buckets: pad token lengths up to a multiple of BUCKET so Triton can batch requests of one shape. Pure.

(Grouping by length for the forward itself is `cheems.forward.length_groups`.)
"""

from __future__ import annotations

from collections.abc import Sequence

BUCKET = 512  # token lengths are padded up to a multiple of this on the way to Triton (padding is
# trimmed again before the forward, so a coarse bucket costs only bytes and lets more requests share a shape)


def bucket_length(length: int, bucket: int = BUCKET) -> int:
    return -(-length // bucket) * bucket


def by_bucket(lengths: Sequence[int], bucket: int = BUCKET) -> dict[int, list[int]]:
    """Indices keyed by their padded (bucketed) length."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(bucket_length(n, bucket), []).append(i)
    return groups
