"""The model lifecycle in the store: a state per model, the `production` alias, every transition recorded.

    model, changes = register_checkpoint(session, "out/rm", None, actor="person:alice")   # candidate
    mark_evaluated(session, model.id, actor="policy:auto", details={"overall": 0.83})     # evaluated
    promote(session, model.id, actor="person:alice", reason="better on CheemsBench")     # production
    rollback(session, actor="person:alice")                                               # the one before
    reject(session, model_id, actor="policy:auto", reason="...", details={...})           # rejected

    candidate ──► evaluated ──► production ──(demoted)──► evaluated ──► retired
         └────────────┴──────► rejected

`production` names exactly one model. Every change of what it names locks its row first (FOR UPDATE on
PostgreSQL; on SQLite every writer already queues at BEGIN IMMEDIATE), so a promotion and a rollback at
the same time leave one production model and one history. A model is servable while it is retained:
candidates, evaluated models, production, and the last `RETAINED_PRODUCTION` former production models;
older former production models are retired by the promotion that pushes them out. Rejected and retired
models are not served (`unservable_reason` says why). Each function returns the transitions it recorded
(`Change`), which the caller announces on the models topic; a call that changes nothing returns [].
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.store import validate as v
from services.store.errors import Conflict, InvalidRecord, UnknownModel
from services.store.models import ModelAlias, ModelTransition, RegisteredModel, utcnow

PRODUCTION = "production"
ALIASES = (PRODUCTION,)
RETAINED_PRODUCTION = 3  # former production models kept servable (rollback targets, pinned clients)
SERVABLE = ("candidate", "evaluated", "production")
MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class Change:
    """One recorded transition, as announced on the models topic."""

    model_id: str
    action: str
    from_state: str | None
    to_state: str
    actor: str
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def check_model_id(model_id: str) -> str:
    """A model id as a client will name it: 1-64 letters, digits, '.', '_' or '-', and not an alias."""
    if not isinstance(model_id, str) or not MODEL_ID.match(model_id):
        raise InvalidRecord(f"model id: expected 1-64 letters, digits, '.', '_' or '-', got {str(model_id)[:80]!r}")
    if model_id in ALIASES:
        raise InvalidRecord(f"model id: {model_id!r} is an alias, not an id")
    return model_id


def record(
    session: Session, model: RegisteredModel, action: str, to_state: str, actor: str, reason: str = "", **details: Any
) -> Change:
    """Move `model` to `to_state` and keep the step in model_transitions."""
    before = None if action == "registered" else model.state
    change = Change(model.id, action, before, to_state, v.text("actor", actor), reason, dict(details))
    session.add(
        ModelTransition(
            model_id=model.id,
            action=action,
            from_state=before,
            to_state=to_state,
            actor=change.actor,
            reason=reason,
            details=v.json_value("details", change.details),
            at=utcnow(),
        )
    )
    model.state = to_state
    session.flush()
    return change


def register_checkpoint(
    session: Session, path: str, model_id: str | None, actor: str, reason: str = ""
) -> tuple[RegisteredModel, Change]:
    """Register a checkpoint directory trained anywhere, as a candidate (the caller checked that it scores)."""
    model_id = check_model_id(model_id) if model_id else "rm-" + uuid.uuid4().hex[:16]
    if session.get(RegisteredModel, model_id) is not None:
        raise Conflict(f"model id {model_id!r} is already registered")
    model = RegisteredModel(
        id=model_id, path=v.text("path", path), source="registered", state="candidate", created_at=utcnow()
    )
    session.add(model)
    session.flush()
    return model, record(session, model, "registered", "candidate", actor, reason, path=model.path)


def get_model(session: Session, model_id: str) -> RegisteredModel:
    model = session.get(RegisteredModel, v.key("model_id", model_id), populate_existing=True)
    if model is None:
        raise UnknownModel(f"no model {model_id!r}")
    return model


def resolve(session: Session, name: str) -> RegisteredModel:
    """The model an id or an alias names (UnknownModel when neither, or when the alias names nothing yet)."""
    if name in ALIASES:
        alias = session.get(ModelAlias, name, populate_existing=True)
        if alias is None or alias.model_id is None:
            raise UnknownModel(f"no model is {name} yet")
        return get_model(session, alias.model_id)
    return get_model(session, name)


def production(session: Session) -> RegisteredModel | None:
    alias = session.get(ModelAlias, PRODUCTION, populate_existing=True)
    return None if alias is None or alias.model_id is None else get_model(session, alias.model_id)


def aliases(session: Session) -> dict[str, list[str]]:
    """{model id: [its aliases]}."""
    found: dict[str, list[str]] = {}
    for alias in session.scalars(select(ModelAlias).where(ModelAlias.model_id.is_not(None))):
        found.setdefault(str(alias.model_id), []).append(alias.alias)
    return found


def unservable_reason(model: RegisteredModel) -> str:
    """Why a model is not served ("" when it is): rejected or retired, with the step that made it so."""
    return "" if model.state in SERVABLE else f"model {model.id!r} was {model.state}"


def mark_evaluated(session: Session, model_id: str, actor: str, reason: str = "", **details: Any) -> list[Change]:
    """candidate -> evaluated (its CheemsBench figures in `details`); any other state is left as it is."""
    model = get_model(session, model_id)
    if model.state != "candidate":
        return []
    return [record(session, model, "evaluated", "evaluated", actor, reason, **details)]


def promote(session: Session, model_id: str, actor: str, reason: str = "", force: bool = False) -> list[Change]:
    """Make `model_id` production; the previous one is demoted (servable, a rollback target)."""
    alias = _lock(session)
    model = get_model(session, model_id)
    if alias.model_id == model.id:
        return []
    if model.state not in SERVABLE and not force:
        raise Conflict(f"model {model.id!r} is {model.state}: promoting it needs force (--force)")
    return _hand_over(session, alias, model, "promoted", actor, reason)


def rollback(session: Session, actor: str, reason: str = "") -> list[Change]:
    """Production returns to the model that was production before the current one (a second rollback returns
    to the current one again, as `kubectl rollout undo` does); rejected or retired ones are skipped."""
    alias = _lock(session)
    if alias.model_id is None:
        raise Conflict("no model is production: nothing to roll back")
    previous = _previous_production(session, alias.model_id)
    if previous is None:
        raise Conflict(f"no earlier production model to return to from {alias.model_id!r}")
    return _hand_over(session, alias, previous, "rolled_back", actor, reason or f"rolled back from {alias.model_id}")


def reject(session: Session, model_id: str, actor: str, reason: str, **details: Any) -> list[Change]:
    """A model that failed (the gate's figures in `details`) or that a person refused; never the production one."""
    if not reason.strip():
        raise InvalidRecord("reason: say why the model is rejected")
    alias = _lock(session)
    model = get_model(session, model_id)
    if alias.model_id == model.id:
        raise Conflict(f"model {model.id!r} is production: promote another model or roll back first")
    if model.state == "rejected":
        return []
    return [record(session, model, "rejected", "rejected", actor, reason, **details)]


def transitions(session: Session, model_id: str | None = None, limit: int = 100) -> list[ModelTransition]:
    """The newest steps first, of one model or of all."""
    query = select(ModelTransition).order_by(ModelTransition.id.desc()).limit(limit)
    if model_id is not None:
        query = query.where(ModelTransition.model_id == model_id)
    return list(session.scalars(query))


def _lock(session: Session) -> ModelAlias:
    alias = session.scalar(
        select(ModelAlias)
        .where(ModelAlias.alias == PRODUCTION)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if alias is None:  # a database whose row was deleted by hand: make it again
        alias = ModelAlias(alias=PRODUCTION, model_id=None, updated_at=utcnow())
        session.add(alias)
        session.flush()
    return alias


def _hand_over(
    session: Session, alias: ModelAlias, model: RegisteredModel, action: str, actor: str, reason: str
) -> list[Change]:
    changes = []
    if alias.model_id is not None:
        old = get_model(session, alias.model_id)
        changes.append(record(session, old, "demoted", "evaluated", actor, f"{model.id} became production"))
    changes.append(record(session, model, action, PRODUCTION, actor, reason))
    alias.model_id, alias.updated_at = model.id, utcnow()
    session.flush()
    return changes + _retire_former(session, actor)


def _previous_production(session: Session, current: str) -> RegisteredModel | None:
    holders = session.scalars(
        select(ModelTransition.model_id)
        .where(ModelTransition.to_state == PRODUCTION)
        .order_by(ModelTransition.id.desc())
    )
    for model_id in holders:
        if model_id != current and (model := get_model(session, model_id)).state in SERVABLE:
            return model
    return None


def _retire_former(session: Session, actor: str) -> list[Change]:
    """Retire the former production models past the newest RETAINED_PRODUCTION (by when they left it)."""
    left = session.scalars(
        select(ModelTransition.model_id).where(ModelTransition.action == "demoted").order_by(ModelTransition.id.desc())
    )
    former: list[RegisteredModel] = []
    for model_id in dict.fromkeys(left):  # each model once, at its latest demotion
        model = get_model(session, model_id)
        if model.state == "evaluated":
            former.append(model)
    reason = f"more than {RETAINED_PRODUCTION} former production models are kept servable"
    return [record(session, m, "retired", "retired", actor, reason) for m in former[RETAINED_PRODUCTION:]]
