"""Every newly registered model is evaluated (real broker, real scorer over gRPC, SQLite and PostgreSQL).

A ModelEvent on cheems.models.v1 starts one run of that model; a redelivered one starts none; the run completes
through the score worker and the sink, its metrics are stored per model and published with the model's id. A run
that cannot start is recorded failed with the reason. StartRun takes a registered model's id (NOT_FOUND for
another), and `cheems service evaluation --evaluate-models` runs the model evaluator beside its gRPC server
until SIGTERM.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Engine, func, select

from cheems.roles import OPERATOR
from cheems.v1 import evaluation_pb2, evaluation_pb2_grpc, events_pb2, training_pb2
from evaluator.pipeline.model_runs import ModelEvaluator, ModelRunsConfig
from evaluator.pipeline.runs import run_message
from evaluator.pipeline.sink import ResultSink
from evaluator.pipeline.worker import ScoreWorker
from evaluator.server import EvaluationServicer, host
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher
from services.channels import open_channel
from services.grpc_errors import REASON_KEY
from services.hosting import HostConfig
from services.scorer.runtime import ScorerServer
from services.store import lifecycle, registry, repository
from services.store.accounts import AccountBook
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import EvalRun
from tests.evaluator.conftest import serving
from tests.services.accounts import account

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

HUMAN = Path(__file__).resolve().parents[3] / "data" / "sample" / "human.jsonl"
MODEL = "rm-0123456789abcdef"


@pytest.fixture(scope="module")
def evaluated(checkpoint: Path) -> Iterator[ScorerServer]:
    """A scorer serving MODEL, the model the events announce."""
    with serving(checkpoint, MODEL) as server:
        yield server


def announce(bootstrap: str, model_id: str, times: int = 1) -> None:
    """Publish a model's ModelEvent `times` times (more than once: redeliveries)."""
    event = events_pb2.ModelEvent(
        header=events_pb2.EventHeader(event_id=f"model/{model_id}", producer="test"),
        model=training_pb2.Model(model_id=model_id, path=f"/models/{model_id}"),
    )
    publisher = Publisher(bootstrap)
    for _ in range(times):
        publisher.publish(topics.MODELS, model_id, event)
    publisher.close()


def test_a_new_model_gets_one_run_whose_result_is_stored_and_published(
    engine: Engine, fresh_broker: EmbeddedBroker, evaluated: ScorerServer, pump: Callable[..., Any]
) -> None:
    bootstrap, url = fresh_broker.bootstrap, f"127.0.0.1:{evaluated.grpc_port}"
    with session_scope(engine) as session:
        lifecycle.register_checkpoint(session, "/models/served", MODEL, "person:ops")
    announce(bootstrap, "rm-forged00000000")  # no such model in the registry: no run
    announce(bootstrap, MODEL, times=2)
    publisher = Publisher(bootstrap)
    evaluator = ModelEvaluator(bootstrap, engine, publisher, ModelRunsConfig((str(HUMAN),), url))
    worker, sink = ScoreWorker(bootstrap, url), ResultSink(bootstrap, engine)
    results: list[Any] = []
    listener = EventConsumer(bootstrap, [topics.EVAL_RESULTS], "listener", lambda t, k, e: results.append(e), publisher)
    try:
        with pump(evaluator.consumer, worker.consumer, sink.consumer, listener) as running:
            running.wait_for(lambda: results and evaluator.consumer.stats.handled == 3, what="the result, all events")
    finally:
        for closing in (evaluator, worker, sink, listener, publisher):
            closing.close()
    with session_scope(engine) as session:
        (run,) = repository.runs_of_model(session, MODEL)  # the redelivered event started no second run
        assert session.scalar(select(func.count()).select_from(EvalRun)) == 1  # the forged one none at all
        assert (run.state, run.bench_files, run.scorer_url) == ("succeeded", [str(HUMAN)], url)
        overall = run.result["overall"]
        assert registry.model_results(session)[MODEL][1] == overall
    (published,) = results
    assert published.run.model_id == MODEL and published.run.run_id == run.id
    assert published.run.result.overall == pytest.approx(overall)
    assert run_message(engine, run.id).model_id == MODEL


