"""EvaluationService over real gRPC: StartRun through the real broker to a real scorer, GetRun's progress
and metrics, on SQLite and PostgreSQL; bad requests get INVALID_ARGUMENT/NOT_FOUND/UNAVAILABLE and store nothing."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf.json_format import MessageToDict
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import Engine, func, select

from cheems.v1 import evaluation_pb2, evaluation_pb2_grpc
from evaluator.metrics import Semantics
from evaluator.pipeline import ResultSink, ScoreWorker, compute, result_proto
from evaluator.server import EvaluationServicer, host, resolve_bench
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.hosting import GrpcHost, HostConfig
from services.scorer.runtime import ScorerServer
from services.store.db import session_scope
from services.store.models import EvalRun, EvalScore

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


@pytest.fixture
def bench_root(tmp_path: Path) -> Path:
    root = tmp_path / "bench"
    root.mkdir()
    for name in ("open.jsonl", "human.jsonl"):
        shutil.copy(SAMPLE / name, root / name)
    (root / "bad.jsonl").write_text('{"input": "你好", "responses": "not a list"}\n', encoding="utf-8")
    return root


@pytest.fixture
def service(engine: Engine, broker: EmbeddedBroker, bench_root: Path) -> Iterator[tuple[GrpcHost, grpc.Channel]]:
    publisher = Publisher(broker.bootstrap)
    grpc_host = host(EvaluationServicer(engine, publisher, bench_root), HostConfig(port=0, host="127.0.0.1")).start()
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_host.port}")
    yield grpc_host, channel
    channel.close()
    grpc_host.stop(0)
    publisher.close()


def stub(channel: grpc.Channel) -> evaluation_pb2_grpc.EvaluationServiceStub:
    return evaluation_pb2_grpc.EvaluationServiceStub(channel)


def test_start_run_then_get_run_until_the_metrics_arrive(
    engine: Engine, broker: EmbeddedBroker, scorer: ScorerServer, service: tuple[GrpcHost, grpc.Channel]
) -> None:
    scorer_url = f"127.0.0.1:{scorer.grpc_port}"
    started = stub(service[1]).StartRun(
        evaluation_pb2.StartRunRequest(
            bench_files=["open.jsonl", "human.jsonl"],
            scorer_url=scorer_url,
            semantics=evaluation_pb2.SEMANTICS_OFFICIAL,
        ),
        timeout=30,
    )
    assert started.state == evaluation_pb2.RUN_STATE_RUNNING and (started.items_scored, started.items_total) == (0, 36)
    assert [Path(p).name for p in started.bench_files] == ["open.jsonl", "human.jsonl"]
    assert not started.HasField("result")

    group = uuid.uuid4().hex[:8]  # groups of this test's own: the module's broker serves both databases
    worker = ScoreWorker(broker.bootstrap, scorer_url, group=f"workers-{group}")
    sink = ResultSink(broker.bootstrap, engine, group=f"sink-{group}")
    seen_progress = set()
    deadline = time.monotonic() + 180
    try:
        while (run := stub(service[1]).GetRun(evaluation_pb2.GetRunRequest(run_id=started.run_id))).state != (
            evaluation_pb2.RUN_STATE_SUCCEEDED
        ):
            assert time.monotonic() < deadline, f"run not done: {run.items_scored}/{run.items_total}"
            seen_progress.add(run.items_scored)
            worker.consumer.poll_once(200)
            sink.consumer.poll_once(200)
    finally:
        worker.close()
        sink.close()
    assert run.items_scored == run.items_total == 36 and run.scorer_url == scorer_url
    assert run.semantics == evaluation_pb2.SEMANTICS_OFFICIAL
    with session_scope(engine) as session:
        rows = session.scalars(select(EvalScore).where(EvalScore.run_id == run.run_id)).all()
        scores = {r.item: dict(zip(r.response_ids, r.scores, strict=True)) for r in rows}
    expected = result_proto(
        compute([str(SAMPLE / "open.jsonl"), str(SAMPLE / "human.jsonl")], scores, Semantics.OFFICIAL)
    )
    assert MessageToDict(run.result) == MessageToDict(expected)
    assert set(run.result.subsets) == {"open", "human"} and 0.0 <= run.result.overall <= 1.0


@pytest.mark.parametrize(
    ("files", "scorer_url", "message"),
    [
        ([], "h:1", "bench_files: name at least one"),
        (["../open.jsonl"], "h:1", "bench_files[0]: '../open.jsonl' is not a file under the bench root"),
        (["open.jsonl", "/etc/hostname"], "h:1", "bench_files[1]: '/etc/hostname' is not a file under the bench root"),
        (["missing.jsonl"], "h:1", "bench_files[0]: no file 'missing.jsonl'"),
        (["open.jsonl"], "  ", "scorer_url: give the scorer's gRPC address"),
        (["open.jsonl", "bad.jsonl"], "h:1", "bad.jsonl:1"),
    ],
)
def test_bad_start_requests_are_invalid_and_store_nothing(
    engine: Engine, service: tuple[GrpcHost, grpc.Channel], files: list[str], scorer_url: str, message: str
) -> None:
    with pytest.raises(grpc.RpcError) as error:
        stub(service[1]).StartRun(evaluation_pb2.StartRunRequest(bench_files=files, scorer_url=scorer_url), timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (error.value.details() or "")
    with session_scope(engine) as session:
        assert session.scalar(select(func.count()).select_from(EvalRun)) == 0
    health = health_pb2_grpc.HealthStub(service[1]).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING  # still serving


def test_get_run_of_an_unknown_or_empty_id(service: tuple[GrpcHost, grpc.Channel]) -> None:
    for run_id, code in (("nope", grpc.StatusCode.NOT_FOUND), ("", grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.RpcError) as error:
            stub(service[1]).GetRun(evaluation_pb2.GetRunRequest(run_id=run_id), timeout=10)
        assert error.value.code() == code


def test_a_broker_that_is_gone_is_unavailable_and_the_run_is_failed(engine: Engine, bench_root: Path) -> None:
    gone = EmbeddedBroker().start()
    publisher = Publisher(gone.bootstrap, max_block_ms=2000)
    gone.stop()
    grpc_host = host(EvaluationServicer(engine, publisher, bench_root), HostConfig(port=0, host="127.0.0.1")).start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_host.port}") as channel:
            with pytest.raises(grpc.RpcError) as error:
                stub(channel).StartRun(
                    evaluation_pb2.StartRunRequest(bench_files=["open.jsonl"], scorer_url="h:1"), timeout=60
                )
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE
            with session_scope(engine) as session:
                (run,) = session.scalars(select(EvalRun)).all()
            failed = stub(channel).GetRun(evaluation_pb2.GetRunRequest(run_id=run.id), timeout=10)
            assert failed.state == evaluation_pb2.RUN_STATE_FAILED and failed.error
    finally:
        grpc_host.stop(0)


def test_resolve_bench_stays_under_the_root(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "sub").mkdir()
    assert resolve_bench(tmp_path, ["a.jsonl", "sub/../a.jsonl"]) == [(tmp_path / "a.jsonl").resolve()] * 2
    (tmp_path / "sub" / "link.jsonl").symlink_to("/etc/hostname")
    with pytest.raises(ValueError, match="not a file under the bench root"):
        resolve_bench(tmp_path, ["sub/link.jsonl"])
