"""Who each triple-wise task is given to (the web page's work queue); the accounts are `services.store.accounts`.

with session_scope(engine) as s:
    queued = claim_next(s, "张三", now, lease)        # their open task, else the oldest free one (or None)
    holder(s, queued.task.id)                        # "张三"
    withheld(s, "张三", now, lease)                   # free triples left only for others (prompts they did)

A claim lasts `lease`: a task claimed longer ago than that and still open may be given to someone else
(an annotator who walked away does not hold it forever); the newest claim of a task is its holder's, the
older ones say who held it before (their submit is then stale). On PostgreSQL two annotators asking at
once never get the same task (FOR UPDATE SKIP LOCKED); SQLite serialises writers already.

A free task is given only to an annotator independent of its prompt (`tasks.independent_of`: one who has not
annotated it and holds none of its tasks), so a prompt's triples go to different people; the annotator's row
is locked while they claim, so two tabs of one person cannot take two triples of a prompt at once.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, exists, func, select
from sqlalchemy.orm import Session

from services.store.models import Annotation, AnnotationTask, Annotator, Prompt, Ranking, TaskClaim
from services.store.repository import responses_for
from services.store.tasks import QueuedTask, independent_of


def holder(session: Session, task_id: str) -> str | None:
    """Who holds the task: the annotator it was given to last (None: never given out)."""
    query = select(TaskClaim.annotator).where(TaskClaim.task_id == task_id)
    return session.scalar(query.order_by(TaskClaim.claimed_at.desc(), TaskClaim.annotator).limit(1))


def ever_held(session: Session, task_id: str, name: str) -> bool:
    return session.get(TaskClaim, (task_id, name)) is not None


def claim_next(session: Session, name: str, now: datetime, lease: timedelta) -> QueuedTask | None:
    """The annotator's oldest open task they hold (claimed again now), else the oldest open triple nobody has
    held for `lease` and of a prompt they are independent of, now theirs; None when no such task is left."""
    session.get(Annotator, name, with_for_update=True)  # one claim of this annotator at a time
    mine = (
        select(AnnotationTask)
        .join(TaskClaim, TaskClaim.task_id == AnnotationTask.id)
        .where(TaskClaim.annotator == name, AnnotationTask.status == "open", AnnotationTask.kind == "triple")
        .order_by(TaskClaim.claimed_at, AnnotationTask.id)
    )
    task = next((t for t in session.scalars(mine) if holder(session, t.id) == name), None)
    if task is None:
        free = (
            select(AnnotationTask)
            .where(free_triple(now - lease), independent_of(name))
            .order_by(AnnotationTask.created_at, AnnotationTask.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        task = session.scalar(free)
    if task is None:
        return None
    claim(session, task.id, name, now)
    session.flush()
    return queued(session, [task])[0]


def claim(session: Session, task_id: str, name: str, now: datetime) -> None:
    """`name` holds the task from `now` (their claim made, or renewed)."""
    found = session.get(TaskClaim, (task_id, name))
    if found is None:
        session.add(TaskClaim(task_id=task_id, annotator=name, claimed_at=now))
    else:
        found.claimed_at = now


def queued(session: Session, tasks: list[AnnotationTask]) -> list[QueuedTask]:
    """Each task with its prompt and its responses' contents, as an annotator is shown it."""
    out = []
    for task in tasks:
        prompt = session.get(Prompt, task.prompt_id)
        assert prompt is not None  # a task's prompt is a foreign key
        contents = responses_for(session, task.prompt_id)
        out.append(QueuedTask(task, prompt, {k: contents[k] for k in task.response_keys}))
    return out


def withheld(session: Session, name: str, now: datetime, lease: timedelta) -> int:
    """Free open triples `name` may not take: of prompts they annotated or hold a task of (left for others)."""
    query = select(func.count()).select_from(AnnotationTask)
    return int(session.scalar(query.where(free_triple(now - lease), ~independent_of(name))) or 0)


