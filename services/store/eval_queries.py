"""Reads of evaluation runs across models, for the leaderboard (all SQL here; nothing is written).

    with session_scope(engine) as s:
        runs = model_runs(s)                          # every run of a model, oldest first
        scored = scored_counts(s, [r.id for r in runs])   # {run id: items scored}, one query

`repository.runs_of_model` and `repository.run_scores` serve one model's history and one run's scores.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.store.models import EvalRun, EvalScore, RegisteredModel


def model_runs(session: Session) -> list[EvalRun]:
    """Every evaluation run that names a model (registered or not), oldest first."""
    query = select(EvalRun).where(EvalRun.model_id.is_not(None)).order_by(EvalRun.created_at, EvalRun.id)
    return list(session.scalars(query))


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
