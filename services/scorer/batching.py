"""Length buckets: pad token lengths up to a multiple of BUCKET so Triton can batch requests of one shape. Pure.

    requests([10, 600, 30], max_rows=64)                   # -> [(512, [0, 2]), (1024, [1])]
    requests([10, 600, 30], max_rows=64, together=[[0, 1]])  # -> [(512, [2]), (1024, [0, 1])]

`together` holds groups of sequences to keep in one Triton request (prefix sharing: one prompt's
responses, which the model packs into one row only if they reach it in one batch). A group goes whole
into the bucket of its longest member: padding is trimmed again before the forward, so that costs
bytes on the wire, while splitting a group by bucket computes its prompt once per part.

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


def requests(
    lengths: Sequence[int], max_rows: int, together: Sequence[Sequence[int]] = (), bucket: int = BUCKET
) -> list[tuple[int, list[int]]]:
    """(padded length, indices) of each Triton request: every index once, at most `max_rows` per request.

    A group of `together` stays in one request unless it alone exceeds `max_rows` (then it fills whole
    requests); requests of one bucket are filled group by group, in order of first index."""
    grouped = {i for group in together for i in group}
    units = [list(group) for group in together if group] + [[i] for i in range(len(lengths)) if i not in grouped]
    by_padded: dict[int, list[list[int]]] = {}
    for unit in sorted(units, key=min):
        by_padded.setdefault(bucket_length(max(lengths[i] for i in unit), bucket), []).append(unit)
    out: list[tuple[int, list[int]]] = []
    for padded, bucket_units in sorted(by_padded.items()):
        chunk: list[int] = []
        for unit in bucket_units:
            if chunk and len(chunk) + len(unit) > max_rows:
                out.append((padded, chunk))
                chunk = []
            for i in unit:
                if len(chunk) == max_rows:  # a group larger than a request
                    out.append((padded, chunk))
                    chunk = []
                chunk.append(i)
        if chunk:
            out.append((padded, chunk))
    return out