def free_triple(cutoff: datetime) -> ColumnElement[bool]:
    """An open triple-wise task nobody claimed at or after `cutoff`."""
    return and_(AnnotationTask.status == "open", AnnotationTask.kind == "triple", ~held_since(cutoff))


def held_since(cutoff: datetime) -> ColumnElement[bool]:
    """A task someone claimed at or after `cutoff` (within the lease)."""
    return exists().where(TaskClaim.task_id == AnnotationTask.id, TaskClaim.claimed_at >= cutoff)


def open_claims(session: Session) -> dict[str, int]:
    """Open triple-wise tasks held per annotator (whatever the claim's age: the holder may still submit)."""
    query = (
        select(TaskClaim.task_id, TaskClaim.annotator)
        .join(AnnotationTask, AnnotationTask.id == TaskClaim.task_id)
        .where(AnnotationTask.status == "open")
        .order_by(TaskClaim.claimed_at, TaskClaim.annotator)
    )
    holders = {task: name for task, name in session.execute(query)}  # the newest claim of each task wins
    return dict(Counter(holders.values()))


def queue_size(session: Session, now: datetime, lease: timedelta) -> tuple[int, int]:
    """(open triple-wise tasks, of which nobody holds within the lease)."""
    open_triples = and_(AnnotationTask.status == "open", AnnotationTask.kind == "triple")
    total = session.scalar(select(func.count()).select_from(AnnotationTask).where(open_triples)) or 0
    free = select(func.count()).select_from(AnnotationTask).where(open_triples, ~held_since(now - lease))
    return int(total), int(session.scalar(free) or 0)


def annotated_by_people(session: Session) -> tuple[list[Annotation], dict[str, dict[str, int]]]:
    """Every annotation (people's and AI's) of the prompts people annotated, oldest first, and those prompts'
    resolved rankings {prompt id: {response key: rank}} (the overview's agreement and cycle figures)."""
    people = select(Annotation.prompt_id).where(Annotation.kind == "human").distinct()
    query = select(Annotation).where(Annotation.prompt_id.in_(people), Annotation.voided_at.is_(None))
    query = query.order_by(Annotation.created_at, Annotation.id)
    ranked = select(Ranking.prompt_id, Ranking.rank).where(Ranking.prompt_id.in_(people))
    rankings = {pid: {k: int(r) for k, r in rank.items()} for pid, rank in session.execute(ranked)}
    return list(session.scalars(query)), rankings


def task_annotators(session: Session, task_id: str) -> list[str]:
    """Who annotated a task (the one who completed it first)."""
    query = select(Annotation.annotator).where(Annotation.task_id == task_id).order_by(Annotation.created_at)
    return list(session.scalars(query))


def doubled_annotations(session: Session) -> list[tuple[Annotation, Annotation]]:
    """(first, second) human annotation of each doubled triple (`AnnotationTask.copy`) whose two copies are both
    annotated, the first annotation of each copy (a task takes one); in prompt, then key order."""
    doubled = select(AnnotationTask.prompt_id).where(AnnotationTask.copy > 0)
    query = (
        select(Annotation, AnnotationTask)
        .join(AnnotationTask, AnnotationTask.id == Annotation.task_id)
        .where(Annotation.kind == "human", AnnotationTask.kind == "triple", AnnotationTask.prompt_id.in_(doubled))
        .where(Annotation.voided_at.is_(None))
        .order_by(Annotation.created_at, Annotation.id)
    )
    copies: dict[tuple[str, tuple[str, ...]], dict[int, Annotation]] = {}
    for annotation, task in session.execute(query):
        copies.setdefault((task.prompt_id, tuple(sorted(task.response_keys))), {}).setdefault(task.copy, annotation)
    return [(found[0], found[1]) for _, found in sorted(copies.items()) if 0 in found and 1 in found]
