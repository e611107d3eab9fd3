"""The bus tests' broker: one embedded broker per test module with every topic and its dead letters (a module
that needs other topics defines its own `broker`), and `recorded`: the bus's spans kept in memory (a tracer of the
test's own, the process's global provider left unset) with a tracer for the test's own spans."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from services.bus import spans, topics
from services.bus.broker import EmbeddedBroker


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(spans, "_tracer", provider.get_tracer("cheems.bus"))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()
