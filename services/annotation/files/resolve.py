"""`cheems resolve`: raw annotations file -> CheemsBench file with ranks, plus statistics.

Lines annotating the same prompt are resolved together, as one graph (`read_annotated` merges them).
A response that ends up in no relation (discarded, or never annotated) has no rank and is left out
of the bench line; a prompt left with fewer than two ranked responses is left out entirely. Both are
counted in the statistics (`unranked_responses`, `skipped_prompts`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from cheems.formats.cheemsbench import BenchItem, write_bench
from services.annotation.algorithm.resolve import resolve
from services.annotation.files.annotations import AnnotatedPrompt, read_annotated


@dataclass
class ResolveStats:
    prompts: int = 0
    annotations: int = 0
    relations: int = 0
    conflicts: int = 0
    merged_nodes: int = 0
    skipped_prompts: int = 0
    unranked_responses: int = 0

    @property
    def conflict_ratio(self) -> float:
        return self.conflicts / self.relations if self.relations else 0.0

    def contract(self) -> dict[str, float | int]:
        """STATS.json: the fields other tools read."""
        return {
            "prompts": self.prompts,
            "annotations": self.annotations,
            "conflict_ratio": self.conflict_ratio,
            "merged_nodes": self.merged_nodes,
            "skipped_prompts": self.skipped_prompts,
            "unranked_responses": self.unranked_responses,
        }


def resolve_prompt(prompt: AnnotatedPrompt, stats: ResolveStats) -> BenchItem | None:
    result = resolve(prompt.relations)
    stats.prompts += 1
    stats.annotations += prompt.annotations
    stats.relations += result.relations
    stats.conflicts += result.conflicts
    stats.merged_nodes += result.merged_nodes
    ranked = tuple(r for r in prompt.responses if r.id in result.rank)
    stats.unranked_responses += len(prompt.responses) - len(ranked)
    if len({result.rank[r.id] for r in ranked}) < 2:
        stats.skipped_prompts += 1
        return None
    rank = {r.id: result.rank[r.id] for r in ranked}
    return BenchItem(prompt.input, ranked, rank, prompt.category, prompt.to_bench_extra())


def resolve_file(source: str | Path, out: str | Path, stats_path: str | Path | None = None) -> ResolveStats:
    """Read, resolve every prompt, then write the bench file (and stats) only once all succeeded."""
    stats = ResolveStats()
    items = [item for p in read_annotated(source) if (item := resolve_prompt(p, stats)) is not None]
    write_bench(out, items)
    if stats_path is not None:
        Path(stats_path).write_text(json.dumps(stats.contract(), indent=2) + "\n", encoding="utf-8")
    return stats
