"""Annotation fixtures: a broker per module (with the cheems topics), a reader of a topic's events, tiny samples, a
call's metadata as an account (`as_`)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition

from cheems.roles import ANNOTATOR
from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.codec import decode
from tests.services.accounts import bearer

Events = Callable[..., list[tuple[str, Any]]]


@pytest.fixture
def as_(account: Callable[[str, str], str]) -> Callable[..., list[tuple[str, str]]]:
    """as_(name, role=ANNOTATOR) -> the metadata of a call from that account."""
    return lambda name, role=ANNOTATOR: bearer(account(name, role))


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as running:
        running.create_topics(topics.with_dead_letters(), partitions=2)
        yield running


def read_events(
    bootstrap: str,
    topic: str,
    keys: set[str],
    until: Callable[[list[tuple[str, Any]]], bool] | None = None,
    timeout: float = 30.0,
) -> list[tuple[str, Any]]:
    """(key, event) of `topic` whose key is in `keys`, in order per key, read from the start until `until(read)`
    holds, or (no `until`) to the end the topic had when called."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        consumer.topics()  # fetches the metadata partitions_for_topic reads
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        done = until or (lambda _: all(consumer.position(tp) >= end for tp, end in ends.items()))
        found: list[tuple[str, Any]] = []
        deadline = time.monotonic() + timeout
        while not done(found):
            assert time.monotonic() < deadline, f"{topic}: only {len(found)} events for {keys} within {timeout} s"
            for record in [r for batch in consumer.poll(timeout_ms=200).values() for r in batch]:
                key = record.key.decode()
                if key in keys:
                    found.append((key, decode(topic, record.value, list(record.headers))))
        return found
    finally:
        consumer.close()


@pytest.fixture
def reader() -> Callable[..., list[tuple[str, Any]]]:
    """reader(bootstrap, topic, keys, until) -> [(key, event)] (`read_events`), for a broker of a test's own."""
    return read_events


@pytest.fixture
def events(broker: EmbeddedBroker) -> Events:
    """events(topic, keys, until=lambda found: ...) -> [(key, event)] read from the module's broker (no `until`:
    everything the topic holds)."""

    def read(topic: str, keys: set[str], until: Callable[..., bool] | None = None) -> list[tuple[str, Any]]:
        return read_events(broker.bootstrap, topic, keys, until)

    return read


def sample_event(prompt: str, responses: list[tuple[str, str]], source: str, **fields: Any) -> events_pb2.SampleEvent:
    sample = common_pb2.Sample(
        prompt=prompt,
        responses=[common_pb2.Response(id=k, content=c) for k, c in responses],
        source=source,
        **fields,
    )
    return events_pb2.SampleEvent(header=events_pb2.EventHeader(producer="test"), sample=sample)


@pytest.fixture
def make_sample() -> Callable[..., events_pb2.SampleEvent]:
    """make_sample(prompt, [(key, content)], source, **Sample fields) -> a SampleEvent."""
    return sample_event


@pytest.fixture
def unique() -> Callable[[str], str]:
    """unique(text): prompt text no other test (nor the other database's run) stores; topics outlive a test."""
    return lambda text: f"{text}（{uuid.uuid4().hex[:8]}）"
