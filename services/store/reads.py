"""Reads across many rows, nothing written: evaluation runs for the leaderboard, and what the store holds of a
set of acknowledged writes (the chaos soak's audit, `system.soak.checks`).

    with session_scope(engine) as s:
        runs = model_runs(s)                          # every run of a model, oldest first
        scored = scored_counts(s, [r.id for r in runs])   # {run id: items scored}, one query
        ids = prompt_ids(s, texts)                    # {prompt text: the ids of the prompts with that text}
    tasks = state_counts(engine, "tasks")             # {"open": 3, "done": 5}: the services' /metrics gauges

`repository.runs_of_model` and `repository.run_scores` serve one model's history and one run's scores;
`bench_rewards(s, model_id)` the distribution of the rewards a model gave on its newest finished evaluation (the
scorer's reward watch compares what it serves with it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.store.db import read_scope
from services.store.models import (
    MODEL_STATES,
    RUN_STATES,
    TASK_STATUSES,
    TRAINING_STATES,
    Annotation,
    AnnotationTask,
    EvalRun,
    EvalScore,
    Prompt,
    Ranking,
    RegisteredModel,
    Training,
)

# what `state_counts` counts: annotation tasks by status, trainings, evaluation runs, registered models by stage
STATE_COLUMNS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "tasks": (AnnotationTask.status, TASK_STATUSES),
    "trainings": (Training.state, TRAINING_STATES),
    "runs": (EvalRun.state, RUN_STATES),
    "models": (RegisteredModel.state, MODEL_STATES),
}


def state_counts(engine: Engine, kind: str) -> dict[str, int]:
    """{state: rows in it} of `kind` (a key of STATE_COLUMNS), every known state included: one GROUP BY, read at
    each scrape of a service's /metrics."""
    column, states = STATE_COLUMNS[kind]
    with read_scope(engine) as session:
        found = {str(state): int(n) for state, n in session.execute(select(column, func.count()).group_by(column))}
    return {**dict.fromkeys(states, 0), **found}


def model_runs(session: Session) -> list[EvalRun]:
    """Every evaluation run that names a model (registered or not), oldest first."""
    query = select(EvalRun).where(EvalRun.model_id.is_not(None)).order_by(EvalRun.created_at, EvalRun.id)
    return list(session.scalars(query))


@dataclass(frozen=True)
class BenchRewards:
    """The rewards a model gave on one evaluation run: how many, their mean and population standard deviation."""

    run_id: str
    count: int
    mean: float
    std: float


def bench_rewards(session: Session, model_id: str) -> BenchRewards | None:
    """The distribution of every reward `model_id` gave on its newest succeeded evaluation run (the scores stored
    per prompt, each response once); None when it has no such run, or the run stored no finite score."""
    query = (
        select(EvalRun.id)
        .where(EvalRun.model_id == model_id, EvalRun.state == "succeeded")
        .order_by(EvalRun.created_at.desc(), EvalRun.id.desc())
        .limit(1)
    )
    run_id = session.scalar(query)
    if run_id is None:
        return None
    values = [
        float(v)
        for scores in session.scalars(select(EvalScore.scores).where(EvalScore.run_id == run_id))
        for v in scores
        if isinstance(v, (int, float)) and math.isfinite(v)
    ]
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    return BenchRewards(str(run_id), len(values), mean, std)


def scored_counts(session: Session, run_ids: Iterable[str]) -> dict[str, int]:
    """{run id: how many of its items have their scores stored} for `run_ids` (0 for a run with none)."""
    ids = sorted(set(run_ids))
    if not ids:
        return {}
    query = select(EvalScore.run_id, func.count()).where(EvalScore.run_id.in_(ids)).group_by(EvalScore.run_id)
    counts = {run_id: 0 for run_id in ids}
    counts.update({str(run_id): int(n) for run_id, n in session.execute(query)})
    return counts


def models_by_id(session: Session, model_ids: Iterable[str] | None = None) -> dict[str, RegisteredModel]:
    """The registered models among `model_ids` (all of them when None), by id."""
    query = select(RegisteredModel)
    if model_ids is not None:
        ids = sorted(set(model_ids))
        if not ids:
            return {}
        query = query.where(RegisteredModel.id.in_(ids))
    return {model.id: model for model in session.scalars(query)}


def prompt_ids(session: Session, texts: Iterable[str]) -> dict[str, list[str]]:
    """{text: the ids of the stored prompts with that text} for `texts` (an empty list for a text not stored)."""
    wanted = sorted(set(texts))
    found: dict[str, list[str]] = {text: [] for text in wanted}
    for chunk in _chunks(wanted):
        for prompt_id, text in session.execute(select(Prompt.id, Prompt.text).where(Prompt.text.in_(chunk))):
            found[text].append(prompt_id)
    return found


def task_groups(session: Session, prompt_ids: Iterable[str]) -> dict[str, list[tuple[tuple[str, ...], int]]]:
    """{prompt id: (its task's responses, copy) for every task of the prompt} (an empty list for a prompt with none)."""
    wanted = sorted(set(prompt_ids))
    found: dict[str, list[tuple[tuple[str, ...], int]]] = {prompt_id: [] for prompt_id in wanted}
    for chunk in _chunks(wanted):
        query = select(AnnotationTask.prompt_id, AnnotationTask.response_keys, AnnotationTask.copy)
        for prompt_id, keys, copy in session.execute(query.where(AnnotationTask.prompt_id.in_(chunk))):
            found[prompt_id].append((tuple(sorted(keys)), int(copy)))
    return found


def annotations_by_id(session: Session, ids: Iterable[str]) -> dict[str, bool]:
    """{annotation id: whether it counts (not voided)} for the stored ones among `ids`."""
    found: dict[str, bool] = {}
    for chunk in _chunks(sorted(set(ids))):
        query = select(Annotation.id, Annotation.voided_at).where(Annotation.id.in_(chunk))
        found.update({str(i): voided is None for i, voided in session.execute(query)})
    return found


def ranked_prompts(session: Session) -> set[str]:
    """The ids of every prompt with a resolved ranking."""
    return {str(prompt_id) for prompt_id in session.scalars(select(Ranking.prompt_id))}


def _chunks(values: list[str], size: int = 500) -> Iterable[list[str]]:
    """`values` in slices small enough for one IN (...) on every database."""
    for start in range(0, len(values), size):
        yield values[start : start + size]
