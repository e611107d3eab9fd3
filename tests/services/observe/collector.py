"""A real OTLP receiver for tests: opentelemetry-proto's gRPC TraceService, keeping every span it is sent.

with Collector() as collector:                      # listens on 127.0.0.1, any free port
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint
    ... run traced processes, stop them ...
    spans = collector.spans()                        # [Received(service, name, kind, trace_id, ...)]
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Any, NamedTuple

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

KINDS = {  # OTLP's Span.SpanKind by name
    "server": trace_pb2.Span.SPAN_KIND_SERVER,
    "client": trace_pb2.Span.SPAN_KIND_CLIENT,
    "producer": trace_pb2.Span.SPAN_KIND_PRODUCER,
    "consumer": trace_pb2.Span.SPAN_KIND_CONSUMER,
    "internal": trace_pb2.Span.SPAN_KIND_INTERNAL,
}


class Received(NamedTuple):
    service: str  # the resource's service.name
    name: str
    kind: str  # a key of KINDS
    trace_id: str  # hex
    span_id: str
    parent_id: str  # "" for a root span
    attributes: dict[str, Any]
    links: list[str]  # the trace ids of its links


def _value(any_value: Any) -> Any:
    field = any_value.WhichOneof("value")
    return getattr(any_value, field) if field else None


def _received(service: str, span: Any) -> Received:
    kind = next((name for name, number in KINDS.items() if number == span.kind), str(span.kind))
    return Received(
        service, span.name, kind, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(),
        {a.key: _value(a.value) for a in span.attributes}, [link.trace_id.hex() for link in span.links],
    )  # fmt: skip


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, port: int = 0) -> None:
        """`port`: where to listen (0 = any free port; a taken one falls back to that)."""
        self._spans: list[Received] = []
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        try:
            self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")
        except RuntimeError:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"  # http: plaintext, as the exporter reads it

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        for resource_spans in request.resource_spans:
            attributes = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            service = str(attributes.get("service.name", ""))
            with self._lock:
                self._spans += [_received(service, s) for scope in resource_spans.scope_spans for s in scope.spans]
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[Received]:
        with self._lock:
            return list(self._spans)

    def __enter__(self) -> Collector:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop(0).wait()


def traced_processes(collector: Collector, monkeypatch: Any) -> None:
    """Processes the test starts from now on (they inherit the environment) trace to `collector`, under their own
    service names, sending what they hold every half second."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "500")
    for name in ("OTEL_SERVICE_NAME", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)


def in_service(spans: list[Received], service: str, name: str, kind: str) -> list[Received]:
    """The spans of `service` named `name` of `kind`; fails, listing what there is, when there are none."""
    found = [s for s in spans if (s.service, s.name, s.kind) == (service, name, kind)]
    assert found, f"no {kind} span {name!r} of {service} among {sorted({(s.service, s.name) for s in spans})}"
    return found
