"""Whose a task is: the claim rule every human annotation passes (gRPC and the annotator's page alike), and an
operator's or admin's corrections (reassign a task, void an annotation), recorded with the actor and a reason.

    with session_scope(engine) as s:
        check_assigned(s, task_id, prompt_id, "张三")          # before their human annotation is stored
        reassign(s, task_id, "李四", now, "person:admin", "张三 left")     # -> who held it before
        void(s, annotation_id, now, "person:admin", "random orders")     # -> its prompt (to resolve again)

A task is assigned by `annotators.assign` (their ListTasks, the page's next task: one rule) or an operator's
`reassign`; its holder is `AnnotationTask.held_by`, and `TaskClaim` says who ever held it. A lease that ran out
leaves the task its holder's until someone else takes it: until then they may still submit it.

The claim rule (`check_assigned`), for every human annotation, after a replay of a stored annotation id (answered
`created=False` by `repository.add_annotation`) and before anything is stored; the task's row is locked, so a
listing cannot take it while its holder's submit is under way:

    no task_id                                               InvalidRecord   INVALID_ARGUMENT  400
    the task is unknown (or of another prompt)               UnknownTask     NOT_FOUND         404
    it was never assigned to the annotator                   NotAssigned     PERMISSION_DENIED 403
    it has its annotation already (theirs or another's)      TaskAnnotated   ALREADY_EXISTS    409  (once per task)
    it is someone else's now (their lease ran out and it was taken, or reassigned)   StaleTask   FAILED_PRECONDITION 409

Voiding an annotation leaves its relations out of its prompt's resolution; a human annotation's task opens again,
free (nobody holds it; the voided annotator did their share of the prompt, so it goes to someone else). A void
locks the prompt first, as a submit does, and reads the annotation after: of two voids at once the second finds it
voided and records nothing.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from cheems.roles import ANNOTATE
from services.store import validate as v
from services.store.annotators import claim, ever_held
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
from services.store.models import Annotation, AnnotationCorrection, AnnotationTask, Annotator
from services.store.tasks import QueueConfig, Shares, held_tasks, lock_prompt


def check_assigned(session: Session, task_id: str | None, prompt_id: str, name: str) -> AnnotationTask:
    """The task `name` may store a human annotation of now (its row locked); raises as the module's table says."""
    if not task_id:
        raise InvalidRecord(
            "task_id is required for a human annotation: it names a task assigned to you (ListTasks or the page)"
        )
    task = session.get(AnnotationTask, v.key("task_id", task_id), with_for_update=True, populate_existing=True)
    if task is None or task.prompt_id != prompt_id:
        raise UnknownTask(f"prompt {prompt_id}: no task {task_id!r}")
    if task.status == "open" and task.held_by == name:  # theirs: the one statement of the common case
        return task
    if not ever_held(session, task_id, name):
        raise NotAssigned(f"task {task_id} is not assigned to {name}: ask for your tasks (ListTasks or the page)")
    if task.status == "done" and (by := annotators_of(session, task_id)):
        who = "you" if name in by else "another annotator"
        raise TaskAnnotated(f"task {task_id} already has its annotation (by {who}): a task takes one")
    if task.held_by != name:
        raise StaleTask(f"task {task_id} is assigned to another annotator now (your lease ran out, or it was moved)")
    return task


def annotators_of(session: Session, task_id: str) -> list[str]:
    """Who annotated the task, voided annotations left out (first first)."""
    query = select(Annotation.annotator).where(Annotation.task_id == task_id, Annotation.voided_at.is_(None))
    return list(session.scalars(query.order_by(Annotation.created_at)))


def reassign(
    session: Session,
    task_id: str,
    to: str,
    now: datetime,
    actor: str,
    reason: str,
    config: QueueConfig | None = None,
) -> str | None:
    """Give an open task to the annotator `to` (an active account that annotates, who may take it under `config`'s
    rule), as `actor` for `reason`; returns who held it before (None: nobody). Their submit is then StaleTask.
    An operator may give a person more than `max_held`: their listings then add nothing until they are below it."""
    reason = _reason(reason, "reassigned", actor)
    task = session.get(AnnotationTask, v.key("task_id", task_id), with_for_update=True)
    if task is None:
        raise UnknownTask(f"no task {task_id!r}")
    if task.status != "open":
        raise TaskClosed(f"task {task_id} is {task.status}: void its annotation first (VoidAnnotation) to reopen it")
    account = session.get(Annotator, v.key("annotator", to), with_for_update=True)  # as their own listing does
    if account is None or not account.active or account.role not in ANNOTATE:
        raise UnknownAnnotator(f"annotator: no active account {to!r} that annotates (annotator or admin)")
    previous = task.held_by
    if previous != to:
        shares = Shares(session, to, config or QueueConfig(), held_tasks(session, to))
        shares.read([task])
        if shares.block(task) is not None:
            raise InvalidRecord(
                f"annotator: {to} did their share of prompt {task.prompt_id} (annotated or holds its tasks): "
                "a prompt's triples go to different people"
            )
    claim(session, task, to, now)
    _record(session, "reassigned", task_id, None, to, previous, actor, reason, now)
    return previous


def void(session: Session, annotation_id: str, now: datetime, actor: str, reason: str) -> tuple[str, bool]:
    """Void an annotation as `actor` for `reason`: its relations no longer count, and a human annotation's task is
    open again and free. Its prompt is locked first (as a submit does). Returns (its prompt id, False if it was
    void already, by an earlier or a concurrent void)."""
    reason = _reason(reason, "voided", actor)
    key = v.key("annotation_id", annotation_id)
    prompt_id = session.scalar(select(Annotation.prompt_id).where(Annotation.id == key))
    if prompt_id is None:
        raise UnknownAnnotation(f"no annotation {annotation_id!r}")
    lock_prompt(session, prompt_id)
    annotation = session.get(Annotation, key, populate_existing=True)  # read after the lock: as the last void left it
    assert annotation is not None  # annotations are never deleted
    if annotation.voided_at is not None:
        return prompt_id, False
    annotation.voided_at = now
    task = session.get(AnnotationTask, annotation.task_id) if annotation.task_id else None
    if task is not None and annotation.kind == "human":
        task.status, task.held_by, task.held_at = "open", None, None  # free, for anyone who may take it
        # it is free again where it always was in the queue: scans that passed it start there again
        moved = update(Annotator).where(Annotator.queue_from > task.created_at).values(queue_from=task.created_at)
        session.execute(moved.execution_options(synchronize_session=False))
    _record(session, "voided", annotation.task_id, annotation_id, annotation.annotator, None, actor, reason, now)
    session.flush()
    return prompt_id, True


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
