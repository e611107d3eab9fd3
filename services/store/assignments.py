"""Whose a task is: one claim rule for every human annotation (gRPC and the annotator's page), and an operator's
or admin's corrections (reassign a task, void an annotation), recorded with the actor and a reason.

    with session_scope(engine) as s:
        for queued in assign_listed(s, "张三", now, lease, kind="triple", limit=20): ...   # theirs, new ones assigned
        check_assigned(s, task_id, prompt_id, "张三")          # before their human annotation is stored
        reassign(s, task_id, "李四", now, "person:admin", "张三 left")     # -> who held it before
        void(s, annotation_id, now, "person:admin", "random orders")     # -> its prompt (to resolve again)

A task is assigned by a claim (`TaskClaim`), whichever way an annotator works: the page's `annotators.claim_next`
(one triple at a time), their own ListTasks over gRPC (`assign_listed`: the open tasks they hold, then free ones,
at most one per prompt, as the page does: a prompt's triples go to different people), or an operator's
`reassign`. The newest claim of a task is its holder's; a claim older than the lease may be given to another.

The claim rule (`check_assigned`), for every human annotation, after a replay of a stored annotation id (answered
`created=False` by `repository.add_annotation`) and before anything is stored:

    no task_id                                               InvalidRecord   INVALID_ARGUMENT  400
    the task is unknown (or of another prompt)               UnknownTask     NOT_FOUND         404
    it was never assigned to the annotator                   NotAssigned     PERMISSION_DENIED 403
    it has its annotation already (theirs or another's)      TaskAnnotated   ALREADY_EXISTS    409  (once per task)
    it is assigned to someone else now (lease, reassigned)   StaleTask       FAILED_PRECONDITION 409

Voiding an annotation leaves its relations out of its prompt's resolution; a human annotation's task opens again,
free (its claims dropped; the voided annotator annotated the prompt, so it goes to someone else).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, delete, select
from sqlalchemy.orm import Session

from cheems.roles import ANNOTATE
from services.store import validate as v
from services.store.annotators import claim, ever_held, held_since, holder, queued
from services.store.errors import (
    InvalidRecord,
    NotAssigned,
    StaleTask,
    TaskAnnotated,
    TaskClosed,
    UnknownAnnotation,
    UnknownAnnotator,
    UnknownTask,
)
from services.store.models import Annotation, AnnotationCorrection, AnnotationTask, Annotator, TaskClaim
from services.store.tasks import QueuedTask, independent_of

SCAN = 16  # free tasks read per task wanted: a prompt has several, and only one of them is given to one person


def check_assigned(session: Session, task_id: str | None, prompt_id: str, name: str) -> AnnotationTask:
    """The task `name` may store a human annotation of now; raises as the module's table says."""
    if not task_id:
        raise InvalidRecord(
            "task_id is required for a human annotation: it names a task assigned to you (ListTasks or the page)"
        )
    task = session.get(AnnotationTask, task_id)
    if task is None or task.prompt_id != prompt_id:
        raise UnknownTask(f"prompt {prompt_id}: no task {task_id!r}")
    if not ever_held(session, task_id, name):
        raise NotAssigned(f"task {task_id} is not assigned to {name}: ask for your tasks (ListTasks or the page)")
    if task.status == "done" and (by := annotators_of(session, task_id)):
        who = "you" if name in by else "another annotator"
        raise TaskAnnotated(f"task {task_id} already has its annotation (by {who}): a task takes one")
    if holder(session, task_id) != name:
        raise StaleTask(f"task {task_id} is assigned to another annotator now (your lease ran out, or it was moved)")
    return task


def annotators_of(session: Session, task_id: str) -> list[str]:
    """Who annotated the task, voided annotations left out (first first)."""
    query = select(Annotation.annotator).where(Annotation.task_id == task_id, Annotation.voided_at.is_(None))
    return list(session.scalars(query.order_by(Annotation.created_at)))


