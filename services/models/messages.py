"""The registry's models as cheems.v1 messages: a Model (with its state and aliases) and a step of its lifecycle."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp

from cheems.v1 import training_pb2
from services.store.lifecycle import Change
from services.store.models import RegisteredModel


def timestamp(when: datetime | None) -> Timestamp:
    stamp = Timestamp()
    if when is not None:
        stamp.FromDatetime(when if when.tzinfo else when.replace(tzinfo=UTC))  # SQLite returns naive UTC
    return stamp


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
