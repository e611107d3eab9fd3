"""Length grouping: split sequences into batches of similar length so padding stays small. Pure."""

from __future__ import annotations

from collections.abc import Sequence

BUCKET = 512  # token lengths are padded up to a multiple of this on the way to Triton (padding is
# trimmed again before the forward, so a coarse bucket costs only bytes and lets more requests share a shape)


def bucket_length(length: int, bucket: int = BUCKET) -> int:
    return -(-length // bucket) * bucket


def length_groups(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Indices grouped shortest first; a group holds at most max_batch items and max_tokens padded tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        padded = (len(current) + 1) * lengths[i]  # sorted, so this item is the group's longest
        if current and (len(current) == max_batch or padded > max_tokens):
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def by_bucket(lengths: Sequence[int], bucket: int = BUCKET) -> dict[int, list[int]]:
    """Indices keyed by their padded (bucketed) length."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(bucket_length(n, bucket), []).append(i)
    return groups
