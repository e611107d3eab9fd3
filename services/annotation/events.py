"""The annotation service's events, queued in the store with the change they announce and relayed to Kafka.

    cheems.annotations.v1  AnnotationEvent, key = prompt id: every newly stored annotation, human or AI
    cheems.rankings.v1     RankingEvent, key = prompt id: every stored ranking (a prompt's last open task
                           done, or a Resolve call), with its conflicts and merged nodes

Delivery is at-least-once. An event is written to the store's outbox (`services.store.outbox`) in the
transaction of its change, so a stored annotation or ranking always gets its event, whatever happens to
the broker or the process after the commit: `EventRelay` publishes waiting events oldest first and
deletes them only once the broker acknowledged them. A relay killed between the two sends them again
after a restart, with the same `header.event_id`: consumers deduplicate on it, or treat a ranking as
an upsert keyed by prompt id (the last one published for a prompt is its current ranking). A broker
outage delays events, never loses them, and never fails a submit. A replayed submit (an annotation id
already stored) stores nothing and so announces nothing. One relay at a time per database keeps one
prompt's events in the order its changes committed.

    relay = EventRelay(engine, Publisher("localhost:9092")).start()   # a background thread
    relay.kick()      # after a commit: publish now rather than at the next sweep
    relay.stop()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from kafka.errors import KafkaError
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from cheems import errors
from cheems.v1 import annotation_pb2, common_pb2, events_pb2
from services.bus import topics
from services.bus.client import Publisher
from services.bus.codec import encode
from services.store import outbox
from services.store.db import session_scope

log = logging.getLogger(__name__)
PRODUCER = "annotation"
KINDS = {"human": annotation_pb2.ANNOTATOR_KIND_HUMAN, "ai": annotation_pb2.ANNOTATOR_KIND_AI}


class RelayError(errors.Unavailable):
    """The broker did not take the waiting events (they stay in the outbox for the next try)."""


class BrokerUnavailable(errors.Unavailable):
    """The Kafka broker cannot be reached at start, or a consumer loop stopped (the process exits to restart)."""


def result_fields(result: Mapping[str, Any]) -> dict[str, Any]:
    """A stored result ({"better", "worse"}, {"equal": [...]}, {"order": [[...], ...]}) as Annotation fields."""
    if "better" in result:
        better = annotation_pb2.VERDICT_A_BETTER
        return {"pair": annotation_pb2.PairResult(a=result["better"], b=result["worse"], verdict=better)}
    if "equal" in result and len(result["equal"]) == 2:
        a, b = result["equal"]
        return {"pair": annotation_pb2.PairResult(a=a, b=b, verdict=annotation_pb2.VERDICT_TIE)}
    groups = result["order"] if "order" in result else [result["equal"]]
    return {"order": annotation_pb2.OrderResult(groups=[annotation_pb2.TieGroup(ids=g) for g in groups])}


def annotation_event(
    annotation_id: str,
    prompt_id: str,
    annotator: str,
    kind: str,
    result: Mapping[str, Any],
    discarded: Iterable[str],
    task_id: str | None,
) -> events_pb2.AnnotationEvent:
    annotation = annotation_pb2.Annotation(
        annotation_id=annotation_id,
        prompt_id=prompt_id,
        task_id=task_id or "",
        annotator=annotator,
        kind=KINDS[kind],
        discarded=sorted(set(discarded)),
        **result_fields(result),
    )
    return events_pb2.AnnotationEvent(header=events_pb2.EventHeader(producer=PRODUCER), annotation=annotation)


def ranking_event(prompt_id: str, rank: Mapping[str, int], conflicts: int, merged: int) -> events_pb2.RankingEvent:
    return events_pb2.RankingEvent(
        header=events_pb2.EventHeader(producer=PRODUCER),
        ranking=common_pb2.Ranking(prompt_id=prompt_id, rank=dict(rank)),
        conflicts=conflicts,
        merged_nodes=merged,
    )


def queue(session: Session, topic: str, key: str, event: Message) -> None:
    """Write the event to the outbox in `session`'s transaction (its id and time are fixed now)."""
    outbox.add(session, topic, key, encode(topic, event).value)


@dataclass(frozen=True)
class RelayConfig:
    """sweep_every: seconds between looks for events nobody kicked for (a crashed process's, an outage's);
    batch: events taken per transaction; ack_timeout: seconds the broker has to acknowledge a batch;
    max_backoff: the longest pause between tries while the broker fails."""

    sweep_every: float = 2.0
    batch: int = 256
    ack_timeout: float = 10.0
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        for name in ("sweep_every", "ack_timeout", "max_backoff"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RelayConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.batch < 1:
            raise ValueError(f"RelayConfig.batch must be >= 1, got {self.batch}")


class EventRelay:
    """Publishes the outbox: at once when kicked, every `sweep_every` seconds anyway, backing off on failure."""

    def __init__(self, engine: Engine, publisher: Publisher, config: RelayConfig = RelayConfig()) -> None:
        self.engine, self.publisher, self.config = engine, publisher, config
        self.published = 0
        self._wake, self._stop, self._lock = threading.Event(), threading.Event(), threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> EventRelay:
        self._wake.set()  # first publish what a previous process left
        self._thread = threading.Thread(target=self._loop, name="event-relay", daemon=True)
        self._thread.start()
        return self

    def kick(self) -> None:
        self._wake.set()

    def drain(self) -> int:
        """Publish every waiting event, oldest first; returns how many. RelayError leaves the rest waiting."""
        total = 0
        with self._lock:
            while (sent := self._publish_batch()) > 0:
                total += sent
        return total

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread, then try once more to publish what waits (what fails is sent by the next start)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.drain()
        except Exception as e:
            log.warning("stopping with events unpublished (the next start sends them): %s", e)

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            if backoff:
                self._stop.wait(backoff)  # a failing broker: kicks do not hurry the next try
            else:
                self._wake.wait(self.config.sweep_every)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.drain()
                backoff = 0.0
            except Exception as e:
                backoff = min(max(2 * backoff, 0.5), self.config.max_backoff)
                log.warning("events wait in the outbox (%s); next try in %.1f s", e, backoff)

    def _publish_batch(self) -> int:
        with session_scope(self.engine) as session:
            rows = outbox.take(session, self.config.batch)
            if not rows:
                return 0
            self._send([(row.topic, row.key, row.value) for row in rows])
            outbox.remove(session, [row.id for row in rows])
        self.published += len(rows)
        return len(rows)

    def _send(self, events: Sequence[tuple[str, str, bytes]]) -> None:
        deadline = time.monotonic() + self.config.ack_timeout
        try:
            sent = [self.publisher.publish(t, k, topics.PAYLOADS[t].FromString(v)) for t, k, v in events]
            self.publisher.flush(timeout=self.config.ack_timeout)  # now, not after linger_ms: the lock is held
            for future in sent:
                future.get(timeout=max(0.001, deadline - time.monotonic()))  # 0 would mean no limit
        except KafkaError as e:
            raise RelayError(f"the broker did not acknowledge {len(events)} events: {e!r}") from None
