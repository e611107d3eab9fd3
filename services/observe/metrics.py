"""Prometheus metrics of a process: its registry, the gRPC RED interceptor, and `/metrics` over HTTP.

    registry = new_registry()                                   # process, GC and platform collectors
    server = grpc.server(pool, interceptors=[GrpcServerMetrics(registry), guard])   # first: refusals counted
    Route("/metrics", metrics_app(registry))                    # in a Starlette app that a process serves anyway
    exporter = serve_metrics(registry, "127.0.0.1", 8052)       # or its own HTTP server; exporter.port, .close()

Each server has a registry of its own (tests run several servers in one process). The gRPC metrics carry the
names and labels of go-grpc-prometheus, which Grafana dashboards and alert rules already know:
`grpc_server_started_total`, `grpc_server_handled_total{grpc_type,grpc_service,grpc_method,grpc_code}` and the
`grpc_server_handling_seconds` histogram; `grpc_code` is spelled as Go's `codes.Code` prints it ("OK",
"NotFound", "Unauthenticated"), as go-grpc-prometheus writes it. A call's code is the status its handler ended
with: OK when it returned, the code it set or aborted with, UNKNOWN when it raised (what gRPC answers then),
CANCELLED when the client went away in the middle of a streamed reply.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    make_asgi_app,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from cheems.errors import PortInUse

log = logging.getLogger(__name__)
# go-grpc-prometheus' default buckets (Prometheus' DefBuckets), seconds
HANDLING_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def new_registry() -> CollectorRegistry:
    """A registry with the process (CPU, memory, file descriptors), GC and Python platform collectors."""
    return add_process_collectors(CollectorRegistry())


def add_process_collectors(registry: CollectorRegistry) -> CollectorRegistry:
    """The process, GC and platform collectors added to a registry made elsewhere (once: a second time raises)."""
    ProcessCollector(registry=registry)
    GCCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def code_name(code: grpc.StatusCode) -> str:
    """A status code as Go's `codes.Code.String()` spells it: NOT_FOUND -> NotFound, OK -> OK."""
    if code is grpc.StatusCode.OK:
        return "OK"
    return "".join(part.capitalize() for part in code.name.split("_"))


def grpc_type(handler: grpc.RpcMethodHandler) -> str:
    if handler.request_streaming and handler.response_streaming:
        return "bidi_stream"
    if handler.request_streaming:
        return "client_stream"
    if handler.response_streaming:
        return "server_stream"
    return "unary"


