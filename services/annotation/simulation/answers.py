"""Simulated annotators for tests and the demo (no people or paid LLM API here).

Truth is a bench file's gold ranks. The simulated human answers the triple-wise protocol and
flips each adjacent comparison with probability `noise`; the simulated AI judge answers every
pair, prefers the longer response with probability `length_bias` when it errs, and otherwise
errs with probability `noise`. Both write the `cheems resolve` input format.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from cheems.formats.cheemsbench import BenchItem
from services.annotation.algorithm.protocol import triple_tasks


def human_order(group: Sequence[str], rank: dict[str, int], rng: random.Random, noise: float) -> list[list[str]]:
    """An ordering with ties of a triple, from gold ranks, with adjacent swaps at rate `noise`."""
    ordered = sorted(group, key=lambda k: (rank[k], rng.random()))
    for i in range(len(ordered) - 1):
        if rng.random() < noise:
            ordered[i], ordered[i + 1] = ordered[i + 1], ordered[i]
    groups: list[list[str]] = []
    for key in ordered:
        if groups and rank[groups[-1][0]] == rank[key] and rng.random() >= noise:
            groups[-1].append(key)
        else:
            groups.append([key])
    return groups


def simulate_human(items: Sequence[BenchItem], noise: float = 0.1, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for item in items:
        keys = [r.id for r in item.responses]
        annotations = [{"order": human_order(g, dict(item.rank), rng, noise)} for g in triple_tasks(keys)]
        out.append(raw_line(item, annotations))
    return out


def simulate_ai(
    items: Sequence[BenchItem], noise: float = 0.25, length_bias: float = 0.7, seed: int = 0
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for item in items:
        length = {r.id: len(r.content) for r in item.responses}
        annotations: list[dict[str, Any]] = []
        for a, b in combinations([r.id for r in item.responses], 2):
            ra, rb = item.rank[a], item.rank[b]
            if rng.random() < noise:  # an error: usually toward the longer answer
                longer, shorter = (a, b) if length[a] >= length[b] else (b, a)
                winner = longer if rng.random() < length_bias else shorter
                annotations.append({"better": winner, "worse": b if winner == a else a})
            elif ra == rb:
                annotations.append({"equal": [a, b]})
            else:
                annotations.append({"better": a, "worse": b} if ra < rb else {"better": b, "worse": a})
        out.append(raw_line(item, annotations))
    return out


def raw_line(item: BenchItem, annotations: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "input": item.input,
        "responses": [r.to_json() for r in item.responses],
        "category": list(item.category),
        "annotations": annotations,
    }
