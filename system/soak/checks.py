"""After the soak: what every client was told, against what the store holds and what the bus carries.

Each check is a `Check(name, ok, detail)`; the soak fails when any is not ok:
- samples: every acknowledged prompt is stored, once;
- tasks made: every acknowledged prompt's event reached the annotation service (its tasks exist), and a
  redelivered event made no second set of tasks;
- annotations: every acknowledged annotation is stored and counts;
- sample events, ranking events: every acknowledged prompt's event is on cheems.samples.v1, every stored
  ranking's on cheems.rankings.v1 (read whole, from the topics' start);
- runs: every acknowledged evaluation run is stored and finished;
- outbox: nothing waits to be published;
- clients served: every client was answered, and refused nothing but for an outage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError
from sqlalchemy.engine import Engine

from services.bus import topics
from services.bus.reader import read_topic
from services.store import outbox, reads, repository
from services.store.db import session_scope
from system.soak.ledger import Ledger


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def store_checks(engine: Engine, ledger: Ledger) -> list[Check]:
    """What the store holds of every acknowledged write (cheap: asked again until it settles)."""
    texts = ledger.acked("samples")
    with session_scope(engine) as session:
        ids = reads.prompt_ids(session, texts)
        stored = [i[0] for i in ids.values() if i]
        groups = reads.task_groups(session, stored)
        annotations = reads.annotations_by_id(session, ledger.acked("annotations"))
        runs = repository.runs_by_id(session, ledger.acked("runs"))
        waiting = outbox.waiting(session)
    return [
        samples_stored(ids),
        tasks_made(stored, groups),
        annotations_stored(ledger.acked("annotations"), annotations),
        runs_finished(ledger.acked("runs"), {k: v.state for k, v in runs.items()}),
        Check("outbox", waiting == 0, f"{waiting} events wait to be published"),
    ]


def bus_checks(engine: Engine, bootstrap: str, ledger: Ledger, timeout: float) -> list[Check]:
    """What the bus carries of it: every acknowledged sample's event and every stored ranking's, read from the
    topics' start (once, after the store settled: it reads everything published)."""
    with session_scope(engine) as session:
        stored = [i[0] for i in reads.prompt_ids(session, ledger.acked("samples")).values() if i]
        ranked = reads.ranked_prompts(session)
    found = []
    for name, topic, wanted, key in (("sample events", topics.SAMPLES, set(stored), "sample"),
                                     ("ranking events", topics.RANKINGS, ranked, "ranking")):  # fmt: skip
        try:
            published = {getattr(d.event, key).prompt_id for d in read_topic(bootstrap, topic, timeout=timeout)}
        except (TimeoutError, KafkaError) as e:
            found.append(Check(name, False, f"{topic} could not be read whole: {e}"))
            continue
        missing = sorted(wanted - published)
        found.append(Check(name, not missing, f"{len(wanted)} expected on {topic}, {len(missing)} missing"
                                              + _first(missing)))  # fmt: skip
    return found


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


def tasks_made(stored: list[str], groups: dict[str, list[tuple[Any, int]]]) -> Check:
    """Every stored prompt's event reached the annotation service (its tasks exist), and a redelivery of it made
    no second set of tasks."""
    no_tasks = [p for p in stored if not groups.get(p)]
    doubled = [p for p, tasks in groups.items() if any(n > 1 for n in Counter(tasks).values())]
    detail = f"{len(stored)} prompts: {len(no_tasks)} without tasks, {len(doubled)} with a task made twice"
    return Check("tasks made", not (no_tasks or doubled), detail + _first(no_tasks + doubled))


def annotations_stored(acked: Iterable[str], stored: dict[str, bool]) -> Check:
    acked = sorted(acked)
    lost = [a for a in acked if a not in stored]
    voided = [a for a in acked if a in stored and not stored[a]]
    detail = f"{len(acked)} acknowledged, {len(lost)} lost, {len(voided)} not counting"
    return Check("annotations", not lost and not voided, detail + _first(lost + voided))


def runs_finished(acked: Iterable[str], states: dict[str, str]) -> Check:
    acked = sorted(acked)
    lost = [r for r in acked if r not in states]
    unfinished = [f"{r} ({states[r]})" for r in acked if r in states and states[r] != "succeeded"]
    detail = f"{len(acked)} started, {len(lost)} lost, {len(unfinished)} not succeeded"
    return Check("evaluation runs", not lost and not unfinished, detail + _first(lost + unfinished))


def _first(items: list[str], n: int = 3) -> str:
    return f" (e.g. {', '.join(items[:n])})" if items else ""
