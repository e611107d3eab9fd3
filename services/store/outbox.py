"""The event outbox: events written in the transaction of the change they announce, relayed in order after it.

A change and its event commit together, so a stored change always has its event waiting; a relay publishes
the waiting events oldest first and deletes them once the broker has acknowledged them (at-least-once: a
relay that dies between the acknowledgement and the delete sends them again, with the same event ids).

    with session_scope(engine) as s:                 # the change
        ...
        outbox.add(s, "cheems.rankings.v1", prompt_id, event.SerializeToString())
    box = StoreOutbox(engine, ["cheems.rankings.v1"])  # a relay's view: the topics it may publish
    with box.claim() as mine:                        # False while another relay is at work
        rows = box.take(256) if mine else []         # oldest first, in a short read-only transaction
        ...publish, wait for the acknowledgements: no transaction open...
        box.remove([row.id for row in rows])         # a short transaction of its own

Each service relays the topics it owns and no others (ingestion: samples; annotation: annotations and rankings, the
AI judge's included, as the judge submits through it; training: datasets and models; the evaluator's result sink:
eval results), so its Kafka credentials need write on those alone: one producer per topic. One relay at a time per
database and topic set keeps the events of one key in order across processes. Its lock needs no
open transaction and dies with its holder: on PostgreSQL a session-level advisory lock (per schema) taken on
a connection of its own in autocommit mode, on a SQLite file an OS lock (flock) on a file beside it, else
(a memory database) a lock of this process.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

from services.observe import tracing
from services.store import validate as v
from services.store.db import read_scope, session_scope
from services.store.models import OutboxEvent

RELAY_LOCK = 0x6F757462  # pg_try_advisory_lock(RELAY_LOCK, schema) ("outb"); the migrations use another
LOCK_SUFFIX = "-relay.lock"  # the SQLite lock file: the database's name and this
log = logging.getLogger(__name__)
_local_locks: dict[str, threading.Lock] = {}  # database URL -> the relay lock of a database only this process sees
_local_guard = threading.Lock()


class Waiting(NamedTuple):
    """An event waiting to be published, as read: it stays readable after its transaction ended."""

    id: int
    topic: str
    key: str
    value: bytes
    trace_context: dict[str, str]  # the W3C headers of the change's span ({} untraced)


def add(session: Session, topic: str, key: str, value: bytes) -> int:
    """Queue a serialized event for `topic` under `key`; returns its place in the publishing order. The current
    trace context is stored with it (`services.observe.tracing`): the relay publishes the event in that trace."""
    traced = tracing.carried() or None
    row = OutboxEvent(topic=v.text("topic", topic), key=v.text("key", key), value=bytes(value), trace_context=traced)
    session.add(row)
    session.flush()
    return row.id


def take(session: Session, limit: int, topics: Sequence[str] = ()) -> list[OutboxEvent]:
    """Up to `limit` waiting events of `topics` (every topic when empty), oldest first (the caller holds the
    relay lock: `StoreOutbox.claim`)."""
    query = select(OutboxEvent).order_by(OutboxEvent.id).limit(v.count("limit", limit, minimum=1))
    if topics:
        query = query.where(OutboxEvent.topic.in_(list(topics)))
    return list(session.scalars(query))


def remove(session: Session, ids: Sequence[int]) -> None:
    """Delete published events."""
    if ids:
        session.execute(delete(OutboxEvent).where(OutboxEvent.id.in_(list(ids))))


def waiting(session: Session) -> int:
    """How many events wait to be published."""
    return int(session.scalar(select(func.count()).select_from(OutboxEvent)) or 0)


class StoreOutbox:
    """The outbox of one database as a relay of `topics` works it (every topic when empty): claim, take,
    (publish), remove; each step is short."""

    def __init__(self, engine: Engine, topics: Sequence[str] = ()) -> None:
        self.engine, self.topics = engine, tuple(sorted(set(topics)))
        # relays of other topic sets work beside this one: their events' keys never meet
        self._tag = f"{zlib.crc32('|'.join(self.topics).encode()):08x}" if self.topics else ""

    def claim(self) -> contextlib.AbstractContextManager[bool]:
        """The relay lock for the block: True when this relay holds it, False while another one does."""
        if self.engine.dialect.name == "postgresql":
            return _advisory_lock(self.engine, self._tag)
        database = make_url(self.engine.url).database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            return _file_lock(database + (f"-{self._tag}" if self._tag else "") + LOCK_SUFFIX)
        with _local_guard:
            lock = _local_locks.setdefault(f"{self.engine.url}#{self._tag}", threading.Lock())
        return _thread_lock(lock)

    def take(self, limit: int) -> list[Waiting]:
        with read_scope(self.engine) as session:
            rows = take(session, limit, self.topics)
            return [Waiting(r.id, r.topic, r.key, r.value, dict(r.trace_context or {})) for r in rows]

    def remove(self, ids: Sequence[int]) -> None:
        with session_scope(self.engine) as session:
            remove(session, ids)

    def waiting(self) -> int:
        with read_scope(self.engine) as session:
            return waiting(session)


@contextlib.contextmanager
def _advisory_lock(engine: Engine, tag: str) -> Iterator[bool]:
    # Autocommit: the lock is the session's, not a transaction's, so the connection idles outside any
    # transaction while the relay waits for the broker. Keyed by schema and topic set: one relay per outbox
    # table and topic set.
    with engine.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        schema = connection.scalar(text("SELECT current_schema()")) or ""
        keys = {"key": RELAY_LOCK, "schema": zlib.crc32(f"{schema}#{tag}".encode()) - 2**31}  # two int4 keys
        held = bool(connection.scalar(text("SELECT pg_try_advisory_lock(:key, :schema)"), keys))
        try:
            yield held
        finally:
            if held:
                _unlock(connection, keys)


def _unlock(connection: Connection, keys: dict[str, int]) -> None:
    try:
        connection.scalar(text("SELECT pg_advisory_unlock(:key, :schema)"), keys)
    except Exception:  # a broken connection: its session, and the lock with it, ends when it is dropped
        log.warning("could not release the outbox relay lock; dropping its connection", exc_info=True)
        connection.invalidate()


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[bool]:
    # flock: held by this open file, released when it is closed or the process dies (even SIGKILL); two
    # opens in one process exclude each other too. 0600, like the database beside it.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


@contextlib.contextmanager
def _thread_lock(lock: threading.Lock) -> Iterator[bool]:
    held = lock.acquire(blocking=False)
    try:
        yield held
    finally:
        if held:
            lock.release()
