"""The leaderboard's data: every evaluated model with its newest result, best first, and one model's history.

    board = standings(engine)            # [Standing], best Overall first, then models not evaluated yet
    view = model_view(engine, "rm-ab12") # the model's standing and every run of it, newest first
    leaderboard_json(board), model_json(view)   # what GET /api/leaderboard and /api/models/{id} answer

A model is on the board once it is registered or a run names it. Its figures are those of its newest
succeeded run (as `cheems status` shows); its newest run of any state gives the progress shown while
a run is going. A failed run keeps its reason (`error`). Numbers are the stored floats, unrounded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from evaluator.metrics import EvalResult, SubsetMetrics
from evaluator.report import from_json, to_json
from services.store import reads, registry, repository
from services.store.db import session_scope
from services.store.errors import UnknownModel
from services.store.models import Dataset, EvalRun, RegisteredModel


@dataclass(frozen=True)
class RunSummary:
    """One evaluation run of a model: its state, progress and, once succeeded, its metrics."""

    run_id: str
    model_id: str
    state: str  # "running", "succeeded" or "failed"
    created_at: datetime
    items_scored: int
    items_total: int
    bench_files: tuple[str, ...]
    semantics: str
    ece_bins: int
    result: EvalResult | None  # succeeded runs only
    error: str | None  # failed runs only

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "state": self.state,
            "created_at": self.created_at.isoformat(),
            "items_scored": self.items_scored,
            "items_total": self.items_total,
            "bench_files": list(self.bench_files),
            "semantics": self.semantics,
            "ece_bins": self.ece_bins,
            "overall": None if self.result is None else self.result.overall,
            "error": self.error,
        }


@dataclass(frozen=True)
class Standing:
    """A model on the board: its registry entry (None for a model only runs name), newest run and result."""

    model_id: str
    registered: RegisteredModel | None
    latest: RunSummary | None  # the newest run, whatever its state
    evaluated: RunSummary | None  # the newest succeeded run: where the figures come from

    @property
    def result(self) -> EvalResult | None:
        return None if self.evaluated is None else self.evaluated.result


@dataclass(frozen=True)
class ModelView:
    """A model's page: its standing, its rank among evaluated models (None if not evaluated), every run."""

    standing: Standing
    rank: int | None
    runs: list[RunSummary]  # newest first
    dataset: dict[str, Any] | None = None  # what it was trained on (registry.dataset_json), when a training made it


def summary(run: EvalRun, scored: int) -> RunSummary:
    """A stored run as a RunSummary (`scored`: its items with scores stored)."""
    result = from_json(run.result) if run.state == "succeeded" and run.result else None
    return RunSummary(
        run.id, run.model_id or "", run.state, run.created_at, scored, run.items_total,
        tuple(str(f) for f in run.bench_files), run.semantics, run.ece_bins, result, repository.run_failure(run),
    )  # fmt: skip


def rank_order(board: Sequence[Standing]) -> list[Standing]:
    """Evaluated models by Overall, best first (ties by id); then the others, a running one first, newest first."""
    done = sorted((s for s in board if s.result is not None), key=lambda s: (-_overall(s), s.model_id))
    rest = [s for s in board if s.result is None]
    rest.sort(key=lambda s: _since(s), reverse=True)
    rest.sort(key=lambda s: s.latest is not None and s.latest.state == "running", reverse=True)
    return done + rest


def standings(engine: Engine) -> list[Standing]:
    """Every model registered or named by a run, best first (`rank_order`)."""
    with session_scope(engine) as session:
        runs = reads.model_runs(session)
        scored = reads.scored_counts(session, [r.id for r in runs if r.state != "succeeded"])
        models = reads.models_by_id(session)
        summaries = [summary(r, scored.get(r.id, r.items_total if r.state == "succeeded" else 0)) for r in runs]
    by_model: dict[str, list[RunSummary]] = {model_id: [] for model_id in models}
    for run in summaries:  # oldest first: the last of each model is its newest
        by_model.setdefault(run.model_id, []).append(run)
    return rank_order([_standing(m, models.get(m), runs) for m, runs in by_model.items()])