class GrpcServerMetrics(grpc.ServerInterceptor):
    """Counts and times every call of the server it is installed on, named and labelled as go-grpc-prometheus.

    Install it first among the interceptors: the ones after it (`services.access.Guard`) may end a call with
    UNAUTHENTICATED or PERMISSION_DENIED, and those calls are counted too. A method the server does not have
    (UNIMPLEMENTED, answered by gRPC itself) is not counted.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["grpc_type", "grpc_service", "grpc_method"]
        self.started = Counter(
            "grpc_server_started", "Calls this server began to handle", labels, registry=registry
        )  # fmt: skip
        self.handled = Counter(
            "grpc_server_handled", "Calls this server finished, by the status code each ended with",
            [*labels, "grpc_code"], registry=registry,
        )  # fmt: skip
        self.seconds = Histogram(
            "grpc_server_handling_seconds", "Seconds from a call's start to its end in this server's handler",
            labels, buckets=HANDLING_BUCKETS, registry=registry,
        )  # fmt: skip

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        handler = continuation(details)
        if handler is None:
            return None
        service, _, method = details.method.lstrip("/").rpartition("/")
        labels = (grpc_type(handler), service, method)
        if handler.response_streaming:
            behaviour = handler.unary_stream or handler.stream_stream
            wrapped: Callable[..., Any] = self._streaming(behaviour, labels)
        else:
            behaviour = handler.unary_unary or handler.stream_unary
            wrapped = self._unary(behaviour, labels)
        return _like(handler, wrapped)

    def _unary(self, behaviour: Callable[..., Any], labels: tuple[str, str, str]) -> Callable[..., Any]:
        def observed(request: Any, context: grpc.ServicerContext) -> Any:
            self.started.labels(*labels).inc()
            began, code = time.perf_counter(), grpc.StatusCode.UNKNOWN
            try:
                reply = behaviour(request, context)
                code = _ended(context, grpc.StatusCode.OK)
                return reply
            except BaseException:
                code = _ended(context, grpc.StatusCode.UNKNOWN)
                raise
            finally:
                self._done(labels, code, began)

        return observed

    def _streaming(self, behaviour: Callable[..., Any], labels: tuple[str, str, str]) -> Callable[..., Any]:
        def observed(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            self.started.labels(*labels).inc()
            began, code = time.perf_counter(), grpc.StatusCode.UNKNOWN
            try:
                yield from behaviour(request, context)
                code = _ended(context, grpc.StatusCode.OK)
            except GeneratorExit:  # the client went away (or the server stops) before the stream ended
                code = grpc.StatusCode.CANCELLED
                raise
            except BaseException:
                code = _ended(context, grpc.StatusCode.UNKNOWN)
                raise
            finally:
                self._done(labels, code, began)

        return observed

    def _done(self, labels: tuple[str, str, str], code: grpc.StatusCode, began: float) -> None:
        self.handled.labels(*labels, code_name(code)).inc()
        self.seconds.labels(*labels).observe(time.perf_counter() - began)


def _ended(context: grpc.ServicerContext, otherwise: grpc.StatusCode) -> grpc.StatusCode:
    """The code the handler set (`set_code`, `abort`), else `otherwise`."""
    code = context.code()
    return code if isinstance(code, grpc.StatusCode) else otherwise


def _like(handler: grpc.RpcMethodHandler, behaviour: Callable[..., Any]) -> Any:
    """A method handler of `handler`'s shape and (de)serializers running `behaviour`."""
    de, ser = handler.request_deserializer, handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behaviour, de, ser)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behaviour, de, ser)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behaviour, de, ser)
    return grpc.unary_unary_rpc_method_handler(behaviour, de, ser)


class _MetricsApp:
    """The registry's exposition as an ASGI app (an object, so Starlette's `Route` serves it as an app)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._app = make_asgi_app(registry)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._app(scope, receive, send)


def metrics_app(registry: CollectorRegistry) -> Any:
    """An ASGI app answering GET with the registry's text exposition: `Route("/metrics", metrics_app(r))`."""
    return _MetricsApp(registry)


class MetricsServer:
    """`/metrics` (any path, as prometheus_client serves it) on an HTTP port of its own, in a daemon thread."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self._httpd, self._thread = httpd, thread
        self.port: int = httpd.server_port

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> MetricsServer:
    """Serve the registry on http://host:port/metrics (port 0 = any free one); PortInUse when it is taken."""
    try:
        httpd, thread = start_http_server(port, host, registry)
    except OSError as e:
        raise PortInUse(f"cannot serve metrics on {host}:{port}: {e.strerror or e}") from None
    log.info("metrics on http://%s:%d/metrics", host, httpd.server_port)
    return MetricsServer(httpd, thread)


class ReadAtScrape(Collector):
    """A metric whose value is read at each scrape from what the process keeps anyway (a store query, a count its
    objects hold): `read()` -> a number, or {label value: number} with `label`. `kind` "counter" (the exposed name
    gets `_total`) or "gauge". A read that fails (the database away) leaves this metric out of that scrape, logged,
    rather than failing the whole scrape."""

    def __init__(
        self,
        name: str,
        documentation: str,
        read: Callable[[], float | Mapping[str, float]],
        *,
        kind: str = "gauge",
        label: str = "",
    ) -> None:
        if kind not in ("counter", "gauge"):
            raise ValueError(f"kind must be 'counter' or 'gauge', got {kind!r}")
        self.name, self.documentation, self.read, self.kind, self.label = name, documentation, read, kind, label

    def collect(self) -> Iterator[Metric]:
        try:
            values = self.read()
        except Exception as e:  # whatever the store raises: the other metrics still go out
            log.warning("%s not read for this scrape: %s", self.name, e)
            return
        family_of = CounterMetricFamily if self.kind == "counter" else GaugeMetricFamily
        family = family_of(self.name, self.documentation, labels=[self.label] if self.label else [])
        if isinstance(values, Mapping):
            for key, value in sorted(values.items()):
                family.add_metric([key], value)
        else:
            family.add_metric([], values)
        yield family
