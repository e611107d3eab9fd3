"""The bus against the real embedded broker (Tansu): codec, round trips, dead letters, committed offsets."""

from __future__ import annotations

import time
from typing import Any

import pytest

from cheems.v1 import common_pb2, events_pb2, training_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import MAX_POLL_RECORDS, Delivery, EventConsumer, Publisher
from services.bus.codec import BadMessage, decode, encode
from tests.services.bus.producers import fail_for_good

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py


def sample_event(prompt_id: str) -> events_pb2.SampleEvent:
    sample = common_pb2.Sample(
        prompt_id=prompt_id, prompt="你好", responses=[common_pb2.Response(id="r1", content="好")]
    )
    return events_pb2.SampleEvent(sample=sample)


def test_codec_round_trip_fills_the_header() -> None:
    encoded = encode(topics.SAMPLES, sample_event("p1"))
    event = decode(topics.SAMPLES, encoded.value, encoded.headers)
    assert isinstance(event, events_pb2.SampleEvent) and event.sample.prompt == "你好"
    assert event.header.schema_version == 1 and len(event.header.event_id) == 32 and event.header.produced_at.seconds


@pytest.mark.parametrize("topic", topics.ALL)
def test_every_event_names_its_media_type_and_message(topic: str) -> None:
    name = topics.PAYLOADS[topic].DESCRIPTOR.full_name
    headers = dict(encode(topic, topics.PAYLOADS[topic]()).headers)
    assert headers == {
        "content-type": f"application/x-protobuf; messageType={name}".encode(),
        "cheems-schema-version": b"1",
        "cheems-type": name.encode(),
    }


@pytest.mark.parametrize(
    ("value", "headers", "message"),
    [
        (b"\xff\xfe garbage", None, "undecodable"),
        (
            b"",
            [("cheems-schema-version", b"7"), ("cheems-type", b"cheems.v1.SampleEvent")],
            "unsupported schema version",
        ),
        (
            b"",
            [("cheems-schema-version", b"1"), ("cheems-type", b"cheems.v1.ScoreEvent")],
            "carries cheems.v1.SampleEvent",
        ),
        (b"", [], "missing"),
    ],
)
def test_codec_rejects_bad_messages(value: bytes, headers: Any, message: str) -> None:
    good = encode(topics.SAMPLES, sample_event("p"))
    with pytest.raises(BadMessage, match=message):
        decode(topics.SAMPLES, value, good.headers if headers is None else headers)


def test_encode_refuses_the_wrong_payload_for_a_topic() -> None:
    with pytest.raises(ValueError, match="carries SampleEvent"):
        encode(topics.SAMPLES, events_pb2.ScoreEvent())


