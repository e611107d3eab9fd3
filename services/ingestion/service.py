"""Store samples and announce them. Each sample has its own transaction: one bad record loses nothing else."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

from cheems.v1 import common_pb2, events_pb2
from services.bus import topics
from services.bus.client import Publisher
from services.ingestion.records import RecordError, SampleRecord
from services.store import repository
from services.store.db import session_scope
from services.store.errors import StoreError
from services.store.models import Prompt


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
    def __init__(self, engine: Engine, publisher: Publisher | None = None, source: str = "") -> None:
        self.engine, self.publisher, self.source = engine, publisher, source

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
            except StoreError as e:
                summary.errors.append(RecordError(sample.line, "responses", str(e)))
                continue
            if not created:
                summary.duplicates += 1
                continue
            summary.stored += 1
            self._announce(prompt_id, sample)
        if self.publisher is not None:
            self.publisher.flush()
        summary.errors.sort(key=lambda e: e.line)
        return summary

    def _announce(self, prompt_id: str, sample: SampleRecord) -> None:
        if self.publisher is None:
            return
        self.publisher.publish(
            topics.SAMPLES,
            prompt_id,
            events_pb2.SampleEvent(
                header=events_pb2.EventHeader(producer="ingestion"),
                sample=to_proto(prompt_id, sample, sample.source or self.source),
            ),
        )

    def get(self, prompt_id: str) -> common_pb2.Sample | None:
        with session_scope(self.engine) as session:
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
