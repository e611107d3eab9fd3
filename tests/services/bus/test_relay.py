"""The outbox relay on the real broker, SQLite and PostgreSQL: two relays of one database publish each event once
and one key's events in order; while a relay waits for the broker it holds no transaction (the SQLite write lock
is free, PostgreSQL shows no session idle in a transaction)."""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url

from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.bus.codec import encode
from services.bus.reader import read_topic
from services.bus.relay import EventRelay, RelayConfig
from services.store import outbox
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.outbox import StoreOutbox

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


def ranking(key: str, n: int) -> events_pb2.RankingEvent:
    """The n-th ranking of prompt `key` (n in `conflicts`: the order it was queued in)."""
    return events_pb2.RankingEvent(ranking=common_pb2.Ranking(prompt_id=key, rank={"r1": 1}), conflicts=n)


def queue(engine: Engine, keys: list[str], per_key: int) -> list[str]:
    """per_key rankings of each key, interleaved, one transaction each; returns their event ids in queued order."""
    ids = []
    for n in range(per_key):
        for key in keys:
            value = encode(topics.RANKINGS, ranking(key, n)).value
            with session_scope(engine) as session:
                outbox.add(session, topics.RANKINGS, key, value)
            ids.append(events_pb2.RankingEvent.FromString(value).header.event_id)
    return ids


def read(bootstrap: str, keys: set[str], count: int, timeout: float = 30.0) -> list[tuple[str, Any]]:
    """(key, event) of cheems.rankings.v1 for `keys`, from the start, until `count` were read and the end reached."""
    mine = lambda found: [(d.key, d.event) for d in found if d.key in keys]  # noqa: E731
    return mine(read_topic(bootstrap, topics.RANKINGS, lambda found: len(mine(found)) >= count, timeout))


def test_two_relays_publish_each_event_once_and_in_order_per_key(engine: Engine, broker: EmbeddedBroker) -> None:
    keys = [f"题-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    ids = queue(engine, keys, per_key=20)
    publishers = [Publisher(broker.bootstrap), Publisher(broker.bootstrap)]
    relays = [EventRelay(StoreOutbox(engine), p, RelayConfig(batch=4)) for p in publishers]  # two processes' relays
    errors: list[BaseException] = []

    def run(relay: EventRelay) -> None:
        try:
            while StoreOutbox(engine).waiting():
                relay.drain()  # 0 while the other relay holds the outbox
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(relay,)) for relay in relays]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == [] and not any(t.is_alive() for t in threads)
        assert sum(r.published for r in relays) == len(ids)  # taken once between them
        found = read(broker.bootstrap, set(keys), len(ids))
    finally:
        for p in publishers:
            p.close(timeout=5)
    assert sorted(e.header.event_id for _, e in found) == sorted(ids)  # each once
    for key in keys:
        assert [e.conflicts for k, e in found if k == key] == list(range(20))  # in the order queued


class StuckPublisher:
    """A publisher whose broker does not answer until `answer` is set: `publish` waits (as kafka-python's does for
    the metadata of a broker that is gone)."""

    def __init__(self) -> None:
        self.waiting, self.answer = threading.Event(), threading.Event()

    def publish(self, topic: str, key: str, event: Any, context: Any = None) -> Any:
        self.waiting.set()
        assert self.answer.wait(60)
        return Acknowledged()

    def confirm(self, sent: list[Any], timeout: float | None = None) -> None:
        for future in sent:
            future.get(timeout)

    def renew(self) -> None:
        pass


class Acknowledged:
    def get(self, timeout: float | None = None) -> None:
        pass


@pytest.fixture
def named_engine(db_url: str, engine: Engine) -> Iterator[tuple[Engine, str]]:
    """(an engine on the migrated database whose PostgreSQL sessions carry a name of their own, that name)."""
    name = f"relay-{uuid.uuid4().hex[:8]}"
    url = make_url(db_url)
    if url.get_backend_name() == "postgresql":
        url = url.update_query_dict({"application_name": name})
    named = create_engine_for(StoreConfig(url.render_as_string(hide_password=False)))
    yield named, name
    named.dispose()


def test_the_relay_holds_no_transaction_while_it_waits_for_the_broker(
    named_engine: tuple[Engine, str], engine: Engine, db_url: str
) -> None:
    relay_engine, name = named_engine
    queue(engine, ["等待中"], per_key=2)
    stuck = StuckPublisher()
    relay = EventRelay(StoreOutbox(relay_engine), stuck)  # type: ignore[arg-type]
    drained: list[int] = []
    thread = threading.Thread(target=lambda: drained.append(relay.drain()), daemon=True)
    thread.start()
    try:
        assert stuck.waiting.wait(30), "the relay never published"
        if engine.dialect.name == "sqlite":  # the write lock is free: a writer that will not wait gets it
            raw = sqlite3.connect(make_url(db_url).database or "", timeout=0, isolation_level=None)
            try:
                raw.execute("BEGIN IMMEDIATE")
                raw.execute("ROLLBACK")
            finally:
                raw.close()
        else:  # its claim's connection idles outside any transaction; nothing else is open
            with engine.connect() as connection:
                states = connection.scalars(
                    text("SELECT state FROM pg_stat_activity WHERE application_name = :name"), {"name": name}
                ).all()
            assert states and set(states) == {"idle"}, states
        with session_scope(engine) as session:  # and another connection's write completes
            outbox.add(session, topics.RANKINGS, "等待中", encode(topics.RANKINGS, ranking("等待中", 2)).value)
    finally:
        stuck.answer.set()
        thread.join(30)
    assert drained == [3] and StoreOutbox(engine).waiting() == 0


def test_an_event_is_relayed_in_the_trace_of_the_change_that_queued_it(
    engine: Engine, broker: EmbeddedBroker, recorded: tuple[Any, Any]
) -> None:
    """The outbox keeps the change's trace context; the relay, in a thread of its own long after, sends the event
    as that context's child (the record then carries the send span's traceparent: tests/services/bus/test_spans)."""
    tracer, exporter = recorded
    key = f"题-{uuid.uuid4().hex[:8]}"
    with tracer.start_as_current_span("Ingest") as change, session_scope(engine) as session:
        outbox.add(session, topics.RANKINGS, key, encode(topics.RANKINGS, ranking(key, 0)).value)
    with session_scope(engine) as session:
        outbox.add(session, topics.RANKINGS, key, encode(topics.RANKINGS, ranking(key, 1)).value)  # untraced
    stored = [row.trace_context for row in StoreOutbox(engine).take(10) if row.key == key]
    ours = change.get_span_context()
    assert stored == [{"traceparent": f"00-{ours.trace_id:032x}-{ours.span_id:016x}-{ours.trace_flags:02x}"}, {}]
    publisher = Publisher(broker.bootstrap)
    try:
        while EventRelay(StoreOutbox(engine), publisher).drain():
            pass
    finally:
        publisher.close(timeout=5)
    sends = [s for s in exporter.get_finished_spans() if s.name == f"send {topics.RANKINGS}"]
    mine = [s for s in sends if s.attributes and s.attributes["messaging.kafka.message.key"] == key]
    assert len(mine) == 2
    traced, untraced = mine
    assert traced.parent is not None and traced.parent.span_id == ours.span_id
    assert traced.context.trace_id == ours.trace_id and untraced.parent is None  # a trace of its own
    assert [e.conflicts for _, e in read(broker.bootstrap, {key}, 2)] == [0, 1]
