"""Store samples and announce them. Each sample has its own transaction: one bad record loses nothing else.

Given a Publisher, each newly stored sample's SampleEvent (cheems.samples.v1, key = prompt id) is written to the
store's outbox in the sample's own transaction, so `ingest` returns (and Ingest answers OK) only once the sample
and its event are committed together; an `EventRelay` thread publishes the outbox after the commit
(`services.bus.relay`), so a broker outage delays sample events and loses none. A duplicate announces nothing.

    service = IngestionService(engine, Publisher("localhost:9092", connect=False), source="grpc")
    summary = service.ingest(samples)
    service.close()                                  # stops the relay (what waits is sent by the next start)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.client import Publisher
from services.bus.codec import encode
from services.bus.relay import EventRelay, RelayConfig
from services.ingestion.records import RecordError, SampleRecord
from services.store import outbox, repository
from services.store.db import read_scope, session_scope
from services.store.errors import StoreError
from services.store.models import Prompt
from services.store.outbox import StoreOutbox


@dataclass
class Summary:
    received: int = 0
    stored: int = 0
    duplicates: int = 0
    errors: list[RecordError] = field(default_factory=list)

    @property
    def rejected(self) -> int:
        return len(self.errors)


class IngestionService:
    """`publisher`: announce stored samples (through the outbox; an `EventRelay` thread publishes them, `close()`
    stops it); `source`: the source of samples that name none."""

    def __init__(
        self, engine: Engine, publisher: Publisher | None = None, source: str = "", relay: RelayConfig | None = None
    ) -> None:
        self.engine, self.source = engine, source
        self.relay: EventRelay | None = None
        if publisher is not None:
            self.relay = EventRelay(
                StoreOutbox(engine, topics.RELAYED_BY["ingestion"]), publisher, relay or RelayConfig()
            ).start()

    def ingest(self, samples: Iterable[SampleRecord], errors: Iterable[RecordError] = ()) -> Summary:
        summary = Summary(errors=list(errors))
        summary.received = len(summary.errors)
        for sample in samples:
            summary.received += 1
            try:
                with session_scope(self.engine) as session:
                    prompt_id, created = repository.add_sample(
                        session,
                        sample.prompt,
                        sample.responses,
                        list(sample.category),
                        sample.system_prompt,
                        sample.source or self.source,
                        history=sample.history,
                    )
                    if created:
                        self._announce(session, prompt_id, sample)
            except StoreError as e:
                summary.errors.append(RecordError(sample.line, "responses", str(e)))
                continue
            if not created:
                summary.duplicates += 1
                continue
            summary.stored += 1
        if self.relay is not None and summary.stored:
            self.relay.kick()
        summary.errors.sort(key=lambda e: e.line)
        return summary

    def _announce(self, session: Session, prompt_id: str, sample: SampleRecord) -> None:
        """Queue the sample's event in its transaction (nothing without a relay to publish it)."""
        if self.relay is None:
            return
        event = events_pb2.SampleEvent(
            header=events_pb2.EventHeader(producer="ingestion"),
            sample=to_proto(prompt_id, sample, sample.source or self.source),
        )
        outbox.add(session, topics.SAMPLES, prompt_id, encode(topics.SAMPLES, event).value)

    def close(self) -> None:
        """Stop the relay (what it could not publish waits in the outbox for the next start)."""
        if self.relay is not None:
            self.relay.stop()

    def get(self, prompt_id: str) -> common_pb2.Sample | None:
        with read_scope(self.engine) as session:
            prompt = session.get(Prompt, prompt_id)
            if prompt is None:
                return None
            responses = repository.responses_for(session, prompt_id)
            return common_pb2.Sample(
                prompt_id=prompt_id,
                prompt=prompt.text,
                system_prompt=prompt.system_prompt or "",
                history=[common_pb2.Message(role=t["role"], content=t["content"]) for t in prompt.history or []],
                responses=[common_pb2.Response(id=k, content=c) for k, c in responses.items()],
                category=list(prompt.category or []),
                source=prompt.source,
            )


def to_proto(prompt_id: str, sample: SampleRecord, source: str = "") -> common_pb2.Sample:
    return common_pb2.Sample(
        prompt_id=prompt_id,
        prompt=sample.prompt,
        system_prompt=sample.system_prompt or "",
        responses=[common_pb2.Response(id=k, content=c) for k, c in sample.responses],
        category=list(sample.category),
        source=source,
        history=[common_pb2.Message(role=role, content=content) for role, content in sample.history],
    )
