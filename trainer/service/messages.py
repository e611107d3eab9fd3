"""The registry's rows as cheems.v1 training messages (Dataset, Training), for replies and events; models' are
`services.models.messages`."""

from __future__ import annotations

from cheems.v1 import training_pb2
from services.models.messages import timestamp
from services.store.models import Dataset, Training

STATES = {
    "pending": training_pb2.TRAINING_STATE_PENDING,
    "running": training_pb2.TRAINING_STATE_RUNNING,
    "succeeded": training_pb2.TRAINING_STATE_SUCCEEDED,
    "failed": training_pb2.TRAINING_STATE_FAILED,
    "cancelled": training_pb2.TRAINING_STATE_CANCELLED,
}


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
        details=row.details or {},
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
        requested_by=row.requested_by or "",
    )
    if row.loss is not None:
        message.loss = row.loss
    if row.overall is not None:
        message.overall = row.overall
    return message
