"""The result sink's batches on the real broker, on SQLite and PostgreSQL.

A batch is stored in one transaction and each run in it is checked for completion once; a batch spanning
two runs finishes both; a duplicate in a batch is stored once (the first); a poison event (undecodable,
malformed, or refused by the store) costs only its own run, and the rest of its batch is stored. A run's end
(succeeded or failed) queues its EvalResultEvent in the outbox with it: runs ended while the broker is away
announce their results once a broker is back, none lost.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine

from cheems.formats.cheemsbench import read_bench
from cheems.v1 import evaluation_pb2, events_pb2
from evaluator.pipeline.runs import run_message, run_state
from evaluator.pipeline.sink import ResultSink, SinkConfig
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Delivery, Publisher
from services.bus.reader import read_topic
from services.bus.relay import RelayConfig
from services.store import repository
from services.store.db import session_scope
from services.store.outbox import StoreOutbox

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


def test_runs_ended_while_the_broker_is_away_announce_their_results_once_a_broker_is_back(engine: Engine) -> None:
    broker = EmbeddedBroker().start()
    broker.create_topics(topics.with_dead_letters(), partitions=2)
    good, malformed = new_run(engine, OPEN), new_run(engine, HUMAN)
    relay = RelayConfig(sweep_every=0.5, ack_timeout=2.0, max_backoff=1.0)
    sink = sink_on(broker, engine, SinkConfig(relay=relay))
    bad_pair = scores(malformed, HUMAN)[0]
    del bad_pair.scores[-1]
    replaced = None
    try:
        broker.stop()  # the sink's scores came before: it stores them and ends both runs with no broker
        sink.handle_batch(batch([*scores(good, OPEN), bad_pair]))
        assert (run_state(engine, good).state, run_state(engine, malformed).state) == ("succeeded", "failed")
        waiting = [events_pb2.EvalResultEvent.FromString(e.value) for e in StoreOutbox(engine).take(10)]
        assert {(e.run.run_id, e.run.state) for e in waiting} == {
            (good, evaluation_pb2.RUN_STATE_SUCCEEDED),
            (malformed, evaluation_pb2.RUN_STATE_FAILED),
        }
        replaced = EmbeddedBroker(port=broker.port).start()  # the same address, a new broker (topics anew)
        replaced.create_topics(topics.with_dead_letters(), partitions=2)
        deadline, results = time.monotonic() + 60, {}
        while len(results) < 2 or StoreOutbox(engine).waiting():  # each deleted once acknowledged
            assert time.monotonic() < deadline, f"results published: {sorted(results)}"
            results = {d.event.run.run_id: d.event.run for d in read_topic(replaced.bootstrap, topics.EVAL_RESULTS)}
            time.sleep(0.2)
    finally:
        sink.close()
        if replaced is not None:
            replaced.stop()
    assert results[good].result.overall == pytest.approx(run_state(engine, good).result["overall"])
    assert results[good].items_scored == 18 and results[malformed].error == run_message(engine, malformed).error
