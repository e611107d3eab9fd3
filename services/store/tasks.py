"""The annotation work queue in the store: open tasks with what an annotator reads, and one writer per prompt.

with session_scope(engine) as s:
    lock_prompt(s, prompt_id)                       # submits to one prompt take turns
    for queued in open_tasks(s, kind="triple", limit=100, annotator="张三"):
        queued.task.id, queued.prompt.text, queued.contents   # {response key: content}, in task order

Independent annotators (paper section 3.2): a prompt's triples go to different people, so an annotator is
never offered a task of a prompt they annotated (an annotation of kind human under their name) or hold a
task of (the newest claim of an open task on the annotator's page, whatever its age: they may still submit).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, exists, func, or_, select
from sqlalchemy.orm import Session, aliased

from services.store import validate as v
from services.store.errors import UnknownPrompt
from services.store.models import TASK_KINDS, Annotation, AnnotationTask, Prompt, Response, TaskClaim


@dataclass(frozen=True)
class QueuedTask:
    task: AnnotationTask
    prompt: Prompt
    contents: dict[str, str]  # the task's response keys, in task order -> their contents


def lock_prompt(session: Session, prompt_id: str) -> Prompt:
    """The prompt, locked until the transaction ends; UnknownPrompt when there is none.

    On PostgreSQL a row lock (SELECT ... FOR UPDATE), so two submits that close a prompt's last two tasks
    cannot both miss that nothing is left open; SQLite transactions here are serialised already.
    """
    prompt = session.get(Prompt, prompt_id, with_for_update=True)
    if prompt is None:
        raise UnknownPrompt(f"unknown prompt {prompt_id!r}")
    return prompt


def open_tasks(
    session: Session,
    prompt_id: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    created_before: datetime | None = None,
    annotator: str | None = None,
) -> list[QueuedTask]:
    """Open tasks, oldest first: of one prompt or all, of one kind ("triple", "pair") or both; with `annotator`,
    only those they may take (`independent_of`)."""
    query = select(AnnotationTask, Prompt).join(Prompt, Prompt.id == AnnotationTask.prompt_id)
    query = query.where(AnnotationTask.status == "open")
    if prompt_id is not None:
        if session.get(Prompt, prompt_id) is None:
            raise UnknownPrompt(f"unknown prompt {prompt_id!r}")
        query = query.where(AnnotationTask.prompt_id == prompt_id)
    if kind is not None:
        query = query.where(AnnotationTask.kind == v.one_of("kind", kind, TASK_KINDS))
    if created_before is not None:
        query = query.where(AnnotationTask.created_at < created_before)
    if annotator is not None:
        query = query.where(independent_of(v.key("annotator", annotator)))
    query = query.order_by(AnnotationTask.created_at, AnnotationTask.id).limit(v.count("limit", limit, minimum=1))
    rows = session.execute(query).all()
    wanted = select(Response.prompt_id, Response.response_key, Response.content)
    found = session.execute(wanted.where(Response.prompt_id.in_({task.prompt_id for task, _ in rows})))
    contents = {(pid, rkey): content for pid, rkey, content in found}
    return [
        QueuedTask(task, prompt, {k: contents[(task.prompt_id, k)] for k in task.response_keys})
        for task, prompt in rows
    ]


def open_count(session: Session, prompt_id: str) -> int:
    """How many of the prompt's tasks are still open."""
    query = select(func.count()).select_from(AnnotationTask)
    query = query.where(AnnotationTask.prompt_id == prompt_id, AnnotationTask.status == "open")
    return int(session.scalar(query) or 0)


def independent_of(name: str) -> ColumnElement[bool]:
    """A task of a prompt `name` neither annotated (kind human) nor holds a task of: one they may be given."""
    annotated = select(Annotation.prompt_id).where(Annotation.annotator == name, Annotation.kind == "human")
    return and_(AnnotationTask.prompt_id.not_in(annotated), AnnotationTask.prompt_id.not_in(held_prompts(name)))


def held_prompts(name: str) -> Select[Any]:
    """The prompts of the open tasks `name` holds: theirs is the task's newest claim (ties: the first name, as
    `annotators.holder` orders them). Aliased, so it never correlates with an outer query on the same tables."""
    task, mine, other = aliased(AnnotationTask), aliased(TaskClaim), aliased(TaskClaim)
    newer = or_(
        other.claimed_at > mine.claimed_at, and_(other.claimed_at == mine.claimed_at, other.annotator < mine.annotator)
    )
    superseded = exists().where(other.task_id == mine.task_id, newer)
    query = select(task.prompt_id).join(mine, mine.task_id == task.id)
    return query.where(mine.annotator == name, task.status == "open", ~superseded)
