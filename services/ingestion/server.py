"""gRPC adapter of `cheems.v1.IngestionService`: a client stream of records in, one summary out.

Each streamed record is validated on its own: bad ones are reported with their line numbers in the
summary (the call itself succeeds), good ones are stored. GetSample of an unknown id is NOT_FOUND.
Every call needs an operator's or admin's bearer token (`services.access`): UNAUTHENTICATED without one, before
a record is read.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict
from prometheus_client import CollectorRegistry, Counter

from cheems.errors import FormatError
from cheems.v1 import common_pb2, ingestion_pb2, ingestion_pb2_grpc
from services.access import Authenticate, Guard
from services.hosting import GrpcHost, HostConfig
from services.ingestion.records import RecordError, SampleRecord, parse_sample
from services.ingestion.service import IngestionService
from services.observe.metrics import new_registry, serve_metrics

log = logging.getLogger(__name__)


def record_from_proto(record: ingestion_pb2.IngestRecord, index: int) -> SampleRecord:
    line = record.line or index
    sample = record.sample
    raw: dict[str, Any] = {
        "prompt": sample.prompt,
        "responses": [MessageToDict(r) for r in sample.responses],
        "category": list(sample.category),
    }
    if sample.system_prompt:
        raw["sys_prompt"] = sample.system_prompt
    if sample.history:
        raw["history"] = [{"role": m.role, "content": m.content} for m in sample.history]
    return dataclasses.replace(parse_sample(raw, "stream", line), source=sample.source)


RESULTS = ("stored", "duplicate", "rejected")


class IngestionServicer(ingestion_pb2_grpc.IngestionServiceServicer):
    def __init__(self, service: IngestionService, registry: CollectorRegistry | None = None) -> None:
        self.service = service
        registry = registry if registry is not None else new_registry()
        self.records = Counter(
            "cheems_ingest_records", "Records ingested over gRPC, by what became of them: stored, duplicate "
            "(the same prompt was stored before), rejected (invalid)", ["result"], registry=registry,
        )  # fmt: skip
        for result in RESULTS:
            self.records.labels(result)  # every result shown from the start, at 0

    def Ingest(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Any:
        samples: list[SampleRecord] = []
        errors: list[RecordError] = []
        for index, record in enumerate(request_iterator, start=1):
            try:
                samples.append(record_from_proto(record, index))
            except FormatError as e:
                errors.append(RecordError(record.line or index, e.field or "", e.message))
        summary = self.service.ingest(samples, errors)
        for result, count in zip(RESULTS, (summary.stored, summary.duplicates, summary.rejected), strict=True):
            self.records.labels(result).inc(count)
        return ingestion_pb2.IngestSummary(
            received=summary.received,
            stored=summary.stored,
            duplicates=summary.duplicates,
            rejected=summary.rejected,
            errors=[ingestion_pb2.RecordError(line=e.line, field=e.field, message=e.message) for e in summary.errors],
        )

    def GetSample(self, request: Any, context: grpc.ServicerContext) -> common_pb2.Sample:
        sample = self.service.get(request.prompt_id)
        if sample is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no sample {request.prompt_id!r}")
            raise AssertionError("abort raises")
        return sample


SERVICE = "cheems.v1.IngestionService"


def host(service: IngestionService, config: HostConfig, authenticate: Authenticate) -> GrpcHost:
    """The servicer on a GrpcHost (health, reflection), serving as soon as it is started; `authenticate`: the
    accounts its callers' tokens are checked against (`services.store.accounts.AccountBook`). Its metrics (the
    calls', the records') are in `grpc_host.registry`."""
    registry = new_registry()
    servicer = IngestionServicer(service, registry)
    grpc_host = GrpcHost(
        config,
        lambda server: ingestion_pb2_grpc.add_IngestionServiceServicer_to_server(servicer, server),
        [SERVICE],
        Guard(authenticate),
        registry,
    )
    grpc_host.set_serving(True)
    return grpc_host


def serve(
    db: str,
    bootstrap: str,
    config: HostConfig,
    on_ready: Callable[[int], None] | None = None,
    metrics_port: int = -1,
) -> None:
    """`cheems service ingestion`: migrate-free (run `cheems db upgrade` first), until SIGTERM; `/metrics` on
    `metrics_port` (HTTP, on config.host; -1 = none).

    With `bootstrap`, stored samples' events are relayed from the store's outbox (a thread); the service starts and
    answers while the broker is away (the events wait). `on_ready(port)` runs once the server listens (the port
    bound, which config.port 0 leaves open).
    """
    from services.bus.client import Publisher
    from services.bus.relay import RelayConfig
    from services.store.accounts import AccountBook
    from services.store.db import StoreConfig, create_engine_for

    relay = RelayConfig()
    publisher = Publisher(bootstrap, max_block_ms=int(relay.ack_timeout * 1000), connect=False) if bootstrap else None
    engine = create_engine_for(StoreConfig(db))
    service = IngestionService(engine, publisher, source="grpc", relay=relay)
    grpc_host = host(service, config, AccountBook(engine))
    exporter = serve_metrics(grpc_host.registry, config.host, metrics_port) if metrics_port >= 0 else None
    grpc_host.start()
    log.info("ingestion serving on %s:%d", config.host, grpc_host.port)
    if on_ready is not None:
        on_ready(grpc_host.port)
    try:
        grpc_host.wait_for_signal()
    finally:
        if exporter is not None:
            exporter.close()
        service.close()
        if publisher is not None:
            publisher.close(timeout=10)  # a broker that is down must not hold up the exit
