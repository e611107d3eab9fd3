"""Model lifecycle operations for people and policies: each step stored and announced in one transaction.

    models = ModelLifecycle(engine)
    model = models.register("/models/qwen-rm", None, actor="person:ann")   # refused unless it loads and scores
    models.promote(model.id, actor="person:ann", reason="checked by hand")
    models.rollback(actor="person:ann")
    models.reject("rm-x", actor="person:ann", reason="scores collapse on long answers")
    models.listing()                                                         # [(row, aliases)], newest first

Every step's ModelEvent (cheems.models.v1: the model as it is after the step, and the step) is written to
the store's outbox in the transaction of the step, so a recorded step is always announced, at least once,
by the outbox relay of the models' topic (the training service runs it: `services.bus.topics.RELAYED_BY`).
The steps themselves, their rules and their locking: `services.store.lifecycle`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.v1 import events_pb2
from services.bus import topics
from services.bus.codec import encode
from services.models.checkpoint import check_checkpoint
from services.models.messages import change_message, model_message
from services.store import lifecycle, outbox
from services.store.db import session_scope
from services.store.lifecycle import Change
from services.store.models import RegisteredModel

log = logging.getLogger(__name__)


class ModelLifecycle:
    """The lifecycle of the store's models, each step with its event (see the module docstring)."""

    def __init__(self, engine: Engine, check: Callable[[str], Any] = check_checkpoint) -> None:
        self.engine, self.check = engine, check

    def register(self, path: str, model_id: str | None, actor: str, reason: str = "") -> RegisteredModel:
        self.check(path)
        with session_scope(self.engine) as session:
            path = str(Path(path).resolve())  # the scorer and the evaluator read it from elsewhere
            model, change = lifecycle.register_checkpoint(session, path, model_id, actor, reason)
            announce(session, [change])
        log.info("registered %s from %s (%s)", model.id, path, actor)
        return model

    def promote(self, model_id: str, actor: str, reason: str = "", force: bool = False) -> list[Change]:
        return self.apply(lambda s: lifecycle.promote(s, model_id, actor, reason, force))

    def rollback(self, actor: str, reason: str = "") -> list[Change]:
        return self.apply(lambda s: lifecycle.rollback(s, actor, reason))

    def reject(self, model_id: str, actor: str, reason: str, **details: Any) -> list[Change]:
        return self.apply(lambda s: lifecycle.reject(s, model_id, actor, reason, **details))

    def mark_evaluated(self, model_id: str, actor: str, **details: Any) -> list[Change]:
        return self.apply(lambda s: lifecycle.mark_evaluated(s, model_id, actor, **details))

    def production(self) -> RegisteredModel | None:
        with session_scope(self.engine) as session:
            return lifecycle.production(session)

    def listing(self) -> list[tuple[RegisteredModel, list[str]]]:
        """Every model, newest first, with its aliases."""
        from services.store import registry

        with session_scope(self.engine) as session:
            names = lifecycle.aliases(session)
            return [(m, names.get(m.id, [])) for m in registry.list_models(session)]

    def apply(self, step: Callable[[Session], list[Change]]) -> list[Change]:
        """Run `step` (store steps in a session) and announce what it recorded, in one transaction."""
        with session_scope(self.engine) as session:
            changes = step(session)
            announce(session, changes)
        for change in changes:
            log.info("model %s: %s -> %s by %s (%s)", change.model_id, change.from_state, change.to_state,
                     change.actor, change.reason)  # fmt: skip
        return changes


def announce(session: Session, changes: list[Change]) -> None:
    """Queue one ModelEvent per step in the outbox, in the step's transaction."""
    names = lifecycle.aliases(session)
    for change in changes:
        model = lifecycle.get_model(session, change.model_id)
        event = events_pb2.ModelEvent(
            header=events_pb2.EventHeader(producer="lifecycle"),
            model=model_message(model, names.get(model.id, [])),
            change=change_message(change),
        )
        outbox.add(session, topics.MODELS, model.id, encode(topics.MODELS, event).value)
