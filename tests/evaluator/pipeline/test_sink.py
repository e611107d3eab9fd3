"""The result sink's batches on the real broker, on SQLite and PostgreSQL.

A batch is stored in one transaction and each run in it is checked for completion once; a batch spanning
two runs finishes both; a duplicate in a batch is stored once (the first); a poison event (undecodable,
malformed, or refused by the store) costs only its own run, and the rest of its batch is stored.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from sqlalchemy import Engine

from cheems.formats.cheemsbench import read_bench
from cheems.v1 import events_pb2
from evaluator.pipeline.runs import run_message, run_state
from evaluator.pipeline.sink import ResultSink, SinkConfig
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Delivery, Publisher
from services.store import repository
from services.store.db import session_scope

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
OPEN, HUMAN = SAMPLE / "open.jsonl", SAMPLE / "human.jsonl"


def new_run(engine: Engine, path: Path) -> str:
    with session_scope(engine) as session:
        return repository.create_run(session, [str(path)], "h:1", "paper", 5, len(read_bench(path)))


def scores(run_id: str, path: Path, shift: float = 0.0) -> list[events_pb2.ScoreEvent]:
    """A score event per item of the bench file, as a worker publishes them."""
    return [
        events_pb2.ScoreEvent(
            run_id=run_id,
            prompt_id=f"{path.stem}:{index}",
            response_ids=[r.id for r in item.responses],
            scores=[shift - i for i in range(len(item.responses))],
            model_id="tiny",
        )
        for index, item in enumerate(read_bench(path))
    ]


def batch(events: list[events_pb2.ScoreEvent]) -> list[Delivery]:
    return [Delivery(topics.SCORES, e.prompt_id, e) for e in events]


def sink_on(broker: EmbeddedBroker, engine: Engine, config: SinkConfig | None = None) -> ResultSink:
    return ResultSink(broker.bootstrap, engine, config, group=f"sink-{uuid.uuid4().hex[:8]}")


def test_a_batch_spanning_two_runs_finishes_both_checking_each_once_per_batch(
    engine: Engine, broker: EmbeddedBroker
) -> None:
    first, second = new_run(engine, OPEN), new_run(engine, HUMAN)
    mixed = [e for pair in zip(scores(first, OPEN), scores(second, HUMAN), strict=True) for e in pair]
    sink = sink_on(broker, engine)
    try:
        sink.handle_batch(batch(mixed[:10]))
        assert sink.stats.checks == 2  # one check per run, not one per score
        assert run_state(engine, first)[:2] == run_state(engine, second)[:2] == ("running", 5)
        sink.handle_batch(batch(mixed[10:]))
    finally:
        sink.close()
    assert sink.stats.checks == 4 and sink.stats.stored == 36
    assert run_state(engine, first)[:3] == ("succeeded", 18, 18)
    assert run_state(engine, second)[:3] == ("succeeded", 18, 18)


def test_a_duplicate_in_a_batch_is_stored_once_the_first_kept(engine: Engine, broker: EmbeddedBroker) -> None:
    run_id = new_run(engine, OPEN)
    events = scores(run_id, OPEN)
    replayed = scores(run_id, OPEN, shift=100.0)[3]  # open:3 again, with other values (a worker scored it twice)
    sink = sink_on(broker, engine)
    try:
        sink.handle_batch(batch([*events[:5], replayed, *events[5:], events[0]]))
    finally:
        sink.close()
    assert sink.stats.stored == 18 and sink.stats.checks == 1
    assert run_state(engine, run_id)[:3] == ("succeeded", 18, 18)
    with session_scope(engine) as session:
        stored = repository.run_scores(session, run_id)["open:3"]
    assert stored == dict(zip(events[3].response_ids, events[3].scores, strict=True))


def test_poison_in_a_batch_fails_only_its_own_run_and_the_rest_is_stored(
    engine: Engine, fresh_broker: EmbeddedBroker
) -> None:
    good, malformed, refused = new_run(engine, OPEN), new_run(engine, HUMAN), new_run(engine, HUMAN)
    bad_pair = scores(malformed, HUMAN)[0]
    del bad_pair.scores[-1]  # 5 response ids, 4 scores
    too_long = scores(refused, HUMAN)[0]
    too_long.prompt_id = "human:" + "9" * 200  # an item key the store refuses: the whole batch's INSERT fails
    unknown = scores("no-such-run", HUMAN)[1]
    events = scores(good, OPEN)
    publisher = Publisher(fresh_broker.bootstrap)
    for event in [*events[:6], bad_pair, too_long, unknown, *events[6:]]:
        publisher.publish(topics.SCORES, event.prompt_id[:20], event)
    publisher.send_raw(topics.SCORES, b"open:0", b"\xff not a score", [("cheems-schema-version", b"1")])
    publisher.flush()
    publisher.close()
    sink = sink_on(fresh_broker, engine, SinkConfig(batch_size=64))
    try:
        deadline = time.monotonic() + 120
        while sink.consumer.stats.handled + sink.consumer.stats.dead_lettered < 22:
            assert time.monotonic() < deadline, f"timed out: {sink.consumer.stats}"
            sink.consumer.poll_once(200)
    finally:
        sink.close()
    assert sink.consumer.stats.dead_lettered == 1
    assert run_state(engine, good)[:3] == ("succeeded", 18, 18)
    assert run_message(engine, malformed).error == "the scores of human:0 cannot be stored: 5 response ids but 4 scores"
    assert run_message(engine, refused).error.startswith(f"the scores of {too_long.prompt_id} could not be stored: ")
    assert "InvalidRecord" in run_message(engine, refused).error
    assert run_state(engine, refused).scored == 0
    # the good run was checked once per batch it had scores in (at most once per batch), never per score
    assert sink.stats.checks <= sink.consumer.stats.batches < 22
