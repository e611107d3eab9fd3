"""The bus's spans: a record sent under a span is handled, on the real broker, in a CONSUMER span that is the child
of its PRODUCER span; a batch's span continues its first record's trace, and each record of another trace goes on
in its own. The spans are recorded by an SDK provider of the test's own (`recorded`: the global one stays unset)."""

from __future__ import annotations

import uuid
from typing import NamedTuple

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cheems.v1 import common_pb2, events_pb2
from services.bus import spans, topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import EventConsumer, Publisher
from services.observe import tracing

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


def sample(prompt_id: str) -> events_pb2.SampleEvent:
    return events_pb2.SampleEvent(sample=common_pb2.Sample(prompt_id=prompt_id, prompt="你好"))


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_record_is_handled_as_the_child_of_the_span_that_sent_it(
    broker: EmbeddedBroker, recorded: tuple[trace.Tracer, InMemorySpanExporter]
) -> None:
    tracer, exporter = recorded
    key = f"p-{uuid.uuid4().hex[:8]}"
    publisher = Publisher(broker.bootstrap)
    with tracer.start_as_current_span("Ingest") as ingest:
        publisher.confirm([publisher.publish(topics.SAMPLES, key, sample(key))])
    publisher.close()
    seen: list[tuple[str, trace.Span]] = []
    group = f"spans-{key}"
    consumer = EventConsumer(
        broker.bootstrap, [topics.SAMPLES], group, lambda t, k, e: seen.append((k, trace.get_current_span()))
    )
    try:
        while not any(k == key for k, _ in seen):
            consumer.poll_once(500)
    finally:
        consumer.close()
    (send,) = named(exporter, f"send {topics.SAMPLES}")
    assert send.kind is trace.SpanKind.PRODUCER and send.parent is not None
    assert send.parent.span_id == ingest.get_span_context().span_id
    assert send.attributes is not None and send.attributes["messaging.kafka.message.key"] == key
    (current,) = [span for k, span in seen if k == key]
    process = next(s for s in named(exporter, f"process {topics.SAMPLES}") if s.context == current.get_span_context())
    assert process.kind is trace.SpanKind.CONSUMER and process.parent is not None
    assert (process.context.trace_id, process.parent.span_id) == (send.context.trace_id, send.context.span_id)
    attributes = dict(process.attributes or {})
    assert attributes["messaging.system"] == "kafka" and attributes["messaging.consumer.group.name"] == group
    assert attributes["messaging.destination.name"] == topics.SAMPLES and attributes["messaging.kafka.offset"] >= 0


class Record(NamedTuple):
    """What kafka-python's ConsumerRecord gives the spans."""

    topic: str
    partition: int
    offset: int
    key: bytes
    headers: list[tuple[str, bytes]]


def test_a_batch_span_goes_on_in_its_first_record_trace_and_each_other_trace_in_its_own(
    recorded: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = recorded
    sent = {run: tracer.start_span(f"StartRun {run}") for run in ("a", "b")}  # two runs' traces
    records = []
    for offset, run in enumerate(["a", "b", "a", "untraced"]):
        headers: list[tuple[str, bytes]] = []
        if run in sent:
            tracing.inject(headers, trace.set_span_in_context(sent[run]))
        records.append(Record(topics.SCORE_REQUESTS, 0, offset, run.encode(), headers))
    with spans.processing_batch(records, "workers") as contexts:
        batch = trace.get_current_span().get_span_context()
    traces = [trace.get_current_span(c).get_span_context().trace_id for c in contexts]
    a, b = (sent[run].get_span_context() for run in ("a", "b"))
    assert batch.trace_id == a.trace_id != b.trace_id
    assert traces == [a.trace_id, b.trace_id, a.trace_id, a.trace_id]  # the untraced record: the batch's
    assert trace.get_current_span(contexts[0]).get_span_context() == batch  # a's records go on under the batch span
    assert trace.get_current_span(contexts[1]).get_span_context().span_id == b.span_id  # b's under its sender
    (span,) = named(exporter, f"process {topics.SCORE_REQUESTS}")
    assert span.parent is not None and span.parent.span_id == a.span_id
    assert [link.context.trace_id for link in span.links] == [b.trace_id, a.trace_id]
    assert span.attributes is not None and span.attributes["messaging.batch.message_count"] == 4


def test_a_process_that_does_not_trace_makes_no_span_and_passes_the_context_on() -> None:
    assert spans._recording() is None  # this process traces nothing
    upstream = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    with spans.sending(topics.SCORES, "k") as untraced:
        pass
    assert untraced == []  # nothing to pass on
    handled = Record(topics.SCORE_REQUESTS, 0, 7, b"k", upstream)
    with spans.processing(handled, "workers"), spans.sending(topics.SCORES, "k") as passed:
        pass
    assert passed == upstream  # the same trace and parent: no span of this process between them
    records = [Record(topics.SCORE_REQUESTS, 0, 8, b"a", upstream), Record(topics.SCORE_REQUESTS, 0, 9, b"b", [])]
    with spans.processing_batch(records, "workers") as contexts:
        assert trace.get_current_span().get_span_context().trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert contexts[1] is None and trace.get_current_span(contexts[0]).get_span_context().span_id == 0xB7AD6B7169203331
