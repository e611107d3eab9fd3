"""File-level annotation steps behind `cheems annotate ...`: each reads jsonl, calls the pure
modules, writes jsonl atomically, and returns statistics to print.

    simulate   bench (gold ranks) -> raw human triples or AI pairwise verdicts (`cheems resolve` input)
    judge      bench or raw file -> AI pairwise verdicts from an OpenAI-compatible endpoint
    distant    raw AI verdicts + RM rewards -> consistent rankings (bench layout)
    export     bench files -> CheemsPreference training file, the AI-annotated pairs length-debiased
    filter     bench file -> the same with rule-rejected responses removed
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from cheems.errors import CheemsError
from cheems.formats.cheemsbench import BenchItem, read_bench, write_bench
from cheems.formats.jsonl import write_objects
from cheems.formats.preference import write_preference
from cheems.formats.rewards_file import read_rewards
from services.annotation.algorithm.distant import distant_supervision
from services.annotation.algorithm.export import preference_items
from services.annotation.algorithm.filters import FilterConfig, reject_reason
from services.annotation.files.annotations import read_annotated
from services.annotation.judge.pairwise import ChatBackend, JudgeConfig, bias_stats, judge_responses
from services.annotation.simulation.answers import raw_line, simulate_ai, simulate_human


def simulate(bench: Path, out: Path, kind: str, noise: float, seed: int) -> int:
    items = read_bench(bench)
    lines = simulate_human(items, noise, seed) if kind == "human" else simulate_ai(items, noise, seed=seed)
    return write_objects(out, lines)


def judge(bench: Path, out: Path, backend: ChatBackend, config: JudgeConfig) -> dict[str, Any]:
    """AI verdicts for every pair of every prompt; errors are counted and left out, never guessed."""
    lines, judgments_all, lengths = [], [], {}
    for n, item in enumerate(tqdm(read_bench(bench), desc="judge", unit="prompt")):
        judged = judge_responses(
            item.input, [(r.id, r.content) for r in item.responses], backend, config, item.primary_category
        )
        lines.append(raw_line(item, [_as_annotation(j.relation()) for j in judged if j.relation()]))
        judgments_all += [type(j)(f"{n}/{j.first}", f"{n}/{j.second}", j.verdict, j.error) for j in judged]
        lengths.update({f"{n}/{r.id}": len(r.content) for r in item.responses})
    write_objects(out, lines)
    return asdict(bias_stats(judgments_all, lengths))


def distant(raw_ai: Path, rewards: Path, out: Path, margin: float, tie_margin: float) -> dict[str, Any]:
    scores = read_rewards(rewards)
    items, kept, dropped, conflicts = [], 0, 0, 0
    for prompt in read_annotated(raw_ai):
        try:
            by_id = {r.id: scores[(prompt.input, r.id)] for r in prompt.responses}
        except KeyError as e:
            raise CheemsError(
                f"{rewards}: no reward for response {e.args[0][1]!r} of prompt on line {prompt.line}"
            ) from None
        result = distant_supervision(prompt.relations, by_id, margin, tie_margin)
        kept, dropped, conflicts = (
            kept + len(result.kept),
            dropped + len(result.dropped),
            conflicts + result.resolution.conflicts,
        )
        ranked = tuple(r for r in prompt.responses if r.id in result.resolution.rank)
        if len({result.resolution.rank[r.id] for r in ranked}) >= 2:
            rank = {r.id: result.resolution.rank[r.id] for r in ranked}
            items.append(BenchItem(prompt.input, ranked, rank, prompt.category, prompt.to_bench_extra()))
    write_bench(out, items)
    return {"prompts": len(items), "edges_kept": kept, "edges_dropped": dropped, "conflicts_after": conflicts}


def export(benches: Sequence[Path], out: Path, debias: bool, seed: int, human: Sequence[Path] = ()) -> dict[str, Any]:
    """`benches`: AI-annotated rankings (length-debiased when `debias`); `human`: human rankings, taken as they are."""
    items = [item for path in benches for item in read_bench(path)]
    untouched = [item for path in human for item in read_bench(path)]
    preference, stats = preference_items(items, debias, seed, untouched)
    write_preference(out, preference)
    return asdict(stats)


def filter_bench(bench: Path, out: Path, config: FilterConfig) -> dict[str, int]:
    counts: Counter[str] = Counter()
    kept_items = []
    for item in read_bench(bench):
        reasons = {r.id: reject_reason(r.content, item.primary_category, config) for r in item.responses}
        counts.update(reason for reason in reasons.values() if reason)
        kept = tuple(r for r in item.responses if reasons[r.id] is None)
        if len({item.rank[r.id] for r in kept}) >= 2:
            kept_items.append(
                BenchItem(item.input, kept, {r.id: item.rank[r.id] for r in kept}, item.category, item.extra)
            )
    write_bench(out, kept_items)
    return {"prompts_kept": len(kept_items), **counts}


def _as_annotation(relation: Any) -> dict[str, Any]:
    if relation.tie:
        return {"equal": [relation.better, relation.worse]}
    return {"better": relation.better, "worse": relation.worse}


def dump(stats: dict[str, Any]) -> str:
    return json.dumps(stats, ensure_ascii=False, indent=2)
