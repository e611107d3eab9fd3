"""An evaluation run through Kafka is one trace: StartRun in the evaluation service, its score requests, the
worker's ScoreBatch calls and the scorer's answers, the scores and the sink that stores them, and the run's result
event, each process exporting its own spans over OTLP/gRPC to a real receiver started here.

Real processes (`cheems serve`, `cheems service evaluation | eval-worker | eval-sink`) on the module's broker,
traced through the standard `OTEL_EXPORTER_OTLP_ENDPOINT` and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from cheems.processes.ports import free_port
from cheems.roles import OPERATOR
from cheems.v1 import evaluation_pb2, evaluation_pb2_grpc
from evaluator.pipeline.runs import run_state
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.store.db import StoreConfig, create_engine_for
from services.store.migrate import upgrade
from tests.services.accounts import account, bearer
from tests.services.observe.collector import Collector, in_service, traced_processes
from tests.services.processes import Service, wait_for

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

SAMPLE = Path(__file__).resolve().parents[3] / "data" / "sample"
SERVICES = {"evaluation", "eval-worker", "scorer", "eval-sink"}


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    with Collector() as running:
        traced_processes(running, monkeypatch)
        yield running


def test_an_evaluation_run_is_one_trace_across_its_services(
    broker: EmbeddedBroker, checkpoint: Path, collector: Collector, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    token = account(engine, "operator", OPERATOR)
    (tmp_path / "bench").mkdir()
    lines = (SAMPLE / "open.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "bench" / "open.jsonl").write_text("".join(lines[:6]), encoding="utf-8")  # the trace's shape is
    # the same for 6 items as for 18: each one's request, batch, call, score and the result
    scorer_port, evaluation_port = free_port(), free_port()
    scorer_url = f"127.0.0.1:{scorer_port}"
    store_bus = ["--db", url, "--bootstrap", broker.bootstrap]
    started: list[Service] = []

    def start(name: str, *args: str) -> Service:
        started.append(Service(args, tmp_path / name))
        return started[-1]

    try:
        scorer = start("scorer", "serve", "--model", str(checkpoint), "--backend", "torch", "--host", "127.0.0.1",
                       "--grpc-port", str(scorer_port), "--http-port", "-1")  # fmt: skip
        evaluation = start("evaluation", "service", "evaluation", *store_bus, "--bench-root", str(tmp_path / "bench"),
                           "--scorer-url", scorer_url, "--port", str(evaluation_port), "--http-port", "-1")  # fmt: skip
        worker = start("worker", "service", "eval-worker", "--bootstrap", broker.bootstrap, "--scorer-url", scorer_url,
                       "--health-port", "-1")  # fmt: skip
        sink = start("sink", "service", "eval-sink", *store_bus, "--health-port", "-1")
        evaluation.wait_serving(evaluation_port, [""], timeout=120)
        scorer.wait_serving(scorer_port, [""], timeout=180)
        with grpc.insecure_channel(f"127.0.0.1:{evaluation_port}") as channel:  # the test's own call: untraced
            request = evaluation_pb2.StartRunRequest(bench_files=["open.jsonl"], scorer_url=scorer_url)
            run = evaluation_pb2_grpc.EvaluationServiceStub(channel).StartRun(request, metadata=bearer(token))
        wait_for(lambda: run_state(engine, run.run_id).state == "succeeded", "the run", timeout=240, alive=sink)
        assert worker.process.poll() is None
        for service in reversed(started):
            assert service.stop() == 0, service.output()  # a clean stop flushes what is queued
    finally:
        for service in started:
            service.kill()
        engine.dispose()

    spans = collector.spans()
    (start_run,) = in_service(spans, "evaluation", "/cheems.v1.EvaluationService/StartRun", "server")
    assert start_run.parent_id == ""  # the root: the test's call carried no context
    trace = [s for s in spans if s.trace_id == start_run.trace_id]
    assert {s.service for s in trace} == SERVICES
    ids = {s.span_id for s in trace}
    assert [s for s in trace if s.parent_id not in ids and s is not start_run] == []  # one tree, nothing dangling
    by_id = {s.span_id: s for s in trace}

    requests = in_service(trace, "evaluation", f"send {topics.SCORE_REQUESTS}", "producer")
    assert len(requests) == run.items_total and {s.parent_id for s in requests} == {start_run.span_id}
    for batch in in_service(trace, "eval-worker", f"process {topics.SCORE_REQUESTS}", "consumer"):
        assert by_id[batch.parent_id] in requests and batch.attributes["messaging.system"] == "kafka"
    calls = in_service(trace, "eval-worker", "/cheems.v1.RewardService/ScoreBatch", "client")
    assert {by_id[c.parent_id].name for c in calls} == {f"process {topics.SCORE_REQUESTS}"}
    answers = in_service(trace, "scorer", "/cheems.v1.RewardService/ScoreBatch", "server")
    assert {a.parent_id for a in answers} == {c.span_id for c in calls}  # traceparent in the call's metadata
    scores = in_service(trace, "eval-worker", f"send {topics.SCORES}", "producer")  # at least once: maybe redone
    assert len({s.attributes["messaging.kafka.message.key"] for s in scores}) == run.items_total
    stored = in_service(trace, "eval-sink", f"process {topics.SCORES}", "consumer")
    assert {by_id[s.parent_id].name for s in stored} == {f"send {topics.SCORES}"}
    (result,) = in_service(trace, "eval-sink", f"send {topics.EVAL_RESULTS}", "producer")  # the relay, after commit
    assert by_id[result.parent_id] in stored  # the batch that completed the run queued it