def test_a_model_whose_run_cannot_start_gets_a_failed_run_saying_why(
    engine: Engine, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    bench = tmp_path / "open.jsonl"
    shutil.copy(HUMAN, bench)
    publisher = Publisher(broker.bootstrap)
    config = ModelRunsConfig((str(bench),), "h:1", group=f"g-{uuid.uuid4().hex[:8]}")
    evaluator = ModelEvaluator(broker.bootstrap, engine, publisher, config)
    bench.write_text('{"input": "你好", "responses": "不是列表"}\n', encoding="utf-8")  # broken since the start
    assert evaluator.evaluate(MODEL) is None
    assert evaluator.evaluate(MODEL) is None  # a redelivery: still the one run
    evaluator.handle(topics.MODELS, "", events_pb2.ModelEvent())  # no model id: ignored
    evaluator.close()
    publisher.close()
    with session_scope(engine) as session:
        (run,) = repository.runs_of_model(session, MODEL)
        assert session.scalar(select(func.count()).select_from(EvalRun)) == 1
        run_id = run.id
    failed = run_message(engine, run_id)
    assert failed.state == evaluation_pb2.RUN_STATE_FAILED and failed.model_id == MODEL
    assert failed.error.startswith(f"the evaluation could not start: {bench}:1: responses")


def test_model_runs_config_names_the_bad_field() -> None:
    with pytest.raises(ValueError, match="bench"):
        ModelRunsConfig((), "h:1")
    with pytest.raises(ValueError, match="scorer_url"):
        ModelRunsConfig(("open.jsonl",), " ")


def registered_model(engine: Engine) -> str:
    with session_scope(engine) as session:
        dataset, _ = registry.add_dataset(session, "b" * 64, "human", "d.jsonl", 1, 1, 1)
        training = registry.create_training(session, dataset.id, "tiny-cpu", {}, "local", "out/{id}")
        model, _ = registry.register_model(session, training.id, f"out/{training.id}/model", None)
        return model.id


def test_start_run_of_a_registered_model_and_of_an_unknown_one(
    engine: Engine, fresh_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    shutil.copy(HUMAN, tmp_path / "human.jsonl")
    model_id, publisher = registered_model(engine), Publisher(fresh_broker.bootstrap)
    service = host(EvaluationServicer(engine, publisher, tmp_path), HostConfig(port=0), AccountBook(engine)).start()
    channel = open_channel(f"127.0.0.1:{service.port}", token=account(engine, "ops", OPERATOR))
    stub = evaluation_pb2_grpc.EvaluationServiceStub(channel)
    request = evaluation_pb2.StartRunRequest(bench_files=["human.jsonl"], scorer_url="h:1", model_id=model_id)
    try:
        started = stub.StartRun(request, timeout=30)
        assert started.model_id == model_id
        assert stub.GetRun(evaluation_pb2.GetRunRequest(run_id=started.run_id), timeout=30).model_id == model_id
        request.model_id = "rm-nobody"
        with pytest.raises(grpc.RpcError) as refused:
            stub.StartRun(request, timeout=30)
    finally:
        channel.close()
        service.stop(0)
        publisher.close()
    assert refused.value.code() is grpc.StatusCode.NOT_FOUND
    assert refused.value.details() == "model_id: no registered model 'rm-nobody'"
    assert (REASON_KEY, "not_found") in refused.value.trailing_metadata()
    with session_scope(engine) as session:  # the refused request stored nothing
        assert session.scalar(select(func.count()).select_from(EvalRun)) == 1


def test_cheems_service_evaluation_evaluates_new_models_until_sigterm(
    fresh_broker: EmbeddedBroker, evaluated: ScorerServer, tmp_path: Path, pump: Callable[..., Any]
) -> None:
    db, bootstrap, url = f"sqlite:///{tmp_path / 'e.db'}", fresh_broker.bootstrap, f"127.0.0.1:{evaluated.grpc_port}"
    upgrade(db)
    shutil.copy(HUMAN, tmp_path / "human.jsonl")
    with session_scope(store := create_engine_for(StoreConfig(db))) as session:
        lifecycle.register_checkpoint(session, "/models/served", MODEL, "person:ops")
    store.dispose()
    cmd = [sys.executable, "-m", "cheems_cli", "service", "evaluation", "--bootstrap", bootstrap, "--db", db]
    cmd += ["--bench-root", str(tmp_path), "--scorer-url", url, "--port", "0", "--http-port", "-1"]
    missing = subprocess.run([*cmd, "--evaluate-models", "nowhere.jsonl"], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "--evaluate-models" in missing.stderr and "nowhere.jsonl" in missing.stderr

    service = subprocess.Popen([*cmd, "--evaluate-models", "human.jsonl"], env=dict(os.environ), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    engine = create_engine_for(StoreConfig(db))
    worker, sink = ScoreWorker(bootstrap, url), ResultSink(bootstrap, engine)
    try:
        announce(bootstrap, MODEL)

        def evaluated_once() -> bool:
            with session_scope(engine) as session:
                return [r.state for r in repository.runs_of_model(session, MODEL)] == ["succeeded"]

        with pump(worker.consumer, sink.consumer) as running:
            running.wait_for(evaluated_once, timeout=180, what="the model's run")
        service.send_signal(signal.SIGTERM)
        _, stderr = service.communicate(timeout=60)
    finally:
        if service.poll() is None:
            service.kill()
        worker.close()
        sink.close()
        engine.dispose()
    assert service.returncode == 0, stderr[-2000:]
