"""Micro-batches by tokens: an optimizer step's responses split into forwards that fit each process's budget.

With a fixed count of responses per forward (`micro_batch_size`), the tokens in a forward follow the
responses' lengths: a GPU is under-filled by short answers and over its memory with long ones. With a
budget (`max_tokens`), each process's share of a forward (its *slot*) holds at most `Budget.responses`
responses and `Budget.tokens` tokens as `measure` counts them (the size of the forward it will run, its
rows as the planner lays them out, padding included: `layout_tokens`). Slots are filled in the step's
order with whole prompts; a prompt that does not fit the current slot starts the next one, and only a
prompt too big for an empty slot is cut (its pairs across the cut are skipped, as the sampler skips pairs
across batches). `world_size` consecutive slots make one forward: each rank runs its own slot, and the
loss sees every pair of the forward (rewards gathered).

    forwards = split_step(step_ids, group_of, world_size=2, budget=Budget(64, 16384), measure=tokens)
    forwards[0].slots  # ((ids of rank 0), (ids of rank 1))

Pure: ids in, forwards out, the same on every rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from trainer.sampler import shard

Measure = Callable[[Sequence[int]], int]  # tokens a slot's forward computes


@dataclass(frozen=True)
class Budget:
    """What one process's forward may hold: responses (`micro_batch_size`) and tokens (`max_tokens`, 0 = any)."""

    responses: int
    tokens: int = 0

    def __post_init__(self) -> None:
        if self.responses < 1 or self.tokens < 0:
            raise ValueError(f"a budget needs responses >= 1 and tokens >= 0, got {self.responses}, {self.tokens}")


@dataclass(frozen=True)
class Forward:
    """One forward across the ranks: `slots[r]` are rank r's example ids (possibly none)."""

    slots: tuple[tuple[int, ...], ...]

    @property
    def ids(self) -> list[int]:
        """Every rank's ids in rank order: the order of the gathered rewards."""
        return [x for slot in self.slots for x in slot]

    @property
    def counts(self) -> list[int]:
        return [len(slot) for slot in self.slots]

    @classmethod
    def even(cls, batch: Sequence[int], world_size: int) -> Forward:
        """A batch cut into `world_size` contiguous slices, the last ranks getting fewer (or none)."""
        return cls(tuple(tuple(shard(batch, r, world_size)) for r in range(world_size)))


def split_step(
    step: Sequence[int], group_of: Sequence[int], world_size: int, budget: Budget, measure: Measure
) -> list[Forward]:
    """The forwards of one step, in order; every id in exactly one slot, every slot within the budget unless it
    holds a single response longer than the budget allows."""

    def fits(ids: Sequence[int]) -> bool:
        return len(ids) <= budget.responses and (budget.tokens == 0 or measure(ids) <= budget.tokens)

    slots: list[tuple[int, ...]] = []
    current: list[int] = []
    for chunk in _prompt_runs(step, group_of):
        if fits(current + chunk):
            current += chunk
            continue
        if current:
            slots.append(tuple(current))
            current = []
        while chunk and not fits(chunk):  # a prompt too big for a slot of its own: cut it
            n = 1
            while n < len(chunk) and fits(chunk[: n + 1]):
                n += 1
            slots.append(tuple(chunk[:n]))
            chunk = chunk[n:]
        current = chunk
    if current:
        slots.append(tuple(current))
    forwards = []
    for start in range(0, len(slots), world_size):
        taken = slots[start : start + world_size]
        forwards.append(Forward(tuple(taken) + ((),) * (world_size - len(taken))))
    return forwards


def _prompt_runs(step: Sequence[int], group_of: Sequence[int]) -> list[list[int]]:
    """The step's ids cut where the prompt changes (the sampler puts a prompt's responses side by side)."""
    runs: list[list[int]] = []
    for x in step:
        if runs and group_of[runs[-1][-1]] == group_of[x]:
            runs[-1].append(x)
        else:
            runs.append([x])
    return runs


def layout_tokens(
    lengths: Sequence[int],
    group_of: Sequence[int],
    prefixes: Sequence[int],
    packs: Sequence[bool] | None,
    padded: bool = True,
) -> Measure:
    """Tokens a slot's forward computes: its rows, each prompt that the planner packs (`packs[g]`; None: prefix
    sharing off) one row of `prefixes[g]` tokens once and each response's own, every other response a row of its
    own; `padded`: the rows are right-padded to the longest (SDPA, eager), else laid end to end (FlexAttention)."""

    def measure(ids: Sequence[int]) -> int:
        if not ids:
            return 0
        rows: list[int] = []
        packed: dict[int, int] = {}
        for x in ids:
            g = group_of[x]
            if packs is not None and packs[g]:
                packed[g] = packed.get(g, prefixes[g]) + lengths[x] - prefixes[g]
            else:
                rows.append(lengths[x])
        rows += packed.values()
        return len(rows) * max(rows) if padded else sum(rows)

    return measure


def shared_prefixes(
    sequences: Sequence[Sequence[int]] | Sequence[np.ndarray], groups: Sequence[Sequence[int]]
) -> list[int]:
    """Per prompt, the tokens all its responses' sequences begin with (each keeps at least its last token).
    Sequences may be lists or arrays (the token cache's views): compared a whole sequence at a time."""
    out = []
    for members in groups:
        if not members:
            out.append(0)
            continue
        first = np.asarray(sequences[members[0]])
        n = min(len(sequences[x]) for x in members) - 1
        for x in members[1:]:
            n = min(n, _common(first, np.asarray(sequences[x])))
        out.append(max(n, 0))
    return out


def _common(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n