def model_view(engine: Engine, model_id: str) -> ModelView:
    """The model's standing and run history; UnknownModel if it is neither registered nor evaluated."""
    with session_scope(engine) as session:
        runs = repository.runs_of_model(session, model_id)
        registered = reads.models_by_id(session, [model_id]).get(model_id)
        if registered is None and not runs:
            raise UnknownModel(f"no model {model_id!r}: it is neither registered nor named by an evaluation run")
        scored = reads.scored_counts(session, [r.id for r in runs])
        history = [summary(r, scored[r.id]) for r in runs]
        made_of = session.get(Dataset, registered.dataset_id) if registered and registered.dataset_id else None
        dataset = registry.dataset_json(made_of) if made_of is not None else None
    standing = _standing(model_id, registered, history)
    rank = None
    if standing.result is not None:
        evaluated = [s for s in standings(engine) if s.result is not None]
        rank = next((i for i, s in enumerate(evaluated, 1) if s.model_id == model_id), None)
    return ModelView(standing, rank, history[::-1], dataset)


def _standing(model_id: str, registered: RegisteredModel | None, runs: Sequence[RunSummary]) -> Standing:
    succeeded = [r for r in runs if r.result is not None]
    return Standing(model_id, registered, runs[-1] if runs else None, succeeded[-1] if succeeded else None)


def _overall(standing: Standing) -> float:
    return standing.result.overall if standing.result is not None else float("-inf")


def _since(standing: Standing) -> datetime:
    if standing.latest is not None:
        return standing.latest.created_at
    assert standing.registered is not None  # a model on the board has a run or a registry entry
    return standing.registered.created_at


# --- JSON (the documented API)


def subset_names(board: Sequence[Standing]) -> list[str]:
    """The subsets of every shown result, in the order they first appear down the board."""
    names: dict[str, None] = {}
    for standing in board:
        if standing.result is not None:
            names.update(dict.fromkeys(standing.result.subsets))
    return list(names)


def standing_json(standing: Standing, rank: int | None) -> dict[str, Any]:
    result, registered = standing.result, standing.registered
    subsets = {} if result is None else {name: _subset_json(s) for name, s in result.subsets.items()}
    return {
        "rank": rank,
        "model_id": standing.model_id,
        "registered": registered is not None,
        "dataset_recipe": registered.dataset_recipe if registered else None,
        "recipe": registered.recipe if registered else None,
        "state": registered.state if registered else None,  # the lifecycle: candidate ... production ... retired
        "aliases": ["production"] if registered is not None and registered.state == "production" else [],
        "tracking": registered.tracking if registered else None,  # where its training was reported (trainer.tracking)
        "overall": None if result is None else result.overall,
        "semantics": None if result is None else result.semantics.value,
        "subsets": subsets,
        "evaluated_run": None if standing.evaluated is None else standing.evaluated.run_id,
        "latest_run": None if standing.latest is None else standing.latest.to_json(),
    }


def leaderboard_json(board: Sequence[Standing]) -> dict[str, Any]:
    ranks = _ranks(board)
    rows = [standing_json(s, ranks.get(s.model_id)) for s in board]
    return {"subsets": subset_names(board), "models": rows}


def model_json(view: ModelView) -> dict[str, Any]:
    """The model's standing, full result (per-category figures included, as `cheems eval --json`) and runs."""
    result = view.standing.result
    return {
        **standing_json(view.standing, view.rank),
        "result": None if result is None else to_json(result),
        "runs": [run.to_json() for run in view.runs],
        "dataset": view.dataset,
    }


def _ranks(board: Sequence[Standing]) -> dict[str, int]:
    evaluated = [s for s in board if s.result is not None]
    return {s.model_id: i for i, s in enumerate(evaluated, 1)}


def _subset_json(subset: SubsetMetrics) -> dict[str, Any]:
    return {
        "accuracy": subset.accuracy,
        "exact_match": subset.exact_match,
        "ece": subset.ece,
        "prompts": subset.prompts,
        "pairs": subset.pairs,
    }
