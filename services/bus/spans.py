"""Trace spans of the bus: a PRODUCER span per event sent, a CONSUMER span per record handled (or per batch).

    with sending(topic, key, parent) as headers_of: ...      # `Publisher.publish`: the record's traceparent
    with processing(record, group): handler(...)              # a record's handler runs as its producer's child
    with processing_batch(records, group) as contexts: ...   # one span for a batch, each record's context to go on

Each record carries its producer's W3C trace context in its headers (`services.observe.tracing.inject`), so a
consumer's span is the child of the span that sent the record, and an evaluation run is one trace from StartRun
through the worker's Score calls to the sink. A batch handler gets one span, the child of its first record's
context and linked to every other record's (OpenTelemetry's messaging conventions for a batch); each record's
`Delivery.context` is the batch span's when it belongs to that trace, else its own producer's, so what a handler
sends on for a record (a score for a request) stays in that record's trace. Attribute names: OpenTelemetry's
semantic conventions for messaging (Kafka).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context

from services.observe import tracing

_tracer = trace.get_tracer("cheems.bus")  # a proxy: the provider `setup_tracing` sets, when it does


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
    its context, to add to the record's."""
    with _tracer.start_as_current_span(
        f"send {topic}", context=parent, kind=trace.SpanKind.PRODUCER, attributes=_attributes(topic, "send", key)
    ):
        headers: tracing.Headers = []
        tracing.inject(headers)
        yield headers


def _record_attributes(record: Any, group: str) -> dict[str, Any]:
    found = _attributes(record.topic, "process", record.key.decode(errors="replace") if record.key else "")
    found["messaging.consumer.group.name"] = group
    found["messaging.destination.partition.id"] = str(record.partition)
    found["messaging.kafka.offset"] = record.offset
    return found


@contextlib.contextmanager
def processing(record: Any, group: str) -> Iterator[None]:
    """A CONSUMER span `process TOPIC`, current for the block, child of the context the record carries."""
    parent = tracing.extract(record.headers)
    with _tracer.start_as_current_span(
        f"process {record.topic}", context=parent, kind=trace.SpanKind.CONSUMER,
        attributes=_record_attributes(record, group),
    ):  # fmt: skip
        yield


@contextlib.contextmanager
def processing_batch(records: Sequence[Any], group: str) -> Iterator[list[Context]]:
    """One CONSUMER span for a batch, current for the block: the child of the first record's context, linked to
    the others'. Yields, per record, the context its handling goes on in (module docstring)."""
    parents = [tracing.extract(r.headers) for r in records]
    contexts = [trace.get_current_span(p).get_span_context() for p in parents]
    links = [trace.Link(c) for c in contexts[1:] if c.is_valid]
    topics = sorted({r.topic for r in records})
    attributes = _attributes(",".join(topics), "process")
    attributes.update({"messaging.consumer.group.name": group, "messaging.batch.message_count": len(records)})
    with _tracer.start_as_current_span(
        f"process {','.join(topics)}", context=parents[0] if parents else None, kind=trace.SpanKind.CONSUMER,
        links=links, attributes=attributes,
    ) as span:  # fmt: skip
        own = span.get_span_context().trace_id
        batch = trace.set_span_in_context(span)
        yield [batch if not c.is_valid or c.trace_id == own else p for c, p in zip(contexts, parents, strict=True)]
