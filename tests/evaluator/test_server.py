"""EvaluationService over real gRPC: StartRun through the real broker to a real scorer, GetRun's progress
and metrics, on SQLite and PostgreSQL; bad requests get INVALID_ARGUMENT/NOT_FOUND/UNAVAILABLE (with the
`cheems-error-reason` trailer) and store nothing; undefined metrics stay unset, never 0.0."""

from __future__ import annotations

import json
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

from cheems.formats.cheemsbench import BenchItem
from cheems.formats.responses import Response
from cheems.roles import OPERATOR
from cheems.v1 import evaluation_pb2, evaluation_pb2_grpc, events_pb2
from evaluator.convert import result_proto
from evaluator.evaluate import EvalOptions, evaluate, load_subsets
from evaluator.metrics import Semantics
from evaluator.pipeline.runs import rewards_of
from evaluator.pipeline.sink import ResultSink
from evaluator.pipeline.worker import ScoreWorker
from evaluator.report import to_json
from evaluator.server import EvaluationServicer, host, resolve_bench
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.channels import open_channel
from services.grpc_errors import REASON_KEY
from services.hosting import GrpcHost, HostConfig
from services.scorer.runtime import ScorerServer
from services.store import repository
from services.store.accounts import AccountBook
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import EvalRun, EvalScore
from tests.conftest import _postgres_schema
from tests.services.accounts import account

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"


def make_bench_root(folder: Path) -> Path:
    root = folder / "bench"
    root.mkdir()
    for name in ("open.jsonl", "human.jsonl"):
        shutil.copy(SAMPLE / name, root / name)
    (root / "bad.jsonl").write_text('{"input": "你好", "responses": "not a list"}\n', encoding="utf-8")
    return root


@pytest.fixture
def bench_root(tmp_path: Path) -> Path:
    return make_bench_root(tmp_path)


@pytest.fixture(scope="module")
def served_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bench root of the module's service (a test may add a file of its own to it)."""
    return make_bench_root(tmp_path_factory.mktemp("served"))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    """A migrated store shared by the module's service tests (each checks what it stored by run id, or that a
    refused request left the count of runs as it was)."""
    schema = _postgres_schema() if request.param == "postgresql" else None
    url = next(schema) if schema is not None else f"sqlite:///{tmp_path_factory.mktemp('store') / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    try:
        yield engine
    finally:
        engine.dispose()
        if schema is not None:
            next(schema, None)


def run_count(engine: Engine) -> int:
    with session_scope(engine) as session:
        return session.scalar(select(func.count()).select_from(EvalRun)) or 0