def drain(consumer: EventConsumer, want: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while consumer.stats.handled + consumer.stats.dead_lettered < want and time.monotonic() < deadline:
        consumer.poll_once()


def test_round_trip_dead_letters_and_committed_offsets(broker: EmbeddedBroker) -> None:
    seen: list[tuple[str, str]] = []
    publisher = Publisher(broker.bootstrap)
    publisher.publish(topics.SAMPLES, "p1", sample_event("p1"))
    publisher.send_raw(topics.SAMPLES, b"p2", b"\x00garbage", [("cheems-schema-version", b"1")])
    publisher.send_raw(topics.SAMPLES, b"p3", b"", [("cheems-schema-version", b"2"), ("cheems-type", b"x")])
    publisher.publish(topics.SAMPLES, "p4", sample_event("p4"))
    publisher.flush()

    consumer = EventConsumer(
        broker.bootstrap,
        [topics.SAMPLES],
        "test-group",
        lambda topic, key, event: seen.append((key, event.sample.prompt_id)),
    )
    drain(consumer, 4)
    consumer.close()
    assert sorted(seen) == [("p1", "p1"), ("p4", "p4")]
    assert (consumer.stats.handled, consumer.stats.dead_lettered) == (2, 2)

    dead: list[Any] = []
    from kafka import KafkaConsumer

    reader = KafkaConsumer(
        topics.dead_letter(topics.SAMPLES),
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        group_id="dlq-reader",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    deadline = time.monotonic() + 30
    while len(dead) < 2 and time.monotonic() < deadline:
        dead += [r for batch in reader.poll(timeout_ms=500).values() for r in batch]
    reader.close()
    assert sorted(r.key for r in dead) == [b"p2", b"p3"]
    assert all(any(k == "cheems-error" for k, _ in r.headers) for r in dead)

    again = EventConsumer(broker.bootstrap, [topics.SAMPLES], "test-group", lambda *a: seen.append(("again", "")))
    for _ in range(8):  # same group after a commit: nothing is handed out twice
        again.poll_once(timeout_ms=500)
    again.close()
    assert ("again", "") not in seen
    publisher.close()


def test_a_consumer_polled_briefly_with_pauses_still_joins_its_group(broker: EmbeddedBroker) -> None:
    """kafka-python drops a join that completes between two polls; poll_once must wait the join out."""
    publisher = Publisher(broker.bootstrap)
    for key in ("a", "b", "c"):
        publisher.publish(topics.RANKINGS, key, events_pb2.RankingEvent())
    publisher.flush()
    publisher.close()

    seen: list[str] = []
    consumer = EventConsumer(broker.bootstrap, [topics.RANKINGS], "brief-polls", lambda t, key, e: seen.append(key))
    assert consumer.membership.joining
    deadline = time.monotonic() + 40
    while len(seen) < 3 and time.monotonic() < deadline:
        consumer.poll_once(timeout_ms=50)
        time.sleep(0.5)  # the caller busy elsewhere, e.g. polling a second consumer
    consumer.close()
    assert sorted(seen) == ["a", "b", "c"]
    assert consumer.membership.rebalances == 1  # joined once, not over and over


def test_one_poll_hands_out_at_most_max_poll_records(broker: EmbeddedBroker) -> None:
    """A backlog is handed to the handler in batches of at most MAX_POLL_RECORDS, one per poll."""
    total = 2 * MAX_POLL_RECORDS + 5
    publisher = Publisher(broker.bootstrap)
    for n in range(total):
        publisher.publish(topics.ANNOTATIONS, f"p{n}", events_pb2.AnnotationEvent())
    publisher.flush()
    publisher.close()

    consumer = EventConsumer(broker.bootstrap, [topics.ANNOTATIONS], "small-batches", lambda *a: None)
    assert consumer.consumer.config["max_poll_records"] == MAX_POLL_RECORDS
    sizes: list[int] = []
    deadline = time.monotonic() + 30
    while sum(sizes) < total and time.monotonic() < deadline:
        sizes.append(consumer.poll_once())
    consumer.close()
    assert sum(sizes) == total == consumer.stats.handled
    assert max(sizes) <= MAX_POLL_RECORDS
    assert len([s for s in sizes if s]) >= -(-total // MAX_POLL_RECORDS)  # the backlog took several polls


def test_a_batch_handler_gets_each_polled_batch_whole_without_the_dead_letters(broker: EmbeddedBroker) -> None:
    publisher = Publisher(broker.bootstrap)
    keys = [f"b{n}" for n in range(40)]
    for key in keys[:20]:
        publisher.publish(topics.SCORES, key, events_pb2.ScoreEvent(prompt_id=key))
    publisher.send_raw(topics.SCORES, b"bad", b"\x00garbage", [("cheems-schema-version", b"1")])
    for key in keys[20:]:
        publisher.publish(topics.SCORES, key, events_pb2.ScoreEvent(prompt_id=key))
    publisher.flush()
    publisher.close()
    batches: list[list[str]] = []

    def handle(deliveries: list[Delivery]) -> None:
        assert all(d.topic == topics.SCORES and d.key == d.event.prompt_id for d in deliveries)
        batches.append([d.key for d in deliveries])

    consumer = EventConsumer(broker.bootstrap, [topics.SCORES], "batches", batch_handler=handle, max_poll_records=25)
    assert consumer.consumer.config["max_poll_records"] == 25
    drain(consumer, 41)
    consumer.close()
    assert sorted(k for batch in batches for k in batch) == sorted(keys)  # each once, the bad record left out
    assert len(batches) == consumer.stats.batches and max(map(len, batches)) <= 25
    assert (consumer.stats.handled, consumer.stats.dead_lettered) == (40, 1)
    with pytest.raises(ValueError, match="either handler or batch_handler"):
        EventConsumer(broker.bootstrap, [topics.SCORES], "neither")


def raw_records(bootstrap: str, topic: str) -> list[Any]:
    """Every record on `topic` now, undecoded, read to the end offsets without joining a group."""
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or ())]
        reader.assign(partitions)
        reader.seek_to_beginning(*partitions)
        ends, records = reader.end_offsets(partitions), []
        deadline = time.monotonic() + 30
        while any(reader.position(p) < ends[p] for p in partitions) and time.monotonic() < deadline:
            records += [r for batch in reader.poll(timeout_ms=500).values() for r in batch]
        return records
    finally:
        reader.close()


def test_dead_letters_the_broker_did_not_take_commit_nothing_until_a_renewed_producer_sends_them(
    broker: EmbeddedBroker,
) -> None:
    """The batch holding an undecodable record is committed only once its dead letter is acknowledged: a dead-letter
    producer that failed for good is renewed and the same batch polled again (its events handled again: at least
    once), so the dead letter is not lost."""
    publisher = Publisher(broker.bootstrap)  # one key: one partition, so one poll takes the three records
    publisher.publish(topics.DATASETS, "d", events_pb2.DatasetEvent(dataset=training_pb2.Dataset(dataset_id="d1")))
    publisher.send_raw(topics.DATASETS, b"d", b"\x00garbage", [("cheems-schema-version", b"1")])
    publisher.publish(topics.DATASETS, "d", events_pb2.DatasetEvent(dataset=training_pb2.Dataset(dataset_id="d3")))
    publisher.flush()
    publisher.close()
    dead = Publisher(broker.bootstrap)
    fail_for_good(dead)
    seen: list[str] = []
    consumer = EventConsumer(
        broker.bootstrap, [topics.DATASETS], "dlq-fails", lambda t, k, e: seen.append(e.dataset.dataset_id), dead
    )
    kafka = consumer.consumer
    try:
        deadline = time.monotonic() + 30
        while consumer.stats.batches == 0 and time.monotonic() < deadline:
            consumer.poll_once()
        assert {kafka.committed(tp) for tp in kafka.assignment()} == {None}, "committed before the dead letter"
        assert (seen, consumer.stats.dead_lettered, consumer.stats.redelivered) == (["d1", "d3"], 1, 1)
        while consumer.stats.batches < 2 and time.monotonic() < deadline:  # the same batch again
            consumer.poll_once()
        assert (seen, consumer.stats.dead_lettered, consumer.stats.redelivered) == (["d1", "d3"] * 2, 2, 1)
        assert {kafka.committed(tp) for tp in kafka.assignment()} != {None}
    finally:
        consumer.close()
        dead.close()
    letters = raw_records(broker.bootstrap, topics.dead_letter(topics.DATASETS))
    assert [(r.key, r.value) for r in letters] == [(b"d", b"\x00garbage")]  # once: the failed send never left
