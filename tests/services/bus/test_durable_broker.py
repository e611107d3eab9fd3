"""The embedded broker on disk: what it acknowledged survives its death, and consumer groups resume where they
committed (`EmbeddedBroker(storage=...)`, Tansu on `services.bus.objectstore`)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cheems.processes.ports import free_port
from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.bucket import S3Error
from services.bus.client import EventConsumer, Publisher
from services.bus.reader import read_topic


def publish(bootstrap: str, first: int, count: int) -> None:
    """`count` SampleEvents, every one acknowledged by the broker (acks=all) before this returns."""
    publisher = Publisher(bootstrap)
    futures = [
        publisher.publish(topics.SAMPLES, f"p{i}", events_pb2.SampleEvent(sample=common_pb2.Sample(prompt_id=f"p{i}")))
        for i in range(first, first + count)
    ]
    publisher.flush(timeout=30)
    for future in futures:
        future.get(timeout=30)
    publisher.close()


def consume(bootstrap: str, group: str, want: int, patience: float = 45.0) -> list[str]:
    """Prompt ids read by `group` (offsets committed batch by batch) until `want` arrived or patience ran out."""
    seen: list[str] = []
    consumer = EventConsumer(
        bootstrap, [topics.SAMPLES], group, lambda t, k, event: seen.append(event.sample.prompt_id)
    )
    deadline = time.monotonic() + patience
    while len(seen) < want and time.monotonic() < deadline:
        consumer.poll_once(timeout_ms=500)
    # one more poll: whatever else is there (a duplicate, a record that should not be) shows up too
    consumer.poll_once(timeout_ms=1500)
    consumer.close()
    return seen


def test_acknowledged_records_and_committed_offsets_survive_a_killed_broker(tmp_path: Path) -> None:
    port, storage = free_port(), tmp_path / "broker"
    with EmbeddedBroker(port, storage=storage) as broker:
        broker.create_topics(topics.with_dead_letters((topics.SAMPLES,)), partitions=2)
        publish(broker.bootstrap, 0, 40)
        first = consume(broker.bootstrap, "durable", 40)
        publish(broker.bootstrap, 40, 25)  # acknowledged, not consumed yet
        assert broker.process is not None
        broker.process.kill()  # SIGKILL: no shutdown of its own
        broker.process.wait()
    assert sorted(first) == sorted(f"p{i}" for i in range(40))

    with EmbeddedBroker(port, storage=storage) as again:
        rest = consume(again.bootstrap, "durable", 25)
        everything = consume(again.bootstrap, "newcomer", 65)
    assert sorted(rest) == sorted(f"p{i}" for i in range(40, 65))  # resumed at the committed offsets, nothing lost
    assert sorted(everything) == sorted(f"p{i}" for i in range(65))  # every acknowledged record, once


@pytest.mark.parametrize("idempotent", [True, False])
def test_a_broker_killed_mid_write_loses_an_idempotent_resend_and_keeps_a_plain_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, idempotent: bool
) -> None:
    """Tansu 0.6 on disk records a producer's sequence and the partition's watermark, then writes the batch. Killed
    in between, it answers the resend DUPLICATE_SEQUENCE_NUMBER, which an idempotent producer takes for success: an
    acknowledged record that was never stored. A plain producer's resend is written again (a duplicate consumers
    drop by event id). So `cheems up` runs its producers without idempotence (system.plan.BUS_ENVIRONMENT). Should
    this test fail for idempotent=True one day, Tansu stores the batch first, and idempotence can come back."""
    from services.bus import objectstore

    port, storage = free_port(), tmp_path / "broker"
    running: dict[str, EmbeddedBroker] = {}
    kill = threading.Event()
    put = objectstore._Handler._put

    def dies_mid_write(handler: Any, bucket: Any, name: str, key: str, body: bytes) -> None:
        if kill.is_set() and key.endswith(".batch") and topics.SAMPLES in key:  # after its watermark was written
            kill.clear()
            process = running["broker"].process
            assert process is not None
            process.kill()
            raise S3Error(500, "InternalError", "the broker died")
        put(handler, bucket, name, key, body)

    monkeypatch.setattr(objectstore._Handler, "_put", dies_mid_write)
    monkeypatch.setenv("CHEEMS_KAFKA_IDEMPOTENCE", str(idempotent).lower())
    running["broker"] = EmbeddedBroker(port, storage=storage).start()
    try:
        running["broker"].create_topics([topics.SAMPLES], partitions=1)
        publisher = Publisher(running["broker"].bootstrap)
        assert publisher.producer.config["enable_idempotence"] is idempotent
        assert publisher.producer.config["max_in_flight_requests_per_connection"] == (5 if idempotent else 1)
        publish_with(publisher, "p0")
        kill.set()
        resend = threading.Thread(target=publish_with, args=(publisher, "p1"))
        resend.start()
        process = running["broker"].process
        assert process is not None
        process.wait(30)  # killed mid-write: a new broker takes its place, the producer resends there
        running["broker"].stop()
        running["broker"] = EmbeddedBroker(port, storage=storage).start()
        resend.join(60)
        publish_with(publisher, "p2")
        publisher.close()
        stored = {d.event.sample.prompt_id for d in read_topic(running["broker"].bootstrap, topics.SAMPLES)}
    finally:
        running["broker"].stop()
    assert stored == ({"p0", "p2"} if idempotent else {"p0", "p1", "p2"})


def publish_with(publisher: Publisher, prompt_id: str) -> None:
    """One SampleEvent, acknowledged by the broker (acks=all) before this returns."""
    event = events_pb2.SampleEvent(sample=common_pb2.Sample(prompt_id=prompt_id))
    publisher.publish(topics.SAMPLES, prompt_id, event).get(timeout=60)
