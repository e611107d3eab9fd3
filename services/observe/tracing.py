"""Traces over OpenTelemetry: off unless the environment asks for them, then OTLP over gRPC from every process.

    setup_tracing("eval-worker")      # once, at the process's start: True when spans are exported
    grpc.server(pool, interceptors=[i for i in (server_interceptor(),) if i])   # services.hosting does this
    channel = traced_channel(channel)                                           # services.channels does this
    inject(headers)                   # a Kafka record's headers get the current span's `traceparent`
    with attached(extract(headers)): ...   # work on as the producer's child (services.bus does this)

The standard variables decide (the SDK reads them): tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, or `OTEL_TRACES_EXPORTER` names an exporter (`otlp`, `console`;
`none` turns it off; so does `OTEL_SDK_DISABLED=true`). Spans go through a batch span processor (`OTEL_BSP_*`) to
the OTLP gRPC exporter (`OTEL_EXPORTER_OTLP_HEADERS`, `_TIMEOUT`, `_CERTIFICATE`, `_COMPRESSION`, `_INSECURE`; an
endpoint given as `http://host:4317` is plaintext). The sampler is `OTEL_TRACES_SAMPLER` (default: always, or
the parent's choice); the service is named `OTEL_SERVICE_NAME` or else the name the process gives, in the
namespace `cheems`, with `OTEL_RESOURCE_ATTRIBUTES` added. Only gRPC carries OTLP here: another
`OTEL_EXPORTER_OTLP_PROTOCOL` is refused with a ConfigError. What is queued is flushed when the process exits
cleanly (the provider's exit hook).

Off, nothing is set up: no exporter, no thread, and the interceptors are None (nothing added to a server or a
channel). `inject` and `extract` still work (W3C trace context, `OTEL_PROPAGATORS`), so a process without
tracing passes its caller's context on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter

from cheems.errors import ConfigError

log = logging.getLogger(__name__)

NAMESPACE = "cheems"  # service.namespace of every process
EXPORTERS = ("otlp", "console")  # what OTEL_TRACES_EXPORTER may name here (or "none")
# calls no trace needs: probes and reflection (OTEL_PYTHON_GRPC_EXCLUDED_SERVICES adds more)
UNTRACED_SERVICES = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection")
Headers = list[tuple[str, bytes]]

_state: dict[str, str] = {}  # "service": the name set up in this process
_guard = threading.Lock()


def exporters(environ: Mapping[str, str] | None = None) -> list[str]:
    """The span exporters the environment asks for: [] when tracing is off. ConfigError for an exporter or an
    OTLP protocol this build does not have."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
    if not names:
        names = ["otlp"] if traces_endpoint(env) else []
    if "none" in names:
        return []
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        raise ConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter {unknown[0]!r} (here: {', '.join(EXPORTERS)}, none)")
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    if "otlp" in names and protocol.strip().lower() != "grpc":
        raise ConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: Cheems sends OTLP over gRPC only (use grpc)")
    return names


def traces_endpoint(environ: Mapping[str, str] | None = None) -> str:
    """Where the OTLP exporter sends spans ("" when no endpoint is set): what vLLM's `--otlp-traces-endpoint` gets."""
    env = os.environ if environ is None else environ
    return (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "").strip()


def setup_tracing(service: str) -> bool:
    """Export this process's spans as `service` when the environment asks for it (module docstring); False,
    doing nothing, when it does not. Once per process: a second call keeps the first setup."""
    names = exporters()
    if not names:
        return False
    with _guard:
        if "service" in _state:
            if _state["service"] != service:
                log.warning("tracing is already set up as %s; not again as %s", _state["service"], service)
            return True
        trace.set_tracer_provider(_provider(service, names))
        _state["service"] = service
    log.info("tracing on: %s spans to %s", service, traces_endpoint() or ", ".join(names))
    return True


def enabled() -> bool:
    """Whether `setup_tracing` set up an exporter in this process."""
    return "service" in _state


