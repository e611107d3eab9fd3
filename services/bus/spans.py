"""Trace spans of the bus: a PRODUCER span per event sent, a CONSUMER span per record handled (or per batch).

    with sending(topic, key, parent) as headers: ...          # `Publisher.publish`: the record's traceparent
    with processing(record, group): handler(...)              # a record's handler runs as its producer's child
    with processing_batch(records, group) as contexts: ...   # one span for a batch, each record's context to go on

Each record carries its producer's W3C trace context in its headers (`services.observe.tracing.inject`), so a
consumer's span is the child of the span that sent the record, and an evaluation run is one trace from StartRun
through the worker's Score calls to the sink. A batch handler gets one span, the child of its first record's
context and linked to every other record's (OpenTelemetry's messaging conventions for a batch); each record's
`Delivery.context` is the batch span's when it belongs to that trace, else its own producer's, so what a handler
sends on for a record (a score for a request) stays in that record's trace. Attribute names: OpenTelemetry's
semantic conventions for messaging (Kafka).

A process that does not trace makes no span (they would cost more than the send itself): it only passes the
context a record carries on to what it sends while handling it, so a trace crosses it unbroken.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context

from services.observe import tracing

_tracer: trace.Tracer | None = None  # set by `setup_tracing`'s first use here (tests set one of their own)


def _recording() -> trace.Tracer | None:
    """The bus's tracer while this process traces, else None."""
    global _tracer
    if _tracer is None and tracing.enabled():
        _tracer = trace.get_tracer("cheems.bus")
    return _tracer


def _attributes(topic: str, operation: str, key: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
        "messaging.destination.name": topic,
    }
    if key:
        found["messaging.kafka.message.key"] = key
    return found


@contextlib.contextmanager
def sending(topic: str, key: str, parent: Context | None = None) -> Iterator[tracing.Headers]:
    """A PRODUCER span `send TOPIC` (child of `parent`, else of the current span); yields the headers carrying
    its context, to add to the record's (untraced: `parent`'s or the current context, if any)."""
    headers: tracing.Headers = []
    tracer = _recording()
    if tracer is None:
        if trace.get_current_span(parent).get_span_context().is_valid:
            tracing.inject(headers, parent)
        yield headers
        return
    attributes = _attributes(topic, "send", key)
    with tracer.start_as_current_span(f"send {topic}", parent, trace.SpanKind.PRODUCER, attributes):
        tracing.inject(headers)
        yield headers


def _carried(record: Any) -> Context | None:
    """The context a record's headers carry; None when they carry none."""
    headers = record.headers or []
    return tracing.extract(headers) if any(k == "traceparent" for k, _ in headers) else None


def _record_attributes(record: Any, group: str) -> dict[str, Any]:
    found = _attributes(record.topic, "process", record.key.decode(errors="replace") if record.key else "")
    found["messaging.consumer.group.name"] = group
    found["messaging.destination.partition.id"] = str(record.partition)
    found["messaging.kafka.offset"] = record.offset
    return found


@contextlib.contextmanager
def processing(record: Any, group: str) -> Iterator[None]:
    """A CONSUMER span `process TOPIC`, current for the block, child of the context the record carries."""
    tracer = _recording()
    if tracer is None:
        with tracing.attached(_carried(record)):
            yield
        return
    name, attributes = f"process {record.topic}", _record_attributes(record, group)
    with tracer.start_as_current_span(name, _carried(record) or Context(), trace.SpanKind.CONSUMER, attributes):
        yield


@contextlib.contextmanager
def processing_batch(records: Sequence[Any], group: str) -> Iterator[list[Context | None]]:
    """One CONSUMER span for a batch, current for the block: the child of the first record's context, linked to
    the others'. Yields, per record, the context its handling goes on in (module docstring)."""
    parents = [_carried(r) for r in records]
    tracer = _recording()
    if tracer is None or not records:
        with tracing.attached(parents[0] if parents else None):
            yield parents
        return
    contexts = [trace.get_current_span(p).get_span_context() for p in parents]
    links = [trace.Link(c) for c in contexts[1:] if c.is_valid]
    topics = ",".join(sorted({r.topic for r in records}))
    attributes = _attributes(topics, "process")
    attributes.update({"messaging.consumer.group.name": group, "messaging.batch.message_count": len(records)})
    with tracer.start_as_current_span(
        f"process {topics}", parents[0] or Context(), trace.SpanKind.CONSUMER, attributes, links
    ) as span:
        own = span.get_span_context().trace_id
        batch = trace.set_span_in_context(span)
        yield [batch if not c.is_valid or c.trace_id == own else p for c, p in zip(contexts, parents, strict=True)]
