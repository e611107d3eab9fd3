"""The annotation service's events, queued in the store with the change they announce and relayed to Kafka.

    cheems.annotations.v1  AnnotationEvent, key = prompt id: every newly stored annotation, human or AI
    cheems.rankings.v1     RankingEvent, key = prompt id: every stored ranking (a prompt's last open task
                           done, or a Resolve call), with its conflicts and merged nodes

Delivery is at-least-once. An event is written to the store's outbox (`services.store.outbox`) in the
transaction of its change (`queue`), so a stored annotation or ranking always gets its event, whatever
happens to the broker or the process after the commit: the relay (`services.bus.relay.EventRelay`)
publishes waiting events oldest first and deletes them only once the broker acknowledged them. A relay
killed between the two sends them again after a restart, with the same `header.event_id`: consumers
deduplicate on it, or treat a ranking as an upsert keyed by prompt id (the last one published for a
prompt is its current ranking). A broker outage delays events, never loses them, and never fails a
submit. A replayed submit (an annotation id already stored) stores nothing and so announces nothing.
One relay at a time per database keeps one prompt's events in the order its changes committed.

    with session_scope(engine) as session:
        ...                                                    # the change
        queue(session, topics.RANKINGS, prompt_id, ranking_event(prompt_id, rank, conflicts, merged))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf.message import Message
from sqlalchemy.orm import Session

from cheems import errors
from cheems.v1 import annotation_pb2, common_pb2, events_pb2
from services.bus.codec import encode
from services.store import outbox

PRODUCER = "annotation"
KINDS = {"human": annotation_pb2.ANNOTATOR_KIND_HUMAN, "ai": annotation_pb2.ANNOTATOR_KIND_AI}


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
