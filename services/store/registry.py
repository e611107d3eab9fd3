"""The training registry in the store: datasets, trainings and the models they registered (all SQL here).

    dataset, created = add_dataset(session, sha256, "human", path, prompts=80, pairs=400, rankings=80)
    training = create_training(session, dataset.id, "tiny-cpu", {"epochs": "2"}, "local", "out/trainings/ab12")
    update_training(session, training.id, state="running", step=3, total_steps=20, loss=0.61)
    model, created = register_model(session, training.id, "out/trainings/ab12/model", overall=0.71)

Every write is idempotent where a consumer may repeat it: the same dataset content, or the same
training's model, is stored once. A model's id is "rm-" + its training's id.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.store import lifecycle
from services.store import validate as v
from services.store.errors import InvalidRecord, UnknownDataset, UnknownTraining
from services.store.models import (
    LAUNCHERS,
    TRAINING_STATES,
    Dataset,
    EvalRun,
    Ranking,
    RegisteredModel,
    Training,
    utcnow,
)

ENDED = ("succeeded", "failed", "cancelled")
_PROGRESS = {"state", "handle", "step", "total_steps", "loss", "overall", "model_id", "error", "tracking"}


def add_dataset(
    session: Session,
    dataset_id: str,
    recipe: str,
    path: str,
    prompts: int,
    pairs: int,
    rankings: int,
    supervisor_model_id: str | None = None,
    details: dict[str, Any] | None = None,
) -> tuple[Dataset, bool]:
    """Store a dataset unless its content hash is known; (the stored dataset, whether this call stored it)."""
    v.sha256_hex("dataset_id", dataset_id)
    if (known := session.get(Dataset, dataset_id)) is not None:
        return known, False
    dataset = Dataset(
        id=dataset_id,
        recipe=v.key("recipe", recipe),
        path=v.text("path", path),
        prompts=v.count("prompts", prompts),
        pairs=v.count("pairs", pairs),
        rankings=v.count("rankings", rankings),
        supervisor_model_id=supervisor_model_id or None,
        created_at=utcnow(),
        details=details,
    )
    session.add(dataset)
    session.flush()
    return dataset, True


def get_dataset(session: Session, dataset_id: str) -> Dataset:
    if (dataset := session.get(Dataset, v.key("dataset_id", dataset_id))) is None:
        raise UnknownDataset(f"no dataset {dataset_id!r}")
    return dataset


def dataset_json(dataset: Dataset) -> dict[str, Any]:
    """A stored dataset as `cheems status --json` and the leaderboard's model API show it; `details` is how it was
    made (trainer.datasets.build.dataset_details; None for datasets stored before revision 0009)."""
    return {
        "id": dataset.id,
        "recipe": dataset.recipe,
        "prompts": dataset.prompts,
        "pairs": dataset.pairs,
        "rankings": dataset.rankings,
        "supervisor_model_id": dataset.supervisor_model_id,
        "created_at": dataset.created_at.isoformat(),
        "details": dataset.details,
    }


def list_datasets(session: Session) -> list[Dataset]:
    """Newest first."""
    return list(session.scalars(select(Dataset).order_by(Dataset.created_at.desc(), Dataset.id)))


def rankings_since_last_dataset(session: Session) -> int:
    """Rankings resolved (or resolved again) after the newest dataset was made: all of them before the first."""
    newest = session.scalar(select(func.max(Dataset.created_at)))
    query = select(func.count()).select_from(Ranking)
    if newest is not None:
        query = query.where(Ranking.resolved_at > newest)
    return int(session.scalar(query) or 0)


def create_training(
    session: Session,
    dataset_id: str,
    recipe: str,
    overrides: Mapping[str, str],
    launcher: str,
    out_dir: str,
    requested_by: str | None = None,
) -> Training:
    """Record a new training, state "pending"; `requested_by`: who asked (person:NAME, service:NAME, policy:auto)."""
    get_dataset(session, dataset_id)
    training_id = uuid.uuid4().hex[:16]
    training = Training(
        id=training_id,
        dataset_id=dataset_id,
        recipe=v.key("recipe", recipe),
        overrides={v.key("overrides", k): v.text(f"overrides.{k}", val) for k, val in overrides.items()},
        launcher=v.one_of("launcher", launcher, LAUNCHERS),
        out_dir=v.text("out_dir", out_dir.replace("{id}", training_id)),
        requested_by=requested_by,
        state="pending",
        step=0,
        total_steps=0,
        created_at=utcnow(),
        updated_at=utcnow(),
    )
    session.add(training)
    session.flush()
    return training


def get_training(session: Session, training_id: str) -> Training:
    if (training := session.get(Training, v.key("training_id", training_id))) is None:
        raise UnknownTraining(f"no training {training_id!r}")
    return training


def list_trainings(session: Session, states: Iterable[str] | None = None) -> list[Training]:
    """Newest first; only those in `states` when given."""
    query = select(Training).order_by(Training.created_at.desc(), Training.id)
    if states is not None:
        query = query.where(Training.state.in_([v.one_of("state", s, TRAINING_STATES) for s in states]))
    return list(session.scalars(query))


def update_training(session: Session, training_id: str, **changes: Any) -> Training:
    """Set progress or state fields (state, handle, step, total_steps, loss, overall, model_id, error, tracking:
    {backend: run id} of the runs the trainer reports to).

    An ended training (succeeded, failed, cancelled) keeps its state: a late progress report is ignored."""
    unknown = set(changes) - _PROGRESS
    if unknown:
        raise InvalidRecord(f"update_training: not a progress field: {', '.join(sorted(unknown))}")
    training = get_training(session, training_id)
    if training.state in ENDED:
        return training
    if "state" in changes:
        v.one_of("state", changes["state"], TRAINING_STATES)
    if "tracking" in changes:
        changes["tracking"] = tracking_ids(changes["tracking"])
    for name, value in changes.items():
        setattr(training, name, value)
    training.updated_at = utcnow()
    return training


def tracking_ids(value: Any) -> dict[str, str] | None:
    """{backend: id} checked (short text keys and values), None for nothing; InvalidRecord naming `tracking`."""
    if not value:
        return None
    if not isinstance(value, Mapping) or len(value) > 16:
        raise InvalidRecord("tracking: expected an object of at most 16 backends, each naming its run")
    return {v.key("tracking", str(k)): v.text(f"tracking.{k}", str(i))[:1000] for k, i in value.items()}


def register_model(
    session: Session, training_id: str, path: str, overall: float | None, tracking: Mapping[str, str] | None = None
) -> tuple[RegisteredModel, bool]:
    """Register the model a training exported and mark the training succeeded; idempotent per training. `tracking`:
    the runs that reported it (its metadata's), else those its training recorded."""
    training = get_training(session, training_id)
    model_id = "rm-" + training.id
    if (known := session.get(RegisteredModel, model_id)) is not None:
        return known, False
    dataset = get_dataset(session, training.dataset_id)
    model = RegisteredModel(
        id=model_id,
        path=v.text("path", path),
        dataset_id=dataset.id,
        recipe=training.recipe,
        dataset_recipe=dataset.recipe,
        training_id=training.id,
        overall=overall,
        created_at=utcnow(),
        state="candidate",
        source="training",
        tracking=tracking_ids(tracking) or training.tracking,
    )
    session.add(model)
    training.state, training.model_id, training.updated_at = "succeeded", model_id, utcnow()
    session.flush()
    lifecycle.record(session, model, "registered", "candidate", "training", f"trained by {training.id}", path=path)
    return model, True


get_model = lifecycle.get_model  # the model of an id, or UnknownModel


def list_models(session: Session) -> list[RegisteredModel]:
    """Newest first."""
    return list(session.scalars(select(RegisteredModel).order_by(RegisteredModel.created_at.desc())))


def model_results(session: Session) -> dict[str, tuple[datetime, float]]:
    """{model id: (when, CheemsBench overall)} of each model's newest succeeded evaluation run."""
    rows = session.execute(
        select(EvalRun.model_id, EvalRun.created_at, EvalRun.result)
        .where(EvalRun.model_id.is_not(None), EvalRun.state == "succeeded")
        .order_by(EvalRun.created_at)
    )
    results: dict[str, tuple[datetime, float]] = {}
    for model_id, created_at, result in rows:
        overall = (result or {}).get("overall")
        if isinstance(overall, (int, float)):
            results[str(model_id)] = (created_at, float(overall))
    return results


def human_trained_models(session: Session) -> list[RegisteredModel]:
    """The models trained on human rankings only (dataset recipe `human`) and not rejected, newest first: the
    supervisors distant supervision may use."""
    human = RegisteredModel.dataset_recipe == "human"
    query = select(RegisteredModel).where(human, RegisteredModel.state != "rejected")
    return list(session.scalars(query.order_by(RegisteredModel.created_at.desc())))


def best_model(session: Session) -> RegisteredModel | None:
    """The model with the best CheemsBench overall of its newest evaluation; the newest model when none was
    evaluated; None before the first."""
    results = model_results(session)
    if results:
        best = max(results, key=lambda m: (results[m][1], results[m][0]))
        return session.get(RegisteredModel, best)
    models = list_models(session)
    return models[0] if models else None


def stage_counts(session: Session) -> dict[str, int]:
    """How much each stage of the loop holds: samples (prompts), annotations, rankings, datasets, trainings, models."""
    from services.store.models import Annotation, Prompt

    tables = {"samples": Prompt, "annotations": Annotation, "rankings": Ranking, "datasets": Dataset,
              "trainings": Training, "models": RegisteredModel}  # fmt: skip
    return {name: int(session.scalar(select(func.count()).select_from(table)) or 0) for name, table in tables.items()}


def list_runs(session: Session, limit: int = 50) -> list[EvalRun]:
    """The newest evaluation runs, newest first."""
    return list(session.scalars(select(EvalRun).order_by(EvalRun.created_at.desc()).limit(limit)))
