"""Build training data: rankings -> CheemsPreference pairs, length-debiased, written deterministically."""

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
    items: Sequence[BenchItem], debias: bool = True, seed: int = 0
) -> tuple[list[PreferenceItem], ExportStats]:
    """Every ranked pair (better, worse) of each item; optionally balanced for length across the whole set."""
    pairs = []
    for n, item in enumerate(items):
        ids = [r.id for r in item.responses]
        pairs += [((n, ids[b]), (n, ids[w])) for b, w in ranked_pairs(item.ranks())]
    content = {(n, r.id): r.content for n, item in enumerate(items) for r in item.responses}
    result = length_debias(pairs, lambda key: len(content[key]), seed)
    kept = result.pairs if debias else pairs
    by_prompt: dict[int, list[tuple[str, str]]] = {}
    for (n, chosen), (_, rejected) in kept:
        by_prompt.setdefault(n, []).append((chosen, rejected))
    out = [
        PreferenceItem(items[n].input, items[n].responses, tuple(by_prompt[n]), {"category": list(items[n].category)})
        for n in sorted(by_prompt)
    ]
    stats = ExportStats(len(out), len(pairs), len(kept), result.longer_before, result.shorter_before, result.equal)
    return out, stats
