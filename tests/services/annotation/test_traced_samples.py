"""A sample is one trace from Ingest to its annotation tasks: the ingestion service's Ingest call, the relay sending
the sample event after the commit, and the annotation service's intake turning it into triple-wise tasks, each
process exporting its spans over OTLP/gRPC to a real receiver started here (`cheems service ingestion |
annotation` on the module's broker, traced through `OTEL_EXPORTER_OTLP_ENDPOINT` alone)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from cheems.processes.ports import free_port
from cheems.roles import OPERATOR
from cheems.v1 import common_pb2, ingestion_pb2, ingestion_pb2_grpc
from services.annotation.server import SERVICE
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.channels import open_channel
from services.ingestion.server import SERVICE as INGESTION
from services.store.db import StoreConfig, create_engine_for, session_scope
from services.store.migrate import upgrade
from services.store.models import AnnotationTask
from tests.services.accounts import account
from tests.services.observe.collector import Collector, in_service, traced_processes
from tests.services.processes import Service, wait_for

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


@pytest.fixture
def collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[Collector]:
    with Collector() as running:
        traced_processes(running, monkeypatch)
        yield running


def test_a_sample_is_one_trace_from_ingest_to_its_annotation_tasks(
    broker: EmbeddedBroker, collector: Collector, unique: Callable[[str], str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'cheems.db'}"
    upgrade(url)
    engine = create_engine_for(StoreConfig(url))
    token = account(engine, "etl", OPERATOR)
    ingestion_port, annotation_port = free_port(), free_port()
    store_bus = ["--db", url, "--bootstrap", broker.bootstrap]
    prompt = unique("写一首关于秋天的诗")
    responses = [common_pb2.Response(id=f"r{i}", content=f"秋天的第{i}首诗") for i in range(1, 5)]
    started: list[Service] = []

    def tasks() -> int:
        with session_scope(engine) as session:
            return int(session.scalar(select(func.count()).select_from(AnnotationTask)) or 0)

    try:
        started.append(Service(["service", "ingestion", *store_bus, "--port", str(ingestion_port)], tmp_path / "i"))
        annotating = ["service", "annotation", *store_bus, "--port", str(annotation_port), "--http-port", "-1"]
        started.append(Service(annotating, tmp_path / "a"))
        ingestion, annotation = started
        ingestion.wait_serving(ingestion_port, ["", INGESTION])
        annotation.wait_serving(annotation_port, ["", SERVICE])
        with open_channel(f"127.0.0.1:{ingestion_port}", token=token) as channel:  # the test's call: untraced
            record = ingestion_pb2.IngestRecord(sample=common_pb2.Sample(prompt=prompt, responses=responses), line=1)
            summary = ingestion_pb2_grpc.IngestionServiceStub(channel).Ingest(iter([record]), timeout=60)
        assert summary.stored == 1
        wait_for(lambda: tasks() > 0, "the sample's tasks", timeout=120, alive=annotation)
        for service in reversed(started):
            assert service.stop() == 0, service.output()  # a clean stop flushes what is queued
    finally:
        for service in started:
            service.kill()
        engine.dispose()

    spans = collector.spans()
    (ingest,) = in_service(spans, "ingestion", "/cheems.v1.IngestionService/Ingest", "server")
    trace = {s.span_id: s for s in spans if s.trace_id == ingest.trace_id}
    (send,) = in_service(list(trace.values()), "ingestion", f"send {topics.SAMPLES}", "producer")  # the relay
    assert send.parent_id == ingest.span_id  # the context stored with the outbox row
    intake = in_service(list(trace.values()), "annotation", f"process {topics.SAMPLES}", "consumer")
    assert [s.parent_id for s in intake] == [send.span_id]
    assert intake[0].attributes["messaging.destination.name"] == topics.SAMPLES
