"""The long-running commands Kubernetes runs, as real processes (`cheems db upgrade`, its one-shot init step, in this
process), then `cheems service ingestion|annotation|evaluation|eval-worker|eval-sink` become SERVING on gRPC health,
do their work for an account's token (refusing a call without one; over TLS for ingestion), never show the token
in their logs or their command line (`ps`), and exit 0 on SIGTERM.

Here rather than under tests/cheems/ because the ingestion case runs on SQLite and PostgreSQL through
the `db_url` fixture of tests/conftest.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import func, select
from typer.testing import CliRunner

from cheems.processes.ports import free_port
from cheems.roles import OPERATOR
from cheems.v1 import (
    annotation_pb2,
    annotation_pb2_grpc,
    common_pb2,
    evaluation_pb2,
    evaluation_pb2_grpc,
    events_pb2,
    ingestion_pb2,
    ingestion_pb2_grpc,
)
from cheems_cli.main import app
from evaluator.evaluate import load_subsets
from evaluator.pipeline.runs import run_state, start_run
from evaluator.server import SERVICE as EVALUATION_SERVICE
from services.annotation.server import SERVICE as ANNOTATION_SERVICE
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.channels import open_channel, tls_credentials
from services.hosting import LIVENESS
from services.ingestion.server import SERVICE as INGESTION_SERVICE
from services.store import repository
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import head_revision
from services.store.models import Prompt, Response
from tests.services.accounts import account
from tests.services.processes import SERVING, Service
from tests.services.tls import self_signed

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample"
BENCH = [str(SAMPLE / "open.jsonl"), str(SAMPLE / "human.jsonl")]


Start = Callable[..., Service]


@pytest.fixture
def start() -> Iterator[Start]:
    """start(args, logs, port, name, tls=None): a `cheems` process, once health says SERVING for "", `name` and
    liveness on `port`; whatever still runs at the end of the test is killed."""
    started: list[Service] = []

    def run(
        args: Sequence[str], logs: Path, port: int, name: str, tls: grpc.ChannelCredentials | None = None
    ) -> Service:
        service = Service(args, logs)
        started.append(service)
        service.wait_serving(port, ["", name, LIVENESS], tls=tls)
        return service

    yield run
    for service in started:
        service.kill()


def db_upgrade(url: str) -> None:
    """`cheems db upgrade` (in this process: a one-shot command, no server; Kubernetes' init step runs the same)."""
    run = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
    assert run.exit_code == 0, (run.output[-3000:], run.exception)
    assert run.stdout.strip() == f"database at revision {head_revision()}"


def operator(url: str) -> str:
    """A token of an operator account of the store at `url`."""
    engine = create_engine_for(StoreConfig(url))
    try:
        return account(engine, "ops", OPERATOR)
    finally:
        engine.dispose()


def unseen(service: Service, token: str) -> None:
    """The token is in neither the process's command line (what `ps` shows) nor its output (all of it)."""
    cmdline = Path(f"/proc/{service.process.pid}/cmdline").read_bytes().decode(errors="replace")
    output = service.out.read_text(errors="replace") + service.err.read_text(errors="replace")
    assert token not in cmdline and token not in output


def json_lines(service: Service, name: str) -> list[dict]:
    """Every line the process wrote, each one JSON object with a time, level, logger and the service's name."""
    lines = (service.out.read_text() + service.err.read_text()).splitlines()
    records = [json.loads(line) for line in lines]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert {r["service"] for r in records} == {name}
    return records


def knock(channel: grpc.Channel, call: Callable[[grpc.Channel], object]) -> None:
    """The call made with a token no account has: UNAUTHENTICATED (and logged, never the token itself)."""
    with pytest.raises(grpc.RpcError) as info:
        call(channel)
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def count(url: str, model: type) -> int:
    engine = create_engine_for(StoreConfig(url))
    try:
        with session_scope(engine) as session:
            return int(session.scalar(select(func.count()).select_from(model)) or 0)
    finally:
        engine.dispose()


def test_db_upgrade_twice_is_a_no_op(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    db_upgrade(url)
    db_upgrade(url)


def test_ingestion_service(db_url: str, tmp_path: Path, start: Start) -> None:
    db_upgrade(db_url)
    token, (cert, key) = operator(db_url), self_signed(tmp_path)
    port, tls = free_port(), tls_credentials(cert)
    args = ["-v", "service", "ingestion", "--db", db_url, "--port", str(port), "--host", "127.0.0.1"]  # -v: debug logs
    service = start(
        [*args, "--tls-cert", str(cert), "--tls-key", str(key)], tmp_path / "i", port, INGESTION_SERVICE, tls
    )
    sample = common_pb2.Sample(
        prompt="你好",
        responses=[common_pb2.Response(id="r1", content="好"), common_pb2.Response(id="r2", content="嗨")],
    )
    records = [ingestion_pb2.IngestRecord(sample=sample, line=1), ingestion_pb2.IngestRecord(line=2)]
    with open_channel(f"localhost:{port}", tls) as anonymous:
        with pytest.raises(grpc.RpcError) as info:
            ingestion_pb2_grpc.IngestionServiceStub(anonymous).Ingest(iter(records), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with open_channel(f"localhost:{port}", tls, token="chm_wrong-token-of-nobody") as stranger:
        with pytest.raises(grpc.RpcError) as info:
            ingestion_pb2_grpc.IngestionServiceStub(stranger).Ingest(iter(records), timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert count(db_url, Prompt) == 0
    with open_channel(f"localhost:{port}", tls, token=token) as channel:
        summary = ingestion_pb2_grpc.IngestionServiceStub(channel).Ingest(iter(records), timeout=30)
        assert (summary.received, summary.stored, summary.rejected) == (2, 1, 1)
        assert [e.line for e in summary.errors] == [2]
    assert (count(db_url, Prompt), count(db_url, Response)) == (1, 2)
    unseen(service, token)
    unseen(service, "chm_wrong-token-of-nobody")
    assert service.stop() == 0, service.output()
    assert f"ingestion: gRPC 127.0.0.1:{port}" in service.out.read_text() and "refused" in service.err.read_text()


def test_annotation_service(tmp_path: Path, start: Start) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    db_upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    with session_scope(engine) as session:
        prompt_id, _ = repository.add_sample(
            session, "比较这三个回答", [("a", "甲"), ("b", "乙"), ("c", "丙")], ["推理"]
        )
    engine.dispose()
    port = free_port()
    service = start(
        ["--log-format", "json", "-v", "service", "annotation", "--db", url, "--port", str(port), "--http-port", "0",
         "--host", "127.0.0.1"],
        tmp_path / "a",
        port,
        ANNOTATION_SERVICE,
    )  # fmt: skip
    token, wrong = operator(url), "chm_wrong-token-of-nobody-Xq7Lm2Vb9Tz4Rk8Wn3Pd6"
    with open_channel(f"127.0.0.1:{port}", token=wrong) as stranger:
        ask = annotation_pb2.GetRankingRequest(prompt_id=prompt_id)
        knock(stranger, lambda c: annotation_pb2_grpc.AnnotationServiceStub(c).GetRanking(ask, timeout=10))
    with open_channel(f"127.0.0.1:{port}", token=token) as channel:
        stub = annotation_pb2_grpc.AnnotationServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.GetRanking(annotation_pb2.GetRankingRequest(prompt_id="no-such-prompt"), timeout=10)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == SERVING  # an error is no outage
        tasks = stub.CreateTasks(annotation_pb2.CreateTasksRequest(prompt_id=prompt_id, group_size=3), timeout=10)
        assert [sorted(t.response_ids) for t in tasks.tasks] == [["a", "b", "c"]]
    unseen(service, token)
    unseen(service, wrong)
    assert service.stop() == 0, service.output()
    records = json_lines(service, "annotation")  # JSON lines, the address it announced and the refusal included
    assert any(f"annotation: gRPC 127.0.0.1:{port}" in r["message"] for r in records)
    assert any("refused" in r["message"] and r["level"] == "INFO" for r in records)
    assert any(r["level"] == "DEBUG" for r in records)


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


def test_eval_worker_service(broker: EmbeddedBroker, tmp_path: Path, start: Start) -> None:
    port = free_port()
    args = ["--log-format", "json", "service", "eval-worker", "--bootstrap", broker.bootstrap, "--scorer-url"]
    service = start([*args, "127.0.0.1:1", "--health-port", str(port)], tmp_path / "w", port, "cheems.evaluator.worker")
    assert service.stop() == 0, service.output()
    assert any(r["message"] == f"worker: health on :{port}" for r in json_lines(service, "eval-worker"))


def test_eval_sink_service_finishes_a_run(broker: EmbeddedBroker, tmp_path: Path, start: Start) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    db_upgrade(url)
    port = free_port()
    args = ["service", "eval-sink", "--bootstrap", broker.bootstrap, "--db", url, "--health-port", str(port)]
    args = ["--log-format", "json", *args]
    service = start(args, tmp_path / "s", port, "cheems.evaluator.sink")
    engine = create_engine_for(StoreConfig(url))
    publisher = Publisher(broker.bootstrap)
    try:
        run_id = start_run(engine, publisher, BENCH, "unused:1")
        for name, (_, items) in load_subsets(BENCH).items():  # what score workers would publish
            for index, item in enumerate(items):
                ids = [r.id for r in item.responses]
                event = events_pb2.ScoreEvent(
                    run_id=run_id,
                    subset=name,
                    prompt_id=f"{name}:{index}",
                    response_ids=ids,
                    scores=[float(-i) for i in range(len(ids))],
                )
                publisher.publish(topics.SCORES, f"{name}:{index}", event)
        publisher.flush()
        deadline = time.monotonic() + 120
        while (state := run_state(engine, run_id))[0] != "succeeded":
            assert service.process.poll() is None, service.output()
            assert time.monotonic() < deadline, f"the sink did not finish the run: {state[:3]}\n{service.output()}"
            time.sleep(0.2)
        assert state[1] == state[2] == 36 and state[3] is not None and "overall" in state[3]
    finally:
        publisher.close()
        engine.dispose()
    assert service.stop() == 0, service.output()
    records = json_lines(service, "eval-sink")
    assert any(r["message"] == f"sink: health on :{port}" for r in records)
    assert any(r.get("run_id") == run_id and "complete" in r["message"] for r in records)  # its run, bound


def test_evaluation_service_starts_a_run(broker: EmbeddedBroker, tmp_path: Path, start: Start) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    db_upgrade(url)
    port = free_port()
    args = ["-v", "service", "evaluation", "--bootstrap", broker.bootstrap, "--db", url, "--bench-root", str(SAMPLE)]
    args += ["--http-port", "-1"]  # the leaderboard's HTTP: tests/evaluator/leaderboard/test_service.py
    service = start([*args, "--port", str(port), "--host", "127.0.0.1"], tmp_path / "e", port, EVALUATION_SERVICE)
    token, wrong = operator(url), "chm_wrong-token-of-nobody-Xq7Lm2Vb9Tz4Rk8Wn3Pd6"
    with open_channel(f"127.0.0.1:{port}", token=wrong) as stranger:
        ask = evaluation_pb2.GetRunRequest(run_id="nope")
        knock(stranger, lambda c: evaluation_pb2_grpc.EvaluationServiceStub(c).GetRun(ask, timeout=10))
    with open_channel(f"127.0.0.1:{port}", token=token) as channel:
        stub = evaluation_pb2_grpc.EvaluationServiceStub(channel)
        request = evaluation_pb2.StartRunRequest(bench_files=["open.jsonl"], scorer_url="127.0.0.1:1")
        run = stub.StartRun(request, timeout=30)
        assert run.state == evaluation_pb2.RUN_STATE_RUNNING and run.items_total > 0
        assert stub.GetRun(evaluation_pb2.GetRunRequest(run_id=run.run_id), timeout=10).run_id == run.run_id
    assert run_state(create_engine_for(StoreConfig(url)), run.run_id)[0] == "running"
    unseen(service, token)
    unseen(service, wrong)
    assert service.stop() == 0, service.output()
    assert "refused" in service.err.read_text()  # at INFO, among the debug lines
    assert f"evaluation: gRPC 127.0.0.1:{port}, bench root {SAMPLE}" in service.out.read_text()


def test_evaluation_service_refuses_a_bench_root_that_is_not_a_directory(tmp_path: Path) -> None:
    args = ["service", "evaluation", "--bootstrap", "127.0.0.1:1", "--bench-root", "nope"]
    run = CliRunner().invoke(app, args)  # refused before it starts anything: no process needed
    said = " ".join(run.stderr.translate(str.maketrans("│╭╮╰╯─", "      ")).split())  # rich's box unwrapped
    assert run.exit_code == 2 and "--bench-root" in said and "is not a directory" in said, said
