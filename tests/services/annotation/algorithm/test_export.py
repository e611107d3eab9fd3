"""Preference pairs from rankings: the AI-annotated ones length-debiased, human ones untouched (paper section 4.2)."""

from __future__ import annotations

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from services.annotation.algorithm.export import preference_items

# chosen longer in both pairs of each item: debiasing drops about half of such pairs
HUMAN = BenchItem("人工", (Response("a", "长长长长"), Response("b", "短")), {"a": 1, "b": 2}, ("知识",), {})
AI = [
    BenchItem(
        f"机器{i}",
        (Response("x", "长长长长"), Response("y", "短"), Response("z", "短短")),
        {"x": 1, "y": 2, "z": 3},
        (),
        {},
    )
    for i in range(6)
]


def pairs(items: list) -> dict[str, tuple]:
    return {item.input: item.pairs for item in items}


def test_debiasing_touches_the_ai_pairs_only() -> None:
    for seed in range(5):
        items, stats = preference_items(AI, debias=True, seed=seed, untouched=[HUMAN])
        assert pairs(items)["人工"] == (("a", "b"),)  # a chosen-longer human pair: kept
        ai_pairs = sum(len(p) for name, p in pairs(items).items() if name != "人工")
        assert ai_pairs < 3 * len(AI) and stats.pairs_before == 1 + 3 * len(AI)
        assert stats.pairs_after == 1 + ai_pairs


def test_without_debias_every_pair_stays() -> None:
    items, stats = preference_items(AI, debias=False, untouched=[HUMAN])
    assert stats.pairs_before == stats.pairs_after == 1 + 3 * len(AI)
    assert next(iter(pairs(items))) == "人工"  # human rankings first, then the AI ones in order
