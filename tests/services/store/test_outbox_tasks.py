"""The event outbox (order; one relay at a time, by a claim that holds no transaction and dies with its holder) and
the open-task queue, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from services.store import outbox, repository
from services.store.db import session_scope
from services.store.errors import UnknownPrompt
from services.store.models import utcnow
from services.store.outbox import StoreOutbox
from services.store.tasks import lock_prompt, open_count, open_tasks

ROOT = str(Path(__file__).resolve().parents[3])


def test_events_wait_in_order_until_removed(engine: Engine) -> None:
    with session_scope(engine) as session:
        ids = [outbox.add(session, "cheems.rankings.v1", f"p{n}", bytes([n])) for n in range(3)]
    with session_scope(engine) as session:
        taken = outbox.take(session, 2)
        assert [(r.id, r.key, r.value) for r in taken] == [(ids[0], "p0", b"\x00"), (ids[1], "p1", b"\x01")]
        outbox.remove(session, [r.id for r in taken])
    with session_scope(engine) as session:
        assert [r.key for r in outbox.take(session, 10)] == ["p2"] and outbox.waiting(session) == 1


def test_one_relay_at_a_time_claims_the_outbox_with_no_transaction_open(engine: Engine) -> None:
    first, second = StoreOutbox(engine), StoreOutbox(engine)  # two relays: two processes' views of one database
    with first.claim() as held:
        assert held
        with second.claim() as other:
            assert not other  # the first still holds it
        with session_scope(engine) as session:  # the claim is no transaction: a writer does not wait for it
            outbox.add(session, "cheems.rankings.v1", "p", b"x")
        assert [(e.key, e.value) for e in first.take(10)] == [("p", b"x")]
    with second.claim() as held:
        assert held  # released with the block
        second.remove([e.id for e in second.take(10)])
    assert second.waiting() == 0


def test_a_relay_takes_only_its_own_topics_and_works_beside_the_relays_of_others(engine: Engine) -> None:
    """Least privilege on the bus: the ingestion service's relay publishes samples, never another service's
    rankings or models (its Kafka user may not write them); relays of other topics do not wait for each other."""
    from services.bus import topics

    with session_scope(engine) as session:
        for topic in (topics.SAMPLES, topics.RANKINGS, topics.MODELS, topics.SAMPLES):
            outbox.add(session, topic, "k", topic.encode())
    ingestion = StoreOutbox(engine, topics.RELAYED_BY["ingestion"])
    training = StoreOutbox(engine, topics.RELAYED_BY["training"])
    with ingestion.claim() as mine, training.claim() as theirs, StoreOutbox(engine, [topics.SAMPLES]).claim() as twin:
        assert mine and theirs and not twin  # one relay per topic set at a time; other sets work beside it
        assert [e.topic for e in ingestion.take(10)] == [topics.SAMPLES, topics.SAMPLES]
        assert [e.topic for e in training.take(10)] == [topics.MODELS]
    assert {e.topic for e in StoreOutbox(engine).take(10)} == {topics.SAMPLES, topics.RANKINGS, topics.MODELS}


HOLDER = """
import sys, time
from services.store.db import StoreConfig, create_engine_for
from services.store.outbox import StoreOutbox
with StoreOutbox(create_engine_for(StoreConfig(sys.argv[1]))).claim() as held:
    print(held, flush=True)
    time.sleep(600)
"""


def test_the_claim_dies_with_its_holder(engine: Engine, db_url: str) -> None:
    """A relay SIGKILLed while it waits for the broker leaves no lock behind."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db_url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        with StoreOutbox(engine).claim() as held:
            assert not held
    finally:
        holder.kill()
        holder.wait(10)
    with StoreOutbox(engine).claim() as held:
        assert held


def test_open_tasks_oldest_first_with_their_texts(engine: Engine, prompt_id: str) -> None:
    with session_scope(engine) as session:
        other, _ = repository.add_sample(session, "另一题", [("a", "甲"), ("b", "乙")], [])
        repository.create_tasks(session, prompt_id, [["r1", "r2", "r3"]], "triple")
        [pair] = repository.create_tasks(session, other, [["b", "a"]], "pair")
    with session_scope(engine) as session:
        listed = open_tasks(session)
        assert [q.task.prompt_id for q in listed] == [prompt_id, other]
        assert listed[1].contents == {"b": "乙", "a": "甲"} and listed[1].prompt.text == "另一题"
        assert [q.task.id for q in open_tasks(session, kind="pair")] == [pair]
        assert [q.task.id for q in open_tasks(session, other)] == [pair] and len(open_tasks(session, limit=1)) == 1
        assert open_tasks(session, created_before=utcnow() - timedelta(hours=1)) == []
        assert open_count(session, other) == 1
        repository.complete_task(session, pair)
        assert open_count(session, other) == 0 and [q.task.prompt_id for q in open_tasks(session)] == [prompt_id]
        with pytest.raises(UnknownPrompt):
            open_tasks(session, "没有这道题")
        with pytest.raises(UnknownPrompt):
            lock_prompt(session, "没有这道题")
        assert lock_prompt(session, other).text == "另一题"
