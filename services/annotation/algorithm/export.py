"""Build training data: rankings -> CheemsPreference pairs, the AI-annotated ones length-debiased (paper 4.2)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cheems.formats.cheemsbench import BenchItem, ranked_pairs
from cheems.formats.preference import PreferenceItem
from services.annotation.algorithm.distant import length_debias


@dataclass(frozen=True)
class ExportStats:
    prompts: int
    pairs_before: int
    pairs_after: int
    chosen_longer_before: int
    chosen_shorter_before: int
    equal_length: int


def preference_items(
    items: Sequence[BenchItem], debias: bool = True, seed: int = 0, untouched: Sequence[BenchItem] = ()
) -> tuple[list[PreferenceItem], ExportStats]:
    """Every ranked pair (better, worse) of each item; those of `items` optionally balanced for length across the
    set, those of `untouched` (human-annotated rankings, which the paper does not debias) added as they are, first."""
    everything = [*untouched, *items]
    human: list[tuple[tuple[int, str], tuple[int, str]]] = []
    pairs: list[tuple[tuple[int, str], tuple[int, str]]] = []
    for n, item in enumerate(everything):
        ids = [r.id for r in item.responses]
        (human if n < len(untouched) else pairs).extend(
            ((n, ids[b]), (n, ids[w])) for b, w in ranked_pairs(item.ranks())
        )
    content = {(n, r.id): r.content for n, item in enumerate(everything) for r in item.responses}
    result = length_debias(pairs, lambda key: len(content[key]), seed)
    kept = human + (result.pairs if debias else pairs)
    items = everything
    by_prompt: dict[int, list[tuple[str, str]]] = {}
    for (n, chosen), (_, rejected) in kept:
        by_prompt.setdefault(n, []).append((chosen, rejected))
    out = [
        PreferenceItem(items[n].input, items[n].responses, tuple(by_prompt[n]), {"category": list(items[n].category)})
        for n in sorted(by_prompt)
    ]
    stats = ExportStats(
        len(out), len(human) + len(pairs), len(kept), result.longer_before, result.shorter_before, result.equal
    )
    return out, stats
