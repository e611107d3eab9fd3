"""The registry's rows as cheems.v1 training messages (Dataset, Training, Model), for replies and events."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from cheems.v1 import training_pb2
from services.store.lifecycle import Change
from services.store.models import Dataset, RegisteredModel, Training

STATES = {
    "pending": training_pb2.TRAINING_STATE_PENDING,
    "running": training_pb2.TRAINING_STATE_RUNNING,
    "succeeded": training_pb2.TRAINING_STATE_SUCCEEDED,
    "failed": training_pb2.TRAINING_STATE_FAILED,
    "cancelled": training_pb2.TRAINING_STATE_CANCELLED,
}


def timestamp(when: datetime | None) -> Timestamp:
    stamp = Timestamp()
    if when is not None:
        stamp.FromDatetime(when if when.tzinfo else when.replace(tzinfo=UTC))  # SQLite returns naive UTC
    return stamp


def dataset_message(row: Dataset) -> training_pb2.Dataset:
    return training_pb2.Dataset(
        dataset_id=row.id,
        recipe=row.recipe,
        path=row.path,
        prompts=row.prompts,
        pairs=row.pairs,
        rankings=row.rankings,
        supervisor_model_id=row.supervisor_model_id or "",
        created_at=timestamp(row.created_at),
    )


def training_message(row: Training) -> training_pb2.Training:
    message = training_pb2.Training(
        training_id=row.id,
        dataset_id=row.dataset_id,
        recipe=row.recipe,
        overrides={k: str(v) for k, v in (row.overrides or {}).items()},
        state=STATES[row.state],
        launcher=row.launcher,
        step=row.step,
        total_steps=row.total_steps,
        model_id=row.model_id or "",
        error=row.error or "",
        out_dir=row.out_dir,
        created_at=timestamp(row.created_at),
        updated_at=timestamp(row.updated_at),
    )
    if row.loss is not None:
        message.loss = row.loss
    if row.overall is not None:
        message.overall = row.overall
    return message


def model_message(row: RegisteredModel, aliases: Sequence[str] = ()) -> training_pb2.Model:
    message = training_pb2.Model(
        model_id=row.id,
        path=row.path,
        dataset_id=row.dataset_id or "",
        recipe=row.recipe or "",
        dataset_recipe=row.dataset_recipe or "",
        training_id=row.training_id or "",
        created_at=timestamp(row.created_at),
        state=row.state,
        aliases=list(aliases),
        source=row.source,
    )
    if row.overall is not None:
        message.overall = row.overall
    return message


def change_message(change: Change) -> training_pb2.ModelChange:
    return training_pb2.ModelChange(
        model_id=change.model_id,
        action=change.action,
        from_state=change.from_state or "",
        to_state=change.to_state,
        actor=change.actor,
        reason=change.reason,
        details_json=json.dumps(change.details, ensure_ascii=False, sort_keys=True),
    )