def _provider(service: str, names: Sequence[str]) -> Any:
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    from_env = Resource.create({}).attributes  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    own = {"service.namespace": NAMESPACE, SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or service}
    kept = {k: v for k, v in from_env.items() if k != SERVICE_NAME}
    provider = TracerProvider(resource=Resource.create({**own, **kept}))  # sampler: OTEL_TRACES_SAMPLER
    for name in names:
        exporter: SpanExporter
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()  # endpoint, headers, timeout, TLS: the OTEL_EXPORTER_OTLP_* variables
        else:
            exporter = ConsoleSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_*; flushed at a clean exit
    return provider


def _untraced() -> Any:
    """The gRPC instrumentation's filter: every call but those of UNTRACED_SERVICES and the excluded ones."""
    from opentelemetry.instrumentation.grpc import filters

    excluded = os.environ.get("OTEL_PYTHON_GRPC_EXCLUDED_SERVICES", "")
    names = [*UNTRACED_SERVICES, *(s.strip() for s in excluded.split(",") if s.strip())]
    return filters.negate(filters.any_of(*(filters.service_name(n) for n in names)))


def server_interceptor() -> Any | None:
    """A server span per call (parent: the caller's `traceparent` metadata), or None while tracing is off."""
    if not enabled():
        return None
    from opentelemetry.instrumentation.grpc import server_interceptor as otel_server

    return otel_server(filter_=_untraced())


def client_interceptor() -> Any | None:
    """A client span per call, its context sent as `traceparent` metadata; None while tracing is off. It is the
    instrumentation's own kind of interceptor: install it with `traced_channel`."""
    if not enabled():
        return None
    from opentelemetry.instrumentation.grpc import client_interceptor as otel_client

    return otel_client(filter_=_untraced())


def traced_channel(channel: grpc.Channel) -> grpc.Channel:
    """`channel` with `client_interceptor` installed (the channel itself while tracing is off)."""
    interceptor = client_interceptor()
    if interceptor is None:
        return channel
    from opentelemetry.instrumentation.grpc.grpcext import intercept_channel

    return cast(grpc.Channel, intercept_channel(channel, interceptor))


def aio_client_interceptors() -> list[Any]:
    """The asyncio channels' client interceptors ([] while tracing is off)."""
    if not enabled():
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors as otel_aio

    return list(otel_aio(filter_=_untraced()))


class _HeaderSetter(Setter[Headers]):
    def set(self, carrier: Headers, key: str, value: str) -> None:
        carrier[:] = [(k, v) for k, v in carrier if k != key]
        carrier.append((key, value.encode()))


class _HeaderGetter(Getter[Sequence[tuple[str, bytes]]]):
    def get(self, carrier: Sequence[tuple[str, bytes]], key: str) -> list[str] | None:
        found = [v.decode(errors="replace") for k, v in carrier if k.lower() == key and v is not None]
        return found or None

    def keys(self, carrier: Sequence[tuple[str, bytes]]) -> list[str]:
        return [k for k, _ in carrier]


def inject(headers: Headers, context: Context | None = None) -> None:
    """Add the current span's W3C `traceparent` (and `tracestate`) to Kafka record headers, in place (nothing
    when no span is current); `context`: another context's instead."""
    propagate.inject(headers, context=context, setter=_HeaderSetter())


def extract(headers: Sequence[tuple[str, bytes]] | None) -> Context:
    """The context a record's headers carry (an empty one when they carry none): the parent of its consumer's
    span."""
    return propagate.extract(list(headers or []), getter=_HeaderGetter(), context=Context())


def carried(context: Context | None = None) -> dict[str, str]:
    """The current (or `context`'s) trace context as text headers, {} when there is none: what the outbox stores."""
    headers: Headers = []
    inject(headers, context)
    return {k: v.decode() for k, v in headers}


@contextlib.contextmanager
def attached(context: Context | None) -> Iterator[None]:
    """Make `context` current for the block (nothing changes for None)."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)
