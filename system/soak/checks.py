"""After the soak: what every client was told, against what the store holds and what the bus carries.

Each check is a `Check(name, ok, detail)`; the soak fails when any is not ok:
- samples: every acknowledged prompt is stored, once;
- sample events: every acknowledged prompt's event is on cheems.samples.v1 and reached the annotation service
  (its tasks exist), and a redelivered event made no second set of tasks;
- annotations: every acknowledged annotation is stored and counts;
- rankings: every stored ranking's event is on cheems.rankings.v1;
- runs: every acknowledged evaluation run is stored and finished;
- outbox: nothing waits to be published;
- clients served: every client was answered, and refused nothing but for an outage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from services.bus import topics
from services.bus.codec import decode
from services.store import outbox, reads, repository
from services.store.db import session_scope
from system.soak.ledger import Ledger


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def published(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Any]:
    """Every event on `topic`, oldest first per partition: read to the end offsets without joining a group."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1000)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        events: list[Any] = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(p) < ends[p] for p in partitions) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                events += [decode(topic, r.value, list(r.headers or [])) for r in records]
        return events
    finally:
        consumer.close()


def check_all(engine: Engine, bootstrap: str, ledger: Ledger) -> list[Check]:
    texts = ledger.acked("samples")
    with session_scope(engine) as session:
        ids = reads.prompt_ids(session, texts)
        stored = [i[0] for i in ids.values() if i]
        groups = reads.task_groups(session, stored)
        annotations = reads.annotations_by_id(session, ledger.acked("annotations"))
        ranked = reads.ranked_prompts(session)
        runs = repository.runs_by_id(session, ledger.acked("runs"))
        waiting = outbox.waiting(session)
    sample_events = {e.sample.prompt_id for e in published(bootstrap, topics.SAMPLES)}
    ranking_events = {e.ranking.prompt_id for e in published(bootstrap, topics.RANKINGS)}
    return [
        samples_stored(ids),
        sample_events_delivered(stored, sample_events, groups),
        annotations_stored(ledger.acked("annotations"), annotations),
        rankings_published(ranked, ranking_events),
        runs_finished(ledger.acked("runs"), {k: v.state for k, v in runs.items()}),
        Check("outbox", waiting == 0, f"{waiting} events wait to be published"),
    ]


# refusals an annotator meets honestly: the task went to someone else meanwhile (a lease ran out, an operator)
TAKEN = {"ALREADY_EXISTS", "PERMISSION_DENIED", "NOT_FOUND", "FAILED_PRECONDITION"}
OUTAGE = {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "UNKNOWN", "CANCELLED"}


def clients_served(ledger: Ledger, clients: Iterable[str]) -> Check:
    """Every client was answered OK at least once, and refused nothing but for an outage: the soak's requests
    are valid, so any other refusal (INVALID_ARGUMENT, INTERNAL, UNAUTHENTICATED...) is a finding."""
    silent = sorted(c for c in clients if not ledger.calls.get(c))
    refused = {f"{client} {code}": n for (client, code), n in sorted(ledger.errors.items())
               if code not in OUTAGE and not (client == "annotators" and code in TAKEN)}  # fmt: skip
    detail = f"never answered OK: {', '.join(silent) or 'none'}; refused: {refused or 'nothing'}"
    return Check("clients served", not silent and not refused, detail)


def samples_stored(ids: dict[str, list[str]]) -> Check:
    lost = [t for t, found in ids.items() if not found]
    twice = [t for t, found in ids.items() if len(found) > 1]
    detail = f"{len(ids)} acknowledged, {len(lost)} lost, {len(twice)} stored twice"
    return Check("samples", not lost and not twice, detail + _first(lost + twice))


def sample_events_delivered(stored: list[str], events: set[str], groups: dict[str, list[tuple[Any, int]]]) -> Check:
    unpublished = [p for p in stored if p not in events]
    no_tasks = [p for p in stored if not groups.get(p)]
    doubled = [p for p, tasks in groups.items() if any(n > 1 for n in Counter(tasks).values())]
    detail = (f"{len(stored)} prompts: {len(unpublished)} without their event on {topics.SAMPLES}, "
              f"{len(no_tasks)} without tasks, {len(doubled)} with a task made twice")  # fmt: skip
    return Check(
        "sample events", not (unpublished or no_tasks or doubled), detail + _first(unpublished + no_tasks + doubled)
    )


def annotations_stored(acked: Iterable[str], stored: dict[str, bool]) -> Check:
    acked = sorted(acked)
    lost = [a for a in acked if a not in stored]
    voided = [a for a in acked if a in stored and not stored[a]]
    detail = f"{len(acked)} acknowledged, {len(lost)} lost, {len(voided)} not counting"
    return Check("annotations", not lost and not voided, detail + _first(lost + voided))


def rankings_published(ranked: set[str], events: set[str]) -> Check:
    missing = sorted(ranked - events)
    return Check(
        "ranking events", not missing, f"{len(ranked)} rankings, {len(missing)} never published" + _first(missing)
    )


def runs_finished(acked: Iterable[str], states: dict[str, str]) -> Check:
    acked = sorted(acked)
    lost = [r for r in acked if r not in states]
    unfinished = [f"{r} ({states[r]})" for r in acked if r in states and states[r] != "succeeded"]
    detail = f"{len(acked)} started, {len(lost)} lost, {len(unfinished)} not succeeded"
    return Check("evaluation runs", not lost and not unfinished, detail + _first(lost + unfinished))


def _first(items: list[str], n: int = 3) -> str:
    return f" (e.g. {', '.join(items[:n])})" if items else ""