@pytest.fixture(scope="module")
def service(store: Engine, broker: EmbeddedBroker, served_root: Path) -> Iterator[tuple[GrpcHost, grpc.Channel]]:
    """EvaluationService over gRPC on the module's store: one per database, shared by the tests that call it."""
    engine, bench_root = store, served_root
    publisher = Publisher(broker.bootstrap)
    servicer = EvaluationServicer(engine, publisher, bench_root)
    grpc_host = host(servicer, HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    channel = open_channel(f"127.0.0.1:{grpc_host.port}", token=account(engine, "ops", OPERATOR))
    yield grpc_host, channel
    channel.close()
    grpc_host.stop(0)
    publisher.close()


def stub(channel: grpc.Channel) -> evaluation_pb2_grpc.EvaluationServiceStub:
    return evaluation_pb2_grpc.EvaluationServiceStub(channel)


def test_start_run_then_get_run_until_the_metrics_arrive(
    store: Engine, broker: EmbeddedBroker, scorer: ScorerServer, service: tuple[GrpcHost, grpc.Channel]
) -> None:
    scorer_url = f"127.0.0.1:{scorer.grpc_port}"
    started = stub(service[1]).StartRun(
        evaluation_pb2.StartRunRequest(
            bench_files=["open.jsonl", "human.jsonl"],
            scorer_url=scorer_url,
            semantics=evaluation_pb2.SEMANTICS_OFFICIAL,
            ece_bins=3,
        ),
        timeout=30,
    )
    assert started.state == evaluation_pb2.RUN_STATE_RUNNING and (started.items_scored, started.items_total) == (0, 36)
    assert started.ece_bins == 3
    assert [Path(p).name for p in started.bench_files] == ["open.jsonl", "human.jsonl"]
    assert not started.HasField("result")

    group = uuid.uuid4().hex[:8]  # groups of this test's own: the module's broker serves both databases
    worker = ScoreWorker(broker.bootstrap, scorer_url, group=f"workers-{group}")
    sink = ResultSink(broker.bootstrap, store, group=f"sink-{group}")
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
    with session_scope(store) as session:
        rows = session.scalars(select(EvalScore).where(EvalScore.run_id == run.run_id)).all()
        scores = {r.item: dict(zip(r.response_ids, r.scores, strict=True)) for r in rows}
    subsets = load_subsets([str(SAMPLE / "open.jsonl"), str(SAMPLE / "human.jsonl")])
    expected = result_proto(evaluate(subsets, rewards_of(subsets, scores), EvalOptions(Semantics.OFFICIAL, 3)))
    assert MessageToDict(run.result) == MessageToDict(expected)
    assert set(run.result.subsets) == {"open", "human"} and 0.0 <= run.result.overall <= 1.0


@pytest.mark.parametrize(
    ("files", "scorer_url", "message"),
    [
        ([], "h:1", "bench_files: name at least one"),
        (["../open.jsonl"], "h:1", "bench_files[0]: '../open.jsonl' is not a file under the bench root"),
        (["open.jsonl", "/etc/hostname"], "h:1", "bench_files[1]: '/etc/hostname' is not a file under the bench root"),
        (["missing.jsonl"], "h:1", "bench_files[0]: no file 'missing.jsonl'"),
        (["open.jsonl", "open\x00.jsonl"], "h:1", "bench_files[1]: 'open\\x00.jsonl' is not a file name"),
        (["a" * 300], "h:1", "is not a file name"),  # longer than a file name may be (was INTERNAL)
        (["open.jsonl"], "  ", "scorer_url: give the scorer's gRPC address"),
        (["open.jsonl", "bad.jsonl"], "h:1", "bad.jsonl:1"),
    ],
)
def test_bad_start_requests_are_invalid_and_store_nothing(
    store: Engine, service: tuple[GrpcHost, grpc.Channel], files: list[str], scorer_url: str, message: str
) -> None:
    runs = run_count(store)
    with pytest.raises(grpc.RpcError) as error:
        stub(service[1]).StartRun(evaluation_pb2.StartRunRequest(bench_files=files, scorer_url=scorer_url), timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (error.value.details() or "")
    assert run_count(store) == runs
    health = health_pb2_grpc.HealthStub(service[1]).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    assert health.status == health_pb2.HealthCheckResponse.SERVING  # still serving


DEEP = b"[" * 100_000 + b"]" * 100_000
BENCH_LINE = json.dumps(
    {
        "input": "谁最矮？",
        "responses": [{"id": "r1", "content": "甲"}, {"id": "r2", "content": "丙"}],
        "rank": {"r1": 2, "r2": 1},
    },
    ensure_ascii=False,
).encode()[:-1]  # without its closing brace: each case adds its own last field


@pytest.mark.parametrize(
    ("last_field", "message"),
    [
        (b'"category": ["\\ud800"]', "poison.jsonl:2: category[0]: a lone surrogate"),
        (b'"category": ["\xe6\x8e"]', "poison.jsonl:2: invalid UTF-8"),
        (b'"category": ["x"], "deep": ' + DEEP, "poison.jsonl:2: invalid JSON (nested deeper than"),
        (b'"category": ["x"], "n": ' + b"7" * 5000, "poison.jsonl:2: invalid JSON"),
        (
            b'"category": ["x"], "rank": {"r1": "' + b"1" * 5000 + b'", "r2": 1}',
            "poison.jsonl:2: rank: rank of 'r1' is too long",
        ),
    ],
)
def test_a_hostile_bench_file_is_invalid_argument_naming_file_and_line(
    store: Engine, service: tuple[GrpcHost, grpc.Channel], served_root: Path, last_field: bytes, message: str
) -> None:
    """What would fail later (a lone surrogate reaches the database when the run completes) is refused at StartRun."""
    good = BENCH_LINE.replace("谁".encode(), "哪个".encode()) + ', "category": ["推理"]}\n'.encode()
    (served_root / "poison.jsonl").write_bytes(good + BENCH_LINE + b", " + last_field + b"}\n")
    runs = run_count(store)
    with pytest.raises(grpc.RpcError) as error:
        stub(service[1]).StartRun(
            evaluation_pb2.StartRunRequest(bench_files=["open.jsonl", "poison.jsonl"], scorer_url="h:1"), timeout=30
        )
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and reason(error.value) == "invalid_request"
    assert message in (error.value.details() or "")
    assert run_count(store) == runs


def test_a_failed_run_reports_why(store: Engine, service: tuple[GrpcHost, grpc.Channel]) -> None:
    with session_scope(store) as session:
        run_id = repository.create_run(session, ["tiny.jsonl"], "h:1", "paper", 5, 1)
        assert repository.fail_run(session, run_id, "tiny.jsonl:1: category[0]: a lone surrogate \ud800")
        assert not repository.fail_run(session, run_id, "again")  # the first reason stays
    run = stub(service[1]).GetRun(evaluation_pb2.GetRunRequest(run_id=run_id), timeout=10)
    assert run.state == evaluation_pb2.RUN_STATE_FAILED and not run.HasField("result")
    assert run.error == "tiny.jsonl:1: category[0]: a lone surrogate \\ud800"  # stored and sent as valid text


def test_bad_ece_bins_are_invalid_and_store_nothing(store: Engine, service: tuple[GrpcHost, grpc.Channel]) -> None:
    request = evaluation_pb2.StartRunRequest(bench_files=["open.jsonl"], scorer_url="h:1", ece_bins=-2)
    runs = run_count(store)
    with pytest.raises(grpc.RpcError) as error:
        stub(service[1]).StartRun(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.value.details() or "").startswith("ece_bins: ")
    assert reason(error.value) == "invalid_request"
    assert run_count(store) == runs


def reason(error: grpc.RpcError) -> str | None:
    return dict(error.trailing_metadata() or ()).get(REASON_KEY)  # type: ignore[attr-defined]


def test_get_run_of_an_unknown_or_empty_id(service: tuple[GrpcHost, grpc.Channel]) -> None:
    cases = (
        ("nope", grpc.StatusCode.NOT_FOUND, "not_found"),
        ("", grpc.StatusCode.INVALID_ARGUMENT, "invalid_request"),
    )
    for run_id, code, why in cases:
        with pytest.raises(grpc.RpcError) as error:
            stub(service[1]).GetRun(evaluation_pb2.GetRunRequest(run_id=run_id), timeout=10)
        assert error.value.code() == code and reason(error.value) == why


def test_a_category_without_pairs_has_unset_accuracy_and_ece_over_grpc(
    store: Engine, service: tuple[GrpcHost, grpc.Channel]
) -> None:
    """null in the stored JSON stays unset in the message (HasField false), never 0.0."""
    bench = {"tiny": ("tiny.jsonl", [item("甲乙丙谁最高？", "推理", [1, 2]), item("你好", "闲聊", [1, 1])])}
    rewards = {("甲乙丙谁最高？", "a"): 1.0, ("甲乙丙谁最高？", "b"): 0.0, ("你好", "a"): 0.5, ("你好", "b"): 0.2}
    result = evaluate(bench, rewards)
    with session_scope(store) as session:
        run_id = repository.create_run(session, ["tiny.jsonl"], "h:1", "paper", 5, 2)
        for index in range(2):
            repository.record_scores(session, run_id, f"tiny:{index}", {"a": 0.0, "b": 0.0})
        repository.end_run(session, run_id, to_json(result))
    run = stub(service[1]).GetRun(evaluation_pb2.GetRunRequest(run_id=run_id), timeout=10)
    assert run.state == evaluation_pb2.RUN_STATE_SUCCEEDED and run.ece_bins == 5
    subset = run.result.subsets["tiny"]
    chat, reasoning = subset.per_category["闲聊"], subset.per_category["推理"]
    assert not chat.HasField("accuracy") and not chat.HasField("ece") and chat.pairs == 0
    assert chat.exact_match == 1.0  # no comparisons: an exact match (an empty conjunction)
    assert reasoning.HasField("accuracy") and reasoning.accuracy == 1.0 and reasoning.HasField("ece")
    assert subset.HasField("ece") and subset.accuracy == 1.0


def item(prompt: str, category: str, ranks: list[int]) -> BenchItem:
    responses = (Response("a", "回答一"), Response("b", "回答二"))
    return BenchItem(prompt, responses, dict(zip("ab", ranks, strict=True)), (category,))


def test_a_broker_that_is_gone_is_unavailable_and_the_run_is_failed(engine: Engine, bench_root: Path) -> None:
    gone = EmbeddedBroker().start()
    publisher = Publisher(gone.bootstrap, max_block_ms=2000)
    gone.stop()
    servicer = EvaluationServicer(engine, publisher, bench_root)
    grpc_host = host(servicer, HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    try:
        with open_channel(f"127.0.0.1:{grpc_host.port}", token=account(engine, "ops", OPERATOR)) as channel:
            with pytest.raises(grpc.RpcError) as error:
                stub(channel).StartRun(
                    evaluation_pb2.StartRunRequest(bench_files=["open.jsonl"], scorer_url="h:1"), timeout=60
                )
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE and reason(error.value) == "unavailable"
            with session_scope(engine) as session:
                (run,) = session.scalars(select(EvalRun)).all()
            failed = stub(channel).GetRun(evaluation_pb2.GetRunRequest(run_id=run.id), timeout=10)
            assert failed.state == evaluation_pb2.RUN_STATE_FAILED and failed.error
    finally:
        grpc_host.stop(0)


def test_a_replaced_broker_fails_start_run_instead_of_losing_its_requests(engine: Engine, bench_root: Path) -> None:
    """Issue 41: after the broker was replaced, the producer failed every send for good (InitProducerId
    UnknownError) and StartRun still answered OK, its score requests lost. Now StartRun answers OK only once
    every request is acknowledged; a failed one is UNAVAILABLE, and the next StartRun gets a new producer."""
    first = EmbeddedBroker().start()
    first.create_topics([topics.SCORE_REQUESTS], partitions=2)
    publisher = Publisher(first.bootstrap, max_block_ms=5000)
    publisher.publish(topics.SCORE_REQUESTS, "k", events_pb2.ScoreRequestEvent()).get(30)  # a producer id
    first.stop()
    replaced = EmbeddedBroker(port=first.port).start()  # the same address, a new broker (memory: topics anew)
    replaced.create_topics([topics.SCORE_REQUESTS], partitions=2)
    grpc_host = host(EvaluationServicer(engine, publisher, bench_root), HostConfig(port=0, host="127.0.0.1"),
                     AccountBook(engine)).start()  # fmt: skip
    request = evaluation_pb2.StartRunRequest(bench_files=["human.jsonl"], scorer_url="h:1")
    try:
        with open_channel(f"127.0.0.1:{grpc_host.port}", token=account(engine, "ops", OPERATOR)) as channel:
            with pytest.raises(grpc.RpcError) as error:
                stub(channel).StartRun(request, timeout=60)
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE
            started = stub(channel).StartRun(request, timeout=60)  # a new producer: the broker takes them
        with session_scope(engine) as session:
            states = {run.id: run.state for run in session.scalars(select(EvalRun))}
        assert states.pop(started.run_id) == "running" and list(states.values()) == ["failed"]
    finally:
        grpc_host.stop(0)
        publisher.close(timeout=5)
        replaced.stop()


def test_resolve_bench_stays_under_the_root(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "sub").mkdir()
    assert resolve_bench(tmp_path, ["a.jsonl", "sub/../a.jsonl"]) == [(tmp_path / "a.jsonl").resolve()] * 2
    (tmp_path / "sub" / "link.jsonl").symlink_to("/etc/hostname")
    with pytest.raises(ValueError, match="not a file under the bench root"):
        resolve_bench(tmp_path, ["sub/link.jsonl"])
