"""Greedy sample-based batching (paper section 5): each response is encoded once per epoch.

Prompts are shuffled per epoch (seeded). A batch holds at most `batch_size` responses. A prompt's
responses go into the current batch together when they fit; otherwise the batch is filled greedily
with responses that complete preference pairs, then with single responses that split the fewest
pairs, and the rest of the prompt carries over to the next batch. Every response appears exactly
once per epoch; pairs split across batches are skipped for that epoch (the paper's trade-off).
Unlike the official sampler, a batch never exceeds `batch_size`.

Under torchrun, all ranks build the same batches and each takes its slice (`shard`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class SamplerConfig:
    batch_size: int  # responses per forward, across all ranks
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")


def epoch_batches(
    groups: Sequence[Sequence[int]],
    pairs: Sequence[Sequence[tuple[int, int]]],
    config: SamplerConfig,
    epoch: int,
) -> list[list[int]]:
    """The batches (lists of example ids) of one epoch; deterministic in (seed, epoch)."""
    order = list(range(len(groups)))
    if config.shuffle:
        random.Random(config.seed * 1_000_003 + epoch).shuffle(order)
    batches: list[list[int]] = []
    batch: list[int] = []
    for g in order:
        left = list(groups[g])
        while left:
            room = config.batch_size - len(batch)
            taken = left if len(left) <= room else _greedy(left, pairs[g], room)
            batch += taken
            chosen = set(taken)
            left = [x for x in left if x not in chosen]
            if len(batch) == config.batch_size:
                batches.append(batch)
                batch = []
    if batch:
        batches.append(batch)
    return batches


def _greedy(left: Sequence[int], pairs: Sequence[tuple[int, int]], room: int) -> list[int]:
    """Up to `room` of `left`: first whole pairs, then the responses whose move splits the fewest
    pairs with the responses that stay behind (those still in `left`)."""
    available = set(left)
    chosen: list[int] = []
    for a, b in pairs:
        new = [x for x in (a, b) if x in available and x not in chosen]
        if a in available and b in available and len(chosen) + len(new) <= room:
            chosen += new
    behind = available - set(chosen)
    splits = {x: sum(1 for p in pairs if x in p and (set(p) - {x}) <= behind) for x in behind}
    rest = sorted(behind, key=lambda x: (splits[x], left.index(x)))
    return chosen + rest[: room - len(chosen)]


def shard(batch: Sequence[int], rank: int, world_size: int) -> list[int]:
    """This rank's contiguous slice of a global batch (the last ranks may get fewer, or none)."""
    per = -(-len(batch) // world_size)
    return list(batch[rank * per : (rank + 1) * per])


def pairs_in_batch(
    batch: Sequence[int], pairs: Sequence[Sequence[tuple[int, int]]], group_of: Sequence[int]
) -> list[tuple[int, int]]:
    """(chosen position, rejected position) within `batch` for every pair whose two responses it holds.

    `group_of[example]` is the example's index into `pairs`, so only the batch's own prompts are visited.
    """
    position = {x: i for i, x in enumerate(batch)}
    groups = dict.fromkeys(group_of[x] for x in batch)
    return [(position[a], position[b]) for g in groups for a, b in pairs[g] if a in position and b in position]
