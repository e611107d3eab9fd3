"""Acknowledged means durable: Ingest over the real gRPC service answers OK while the broker is away, and every
acknowledged sample's event reaches cheems.samples.v1 once a broker runs again on the same port (a replaced
broker: the producer of before fails for good, InitProducerId UnknownError), none lost; SQLite and PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import Engine, select

from cheems.roles import OPERATOR
from cheems.v1 import common_pb2, ingestion_pb2, ingestion_pb2_grpc
from services.bus import topics
from services.bus.broker import EmbeddedBroker
from services.bus.client import Publisher
from services.bus.reader import read_topic
from services.bus.relay import RelayConfig
from services.channels import open_channel
from services.hosting import HostConfig
from services.ingestion.server import host
from services.ingestion.service import IngestionService
from services.store.accounts import AccountBook
from services.store.db import read_scope
from services.store.models import Prompt
from services.store.outbox import StoreOutbox

pytestmark = pytest.mark.slow  # runs early: see tests/conftest.py

FAST = RelayConfig(sweep_every=0.5, ack_timeout=2.0, max_backoff=1.0)


def record(text: str) -> ingestion_pb2.IngestRecord:
    responses = [common_pb2.Response(id="r1", content="好的"), common_pb2.Response(id="r2", content="不行")]
    return ingestion_pb2.IngestRecord(sample=common_pb2.Sample(prompt=text, responses=responses, category=["测试"]))


def sample_keys(bootstrap: str, wanted: set[str], timeout: float = 60.0) -> list[str]:
    """The keys of cheems.samples.v1's events in `wanted`, read from the start until each was seen (its event's
    prompt id the key's)."""
    mine = lambda found: [d.key for d in found if d.key in wanted and d.event.sample.prompt_id == d.key]  # noqa: E731
    return mine(read_topic(bootstrap, topics.SAMPLES, lambda found: wanted <= set(mine(found)), timeout))


@pytest.fixture
def broker() -> Iterator[EmbeddedBroker]:
    running = EmbeddedBroker().start()
    running.create_topics([topics.SAMPLES, topics.dead_letter(topics.SAMPLES)], partitions=2)
    yield running
    running.stop()


def test_ingest_answers_ok_while_the_broker_is_away_and_loses_no_event(
    engine: Engine, broker: EmbeddedBroker, account: Callable[[str, str], str]
) -> None:
    publisher = Publisher(broker.bootstrap, max_block_ms=2000, connect=False)
    service = IngestionService(engine, publisher, source="grpc", relay=FAST)
    grpc_host = host(service, HostConfig(port=0, host="127.0.0.1"), AccountBook(engine)).start()
    replaced = None
    try:
        with open_channel(f"127.0.0.1:{grpc_host.port}", token=account("etl", OPERATOR)) as channel:
            stub = ingestion_pb2_grpc.IngestionServiceStub(channel)
            assert stub.Ingest(iter([record("断网前的题")]), timeout=30).stored == 1
            before = stored_ids(engine)
            sample_keys(broker.bootstrap, before)  # published: the producer has its id from this broker
            broker.stop()
            for n in range(6):  # each answered OK: stored, its event durable beside it
                batch = [record(f"断网时的第{n}题"), record(f"断网时的第{n}题（续）")]
                assert stub.Ingest(iter(batch), timeout=30).stored == 2
        acknowledged = stored_ids(engine) - before
        assert len(acknowledged) == 12
        replaced = EmbeddedBroker(port=broker.port).start()  # the same address, a new broker (memory: topics anew)
        replaced.create_topics([topics.SAMPLES, topics.dead_letter(topics.SAMPLES)], partitions=2)
        sample_keys(replaced.bootstrap, acknowledged)  # every acknowledged sample's event, none lost
        deadline = time.monotonic() + 30
        while StoreOutbox(engine).waiting():  # each deleted once acknowledged
            assert time.monotonic() < deadline, "the outbox was not emptied"
            time.sleep(0.1)
    finally:
        grpc_host.stop(0)
        service.close()
        publisher.close(timeout=5)
        if replaced is not None:
            replaced.stop()


def stored_ids(engine: Engine) -> set[str]:
    with read_scope(engine) as session:
        return set(session.scalars(select(Prompt.id)))