def assign_listed(
    session: Session,
    name: str,
    now: datetime,
    lease: timedelta,
    prompt_id: str | None = None,
    kind: str | None = None,
    limit: int = 100,
) -> list[QueuedTask]:
    """The open tasks `name` holds (claimed again now), then free ones now assigned to them: open, nobody's within
    the lease, of prompts they are independent of, at most one per prompt; oldest first, `limit` in all."""
    session.get(Annotator, name, with_for_update=True)  # one assignment of this annotator at a time
    where = [AnnotationTask.status == "open"]
    if prompt_id is not None:
        where.append(AnnotationTask.prompt_id == prompt_id)
    if kind is not None:
        where.append(AnnotationTask.kind == kind)
    mine = select(AnnotationTask).join(TaskClaim, TaskClaim.task_id == AnnotationTask.id)
    mine = mine.where(TaskClaim.annotator == name, *where).order_by(TaskClaim.claimed_at, AnnotationTask.id)
    tasks = [t for t in session.scalars(mine) if holder(session, t.id) == name][:limit]
    free = and_(*where, ~held_since(now - lease), independent_of(name))
    scan = select(AnnotationTask.id, AnnotationTask.prompt_id).where(free)
    scan = scan.order_by(AnnotationTask.created_at, AnnotationTask.id).limit(max(0, limit - len(tasks)) * SCAN)
    prompts = {t.prompt_id for t in tasks}
    for task_id, pid in session.execute(scan).all() if len(tasks) < limit else ():
        if pid in prompts or len(tasks) >= limit:
            continue
        # locked one at a time and checked again: on PostgreSQL another annotator's listing skips what this one
        # is taking, and never takes what one took just before (SQLite serialises writers already)
        one = select(AnnotationTask).where(AnnotationTask.id == task_id, free).with_for_update(skip_locked=True)
        if (task := session.scalar(one)) is not None:
            prompts.add(pid)
            tasks.append(task)
    for task in tasks:
        claim(session, task.id, name, now)
    session.flush()
    return queued(session, tasks)


def reassign(session: Session, task_id: str, to: str, now: datetime, actor: str, reason: str) -> str | None:
    """Give an open task to the annotator `to` (an active account that annotates, independent of its prompt), as
    `actor` for `reason`; returns who held it before (None: nobody). Their submit is then StaleTask."""
    reason = _reason(reason, "reassigned", actor)
    task = session.get(AnnotationTask, task_id)
    if task is None:
        raise UnknownTask(f"no task {task_id!r}")
    if task.status != "open":
        raise TaskClosed(f"task {task_id} is {task.status}: void its annotation first (VoidAnnotation) to reopen it")
    account = session.get(Annotator, v.key("annotator", to))
    if account is None or not account.active or account.role not in ANNOTATE:
        raise UnknownAnnotator(f"annotator: no active account {to!r} that annotates (annotator or admin)")
    previous = holder(session, task_id)
    if previous != to:
        independent = select(AnnotationTask.id).where(AnnotationTask.id == task_id, independent_of(to))
        if session.scalar(independent) is None:
            raise InvalidRecord(
                f"annotator: {to} annotated prompt {task.prompt_id} or holds another of its tasks: "
                "a prompt's triples go to different people"
            )
    claim(session, task_id, to, now)
    _record(session, "reassigned", task_id, None, to, previous, actor, reason, now)
    return previous


def void(session: Session, annotation_id: str, now: datetime, actor: str, reason: str) -> tuple[str, bool]:
    """Void an annotation as `actor` for `reason`: its relations no longer count, and a human annotation's task is
    open again and free. Returns (its prompt id, False if it was void already)."""
    reason = _reason(reason, "voided", actor)
    annotation = session.get(Annotation, v.key("annotation_id", annotation_id))
    if annotation is None:
        raise UnknownAnnotation(f"no annotation {annotation_id!r}")
    if annotation.voided_at is not None:
        return annotation.prompt_id, False
    annotation.voided_at = now
    task = session.get(AnnotationTask, annotation.task_id) if annotation.task_id else None
    if task is not None and annotation.kind == "human":
        task.status = "open"
        session.execute(delete(TaskClaim).where(TaskClaim.task_id == task.id))  # free, for anyone independent
    _record(session, "voided", annotation.task_id, annotation_id, annotation.annotator, None, actor, reason, now)
    session.flush()
    return annotation.prompt_id, True


def corrections(session: Session) -> list[AnnotationCorrection]:
    """Every reassignment and void, oldest first."""
    return list(session.scalars(select(AnnotationCorrection).order_by(AnnotationCorrection.id)))


def _reason(reason: str, action: str, actor: str) -> str:
    if not reason.strip():
        raise InvalidRecord(f"reason: say why it is {action} (it is recorded with {actor})")
    return v.text("reason", reason)


def _record(
    session: Session,
    action: str,
    task_id: str | None,
    annotation_id: str | None,
    annotator: str,
    previous: str | None,
    actor: str,
    reason: str,
    now: datetime,
) -> None:
    row = AnnotationCorrection(
        action=action, task_id=task_id, annotation_id=annotation_id, annotator=annotator, previous=previous
    )
    row.actor, row.reason, row.at = actor, reason, now
    session.add(row)
