"""The event outbox: events written in the transaction of the change they announce, relayed in order after it.

A change and its event commit together, so a stored change always has its event waiting; a relay publishes
the waiting events oldest first and deletes them once the broker has acknowledged them (at-least-once: a
relay that dies between the acknowledgement and the delete sends them again, with the same event ids).

    with session_scope(engine) as s:                 # the change
        ...
        outbox.add(s, "cheems.rankings.v1", prompt_id, event.SerializeToString())
    with session_scope(engine) as s:                 # the relay
        rows = outbox.take(s, 256)                   # oldest first; [] while another relay is at work
        ...publish, wait for the acknowledgements...
        outbox.remove(s, [row.id for row in rows])

One relay at a time per database keeps the events of one key in order across processes: PostgreSQL
through an advisory lock held by the taking transaction, SQLite through the write lock every
transaction here takes at BEGIN (services.store.db).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from services.store import validate as v
from services.store.models import OutboxEvent

RELAY_LOCK = 0x6F7574626F78  # pg_try_advisory_xact_lock key ("outbox"); the migrations use another


def add(session: Session, topic: str, key: str, value: bytes) -> int:
    """Queue a serialized event for `topic` under `key`; returns its place in the publishing order."""
    row = OutboxEvent(topic=v.text("topic", topic), key=v.text("key", key), value=bytes(value))
    session.add(row)
    session.flush()
    return row.id


def take(session: Session, limit: int) -> list[OutboxEvent]:
    """Up to `limit` waiting events, oldest first, for this transaction's relay alone ([] while another relays)."""
    postgresql = session.get_bind().dialect.name == "postgresql"
    if postgresql and not session.scalar(select(func.pg_try_advisory_xact_lock(RELAY_LOCK))):
        return []
    query = select(OutboxEvent).order_by(OutboxEvent.id).limit(v.count("limit", limit, minimum=1))
    return list(session.scalars(query))


def remove(session: Session, ids: Sequence[int]) -> None:
    """Delete published events."""
    if ids:
        session.execute(delete(OutboxEvent).where(OutboxEvent.id.in_(list(ids))))


def waiting(session: Session) -> int:
    """How many events wait to be published."""
    return int(session.scalar(select(func.count()).select_from(OutboxEvent)) or 0)
