"""Two models side by side: per-category differences, and the prompts where their rewards disagree most.

    deltas = category_deltas(result_a, result_b)          # pure: one row per (subset, category)
    worst = disagreements(items_a, items_b, limit=10)     # pure: prompts both runs scored, most disagreement first
    view = compare(engine, "rm-a", "rm-b", cache)         # from the store: each model's newest succeeded run

Differences are A minus B. A prompt's comparisons are its pairs of responses with different gold ranks
(as in the metrics); the models disagree on a comparison when exactly one of them orders it right
(reward of the better response strictly higher). Prompts are ordered by the share of their comparisons
in disagreement, then by how many, and only prompts with at least one disagreement are listed. The
prompt and response texts come from the runs' bench files; a run whose files cannot be read here any
more still gets its per-category differences, and `note` says why the prompts are missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from cheems.errors import CheemsError
from cheems.formats.cheemsbench import BenchItem, ranked_pairs
from evaluator.errors import NotEvaluated
from evaluator.evaluate import BenchCache, load_subsets
from evaluator.leaderboard.standings import RunSummary, model_view
from evaluator.metrics import CategoryMetrics, EvalResult
from evaluator.pipeline.runs import item_key
from services.store import repository
from services.store.db import session_scope

ItemKey = tuple[str, str, tuple[str, ...]]  # (subset, prompt, response ids): the same prompt in both runs


@dataclass(frozen=True)
class CategoryDelta:
    """One first-level category of one subset, in A and in B (None where a model has no figures for it)."""

    subset: str
    category: str
    a: CategoryMetrics | None
    b: CategoryMetrics | None

    @property
    def accuracy_difference(self) -> float | None:
        if self.a is None or self.b is None or self.a.accuracy is None or self.b.accuracy is None:
            return None
        return self.a.accuracy - self.b.accuracy

    @property
    def exact_match_difference(self) -> float | None:
        return None if self.a is None or self.b is None else self.a.exact_match - self.b.exact_match


@dataclass(frozen=True)
class ScoredItem:
    """A benchmark prompt and one model's rewards for its responses (by response id)."""

    subset: str
    item: str  # "<subset>:<index>" in the run
    bench: BenchItem
    rewards: Mapping[str, float]


@dataclass(frozen=True)
class Disagreement:
    """A prompt both models scored: its comparisons, how many they disagree on and how many each got right."""

    a: ScoredItem
    b: ScoredItem
    comparisons: int
    disagreements: int
    a_right: int
    b_right: int

    @property
    def share(self) -> float:
        return self.disagreements / self.comparisons if self.comparisons else 0.0


@dataclass(frozen=True)
class Comparison:
    a: RunSummary
    b: RunSummary
    deltas: list[CategoryDelta]
    disagreements: list[Disagreement]
    note: str | None  # why no prompts are listed, when their texts could not be read


def category_deltas(a: EvalResult, b: EvalResult) -> list[CategoryDelta]:
    """Every (subset, category) of either result: A's subsets in order, then B's others; categories sorted."""
    names = list(dict.fromkeys([*a.subsets, *b.subsets]))
    rows = []
    for name in names:
        sa, sb = a.subsets.get(name), b.subsets.get(name)
        categories = sorted({*(sa.per_category if sa else {}), *(sb.per_category if sb else {})})
        for category in categories:
            ca = sa.per_category.get(category) if sa else None
            cb = sb.per_category.get(category) if sb else None
            rows.append(CategoryDelta(name, category, ca, cb))
    return rows


def disagreement(a: ScoredItem, b: ScoredItem) -> Disagreement:
    """How the two models' rewards on one prompt agree on its gold comparisons."""
    ids = [r.id for r in a.bench.responses]
    ra, rb = [a.rewards.get(i, 0.0) for i in ids], [b.rewards.get(i, 0.0) for i in ids]
    pairs = ranked_pairs(a.bench.ranks())
    right_a = [ra[better] > ra[worse] for better, worse in pairs]
    right_b = [rb[better] > rb[worse] for better, worse in pairs]
    differ = sum(x != y for x, y in zip(right_a, right_b, strict=True))
    return Disagreement(a, b, len(pairs), differ, sum(right_a), sum(right_b))


def reward_positions(rewards: Mapping[str, float]) -> dict[str, int]:
    """Each response's place when the model's rewards are sorted, best first (1 + how many score higher)."""
    return {rid: 1 + sum(other > value for other in rewards.values()) for rid, value in rewards.items()}


