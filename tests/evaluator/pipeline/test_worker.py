"""A run of a registered model is scored by that model only (real broker, real scorers over gRPC).

The score worker asks a scorer that serves another model again, with backoff, until it serves the run's model
(here the scorer is replaced on the same port, as a deployment of the new model does), or past the limit
publishes no scores and the run fails with the reason (on SQLite and PostgreSQL); a worker stopped while it
waits leaves its request to the next worker. The sink stores only the scores of the run's model. Scores the
broker did not take (a producer failed for good) commit nothing: the batch is scored again by a renewed producer.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from cheems.formats.cheemsbench import read_bench
from cheems.v1 import events_pb2, reward_pb2
from evaluator.errors import WorkerStopped
from evaluator.pipeline.runs import run_message, run_state, start_run
from evaluator.pipeline.sink import ResultSink
from evaluator.pipeline.worker import ScoreWorker, WorkerConfig, pauses
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher
from services.scorer.client import RewardClient
from services.scorer.runtime import ScorerServer
from services.store import repository
from services.store.db import session_scope
from services.store.models import EvalScore
from tests.evaluator.conftest import serving
from tests.services.bus.producers import fail_for_good

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

HUMAN = Path(__file__).resolve().parents[3] / "data" / "sample" / "human.jsonl"
QUICK = WorkerConfig(model_wait=0.5, initial_backoff=0.1, max_backoff=0.2)


def test_pauses_double_up_to_the_largest_and_stop_at_the_limit() -> None:
    assert list(pauses(WorkerConfig(model_wait=10, initial_backoff=1, max_backoff=4))) == [1, 2, 4, 3]
    assert list(pauses(WorkerConfig(model_wait=0))) == []  # fail at the first reply from another model
    bad: list[tuple[str, Any]] = [("model_wait", -1), ("initial_backoff", 0), ("initial_backoff", 6.0)]
    bad += [("call_timeout", 0), ("batch_size", 0), ("call_items", 0), ("calls_in_flight", 0)]
    for field, value in bad:
        with pytest.raises(ValueError, match=field):
            WorkerConfig(**{field: value})


def requests(run_id: str, model_id: str, count: int) -> list[tuple[str, events_pb2.ScoreRequestEvent]]:
    """The first `count` score requests of a run of `model_id` on human.jsonl, as `start_run` publishes them."""
    out = []
    for index, item in enumerate(read_bench(HUMAN)[:count]):
        key = f"human:{index}"
        request = reward_pb2.ScoreRequest(prompt=item.input, responses=[r.content for r in item.responses])
        header = events_pb2.EventHeader(event_id=f"{run_id}/{key}", producer="test")
        out.append((key, events_pb2.ScoreRequestEvent(header=header, run_id=run_id, subset="human", prompt_id=key,
                    response_ids=[r.id for r in item.responses], request=request, model_id=model_id)))  # fmt: skip
    return out


def test_the_worker_waits_until_the_scorer_serves_the_runs_model(
    fresh_broker: EmbeddedBroker, checkpoint: Path, pump: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    old = serving(checkpoint, "rm-old").start()
    port, bootstrap = old.grpc_port, fresh_broker.bootstrap
    publisher = Publisher(bootstrap)
    for key, event in requests("run-1", "rm-new", 3):
        publisher.publish(topics.SCORE_REQUESTS, key, event)
    publisher.flush()
    config = WorkerConfig(model_wait=120, initial_backoff=0.2, max_backoff=1)
    worker = ScoreWorker(bootstrap, f"127.0.0.1:{port}", config=config)
    new: list[ScorerServer] = []

    def deploy_the_new_model() -> None:  # the old scorer goes, the new one comes up on its port
        old.stop(grace=0)
        new.append(serving(checkpoint, "rm-new", port).start())

    deploy = threading.Thread(target=deploy_the_new_model)
    idle = worker._idle

    def first_pause_deploys(seconds: float) -> None:
        if deploy.ident is None:
            deploy.start()
        idle(seconds)

    monkeypatch.setattr(worker, "_idle", first_pause_deploys)
    scores: list[Any] = []
    listener = EventConsumer(bootstrap, [topics.SCORES], "listener", lambda t, k, e: scores.append(e), publisher)
    started = time.monotonic()
    try:
        with pump(worker.consumer, listener) as running:
            running.wait_for(lambda: len(scores) == 3, timeout=180, what="the three scores")
    finally:
        deploy.join(timeout=60)
        worker.close()
        listener.close()
        publisher.close()
        for server in (old, *new):
            server.stop(grace=0)
    assert new, "the worker never waited: the old model's reply was taken"
    assert [(e.model_id, e.error, len(e.scores)) for e in scores] == [("rm-new", "", 5)] * 3
    assert time.monotonic() - started < 120


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def test_a_scorer_that_keeps_another_model_fails_the_run_with_the_reason(
    engine: Engine, fresh_broker: EmbeddedBroker, scorer: ScorerServer, pump: Callable[..., Any], group: str
) -> None:
    url, bootstrap = f"127.0.0.1:{scorer.grpc_port}", fresh_broker.bootstrap  # the scorer serves "tiny"
    publisher = Publisher(bootstrap)
    run_id = start_run(engine, publisher, [str(HUMAN)], url, model_id="rm-wanted")
    publisher.close()
    stopped = threading.Event()
    stopped.set()  # SIGTERM while the worker waits: it stops at once and commits nothing
    first = ScoreWorker(bootstrap, url, group=group, config=WorkerConfig(model_wait=60), stop=stopped)
    with pytest.raises(WorkerStopped):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            first.consumer.poll_once(500)
    first.close()

    worker = ScoreWorker(bootstrap, url, group=group, config=QUICK)
    sink = ResultSink(bootstrap, engine, group=f"{group}-sink")
    try:
        with pump(worker.consumer, sink.consumer) as running:
            running.wait_for(lambda: run_state(engine, run_id).state == "failed", what="the run to fail")
            running.wait_for(lambda: worker.consumer.stats.handled == 18, what="every request, the first one's too")
    finally:
        worker.close()
        sink.close()
    failed = run_message(engine, run_id)
    assert failed.model_id == "rm-wanted" and failed.items_scored == 0
    assert failed.error.startswith(f"the scorer at {url} does not serve model 'rm-wanted' (")  # NOT_FOUND, waited on
    assert "this scorer serves tiny only" in failed.error and "; asked for " in failed.error
    assert sink.consumer.stats.handled == 1  # one event saying why; the run's other requests were skipped


def test_the_sink_stores_only_the_scores_of_the_runs_model(
    engine: Engine, broker: EmbeddedBroker, group: str, caplog: pytest.LogCaptureFixture
) -> None:
    (key, request), *_ = requests("", "", 1)
    with session_scope(engine) as session:
        of_model = repository.create_run(session, [str(HUMAN)], "h:1", "paper", 5, 18, "rm-a")
        plain = repository.create_run(session, [str(HUMAN)], "h:1", "paper", 5, 18)
    sink = ResultSink(broker.bootstrap, engine, group=group)

    def scored(run_id: str, model_id: str) -> events_pb2.ScoreEvent:
        scores = [float(i) for i in range(len(request.response_ids))]
        return events_pb2.ScoreEvent(run_id=run_id, prompt_id=key, response_ids=request.response_ids, scores=scores,
                                     model_id=model_id)  # fmt: skip

    sink.handle(topics.SCORES, key, scored(of_model, "rm-b"))
    assert run_state(engine, of_model).scored == 0
    assert f"run {of_model}: dropping the scores of {key} from model 'rm-b': the run evaluates 'rm-a'" in caplog.text
    sink.handle(topics.SCORES, key, scored(of_model, "rm-a"))
    sink.handle(topics.SCORES, key, scored(plain, "rm-b"))  # a run of no model in particular takes any
    assert run_state(engine, of_model).scored == run_state(engine, plain).scored == 1
    sink.close()


def test_a_batch_is_scored_together_and_a_refused_request_fails_only_its_run(
    fresh_broker: EmbeddedBroker, scorer: ScorerServer, pump: Callable[..., Any], group: str
) -> None:
    """One polled batch: ScoreBatch calls of four; the call holding a request the scorer refuses (an empty
    prompt) is asked again one request at a time, so that request's run fails with the reason and the others
    are scored; an undecodable record is dead-lettered. Each score answers its own request."""
    url, bootstrap = f"127.0.0.1:{scorer.grpc_port}", fresh_broker.bootstrap
    good = requests("run-1", "", 12)
    (key, empty), *_ = requests("run-2", "", 1)
    empty.request.prompt = "  "
    publisher = Publisher(bootstrap)
    for k, event in [*good[:6], (key, empty), *good[6:]]:
        publisher.publish(topics.SCORE_REQUESTS, k, event)
    publisher.send_raw(topics.SCORE_REQUESTS, b"human:0", b"\xff", [("cheems-schema-version", b"1")])
    publisher.flush()
    worker = ScoreWorker(bootstrap, url, group=group, config=WorkerConfig(batch_size=64, call_items=4))
    scores: list[Any] = []
    listener = EventConsumer(bootstrap, [topics.SCORES], f"{group}-l", lambda t, k, e: scores.append(e), publisher)
    try:
        with pump(worker.consumer, listener) as running:
            running.wait_for(lambda: len(scores) == 13, what="13 score events")
    finally:
        worker.close()
        listener.close()
        publisher.close()
    (refused,) = [e for e in scores if e.run_id == "run-2"]
    assert refused.error.startswith(f"the scorer at {url} refused human:0: INVALID_ARGUMENT: ") and not refused.scores
    assert worker.stats.one_by_one == 1 and worker.consumer.stats.dead_lettered == 1
    scored = {e.prompt_id: e for e in scores if e.run_id == "run-1"}
    assert sorted(scored) == sorted(k for k, _ in good)
    with RewardClient(url) as client:  # each reply went to its own request (the order within a call is kept)
        for k, event in good:
            alone = client.score(event.request.prompt, list(event.request.responses))
            assert scored[k].scores == pytest.approx(alone, rel=1e-4) and scored[k].model_id == "tiny"


def test_scores_the_broker_did_not_take_commit_nothing_and_are_scored_again_by_a_renewed_producer(
    engine: Engine, fresh_broker: EmbeddedBroker, scorer: ScorerServer, pump: Callable[..., Any], group: str
) -> None:
    url, bootstrap = f"127.0.0.1:{scorer.grpc_port}", fresh_broker.bootstrap
    publisher = Publisher(bootstrap)
    run_id = start_run(engine, publisher, [str(HUMAN)], url)
    publisher.close()
    worker = ScoreWorker(bootstrap, url, group=group, config=WorkerConfig(batch_size=64))
    fail_for_good(worker.publisher)  # every send of its producer fails from now on, as after a replaced broker
    kafka = worker.consumer.consumer
    sink = ResultSink(bootstrap, engine, group=f"{group}-sink")
    try:
        deadline = time.monotonic() + 60
        while worker.consumer.stats.batches == 0 and time.monotonic() < deadline:
            worker.consumer.poll_once(500)
        assert {kafka.committed(tp) for tp in kafka.assignment()} == {None}, "scores lost: the batch was committed"
        assert worker.stats.publish_failures == worker.consumer.stats.redelivered == 1
        with pump(worker.consumer, sink.consumer) as running:
            running.wait_for(lambda: run_state(engine, run_id).state == "succeeded", what="the run to complete")
    finally:
        worker.close()
        sink.close()
    assert run_state(engine, run_id)[:3] == ("succeeded", 18, 18)
    with session_scope(engine) as session:
        stored = session.scalars(select(EvalScore.item).where(EvalScore.run_id == run_id)).all()
    assert sorted(stored) == sorted(f"human:{i}" for i in range(18))  # one stored score per item
    assert worker.stats.publish_failures == 1  # the renewed producer took every later batch