def disagreements(a: Sequence[ScoredItem], b: Sequence[ScoredItem], limit: int) -> list[Disagreement]:
    """The `limit` prompts both scored where the models disagree most (none where they never disagree)."""
    theirs = {_key(item): item for item in b}
    found = [disagreement(item, theirs[_key(item)]) for item in a if _key(item) in theirs]
    found = [d for d in found if d.disagreements]
    found.sort(key=lambda d: (-d.share, -d.disagreements, d.a.subset, d.a.item))
    return found[:limit]


def scored_items(
    bench_files: Sequence[str], scores: Mapping[str, Mapping[str, float]], cache: BenchCache
) -> list[ScoredItem]:
    """A run's scored prompts with their bench records (read through `cache`); raises if a file cannot be read."""
    items = []
    for name, (_, records) in load_subsets(bench_files, cache).items():
        for index, record in enumerate(records):
            rewards = scores.get(item_key(name, index))
            if rewards is not None:
                items.append(ScoredItem(name, item_key(name, index), record, rewards))
    return items


def compare(engine: Engine, a_id: str, b_id: str, cache: BenchCache, limit: int = 10) -> Comparison:
    """Model A against model B, each by its newest succeeded run; UnknownModel (404) for a model the store
    does not know, NotEvaluated (409) for one without a finished evaluation."""
    run_a, run_b = _evaluated(engine, a_id), _evaluated(engine, b_id)
    assert run_a.result is not None and run_b.result is not None
    deltas = category_deltas(run_a.result, run_b.result)
    with session_scope(engine) as session:
        scores_a, scores_b = repository.run_scores(session, run_a.run_id), repository.run_scores(session, run_b.run_id)
    try:
        items_a = scored_items(run_a.bench_files, scores_a, cache)
        items_b = scored_items(run_b.bench_files, scores_b, cache)
    except (OSError, CheemsError) as e:  # moved, deleted or rewritten since the runs
        note = f"the prompts cannot be shown: the bench files of the runs cannot be read here ({e})"
        return Comparison(run_a, run_b, deltas, [], note)
    return Comparison(run_a, run_b, deltas, disagreements(items_a, items_b, limit), None)


def _evaluated(engine: Engine, model_id: str) -> RunSummary:
    standing = model_view(engine, model_id).standing
    if standing.evaluated is None:
        raise NotEvaluated(f"model {model_id!r} has no finished evaluation yet: nothing to compare")
    return standing.evaluated


def _key(item: ScoredItem) -> ItemKey:
    return item.subset, item.bench.input, tuple(r.id for r in item.bench.responses)


# --- JSON (the documented API)


def comparison_json(view: Comparison) -> dict[str, Any]:
    ra, rb = view.a.result, view.b.result
    assert ra is not None and rb is not None
    return {
        "a": {"model_id": view.a.model_id, "run_id": view.a.run_id, "overall": ra.overall},
        "b": {"model_id": view.b.model_id, "run_id": view.b.run_id, "overall": rb.overall},
        "overall_difference": ra.overall - rb.overall,
        "per_category": [_delta_json(d) for d in view.deltas],
        "disagreements": [_disagreement_json(d) for d in view.disagreements],
        "note": view.note,
    }


def _delta_json(delta: CategoryDelta) -> dict[str, Any]:
    def side(m: CategoryMetrics | None) -> dict[str, Any] | None:
        return None if m is None else {"accuracy": m.accuracy, "exact_match": m.exact_match, "ece": m.ece,
                                       "prompts": m.prompts, "pairs": m.pairs}  # fmt: skip

    return {
        "subset": delta.subset,
        "category": delta.category,
        "a": side(delta.a),
        "b": side(delta.b),
        "accuracy_difference": delta.accuracy_difference,
        "exact_match_difference": delta.exact_match_difference,
    }


def _disagreement_json(d: Disagreement) -> dict[str, Any]:
    bench = d.a.bench
    system = bench.extra.get("sys_prompt")
    places_a, places_b = reward_positions(d.a.rewards), reward_positions(d.b.rewards)
    return {
        "subset": d.a.subset,
        "item": d.a.item,
        "category": list(bench.category),
        "prompt": bench.input,
        "system_prompt": system if isinstance(system, str) and system else None,
        "comparisons": d.comparisons,
        "disagreements": d.disagreements,
        "a_right": d.a_right,
        "b_right": d.b_right,
        "responses": [
            {
                "id": r.id,
                "content": r.content,
                "rank": bench.rank[r.id],
                "a_score": d.a.rewards.get(r.id),
                "b_score": d.b.rewards.get(r.id),
                "a_place": places_a.get(r.id),
                "b_place": places_b.get(r.id),
            }
            for r in bench.responses
        ],
    }
