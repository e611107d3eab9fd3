"""The annotation work queue in the store: open tasks with what an annotator reads, the rule of who may take which
task of a prompt, and one writer per prompt.

with session_scope(engine) as s:
    lock_prompt(s, prompt_id)                       # submits to one prompt take turns
    for queued in open_tasks(s, kind="triple", limit=100, annotator="张三"):
        queued.task.id, queued.prompt.text, queued.contents   # {response key: content}, in task order

How many tasks of a prompt one person may take (`QueueConfig.people_per_prompt`, `Shares`): under the paper's rule
(section 3.2, the default) a prompt's triples go to different people, so nobody is given a task of a prompt they
annotated (an annotation of kind human under their name, voided ones included) or hold a task of; with N people
per prompt a person may take up to ceil(tasks / N) of a prompt's tasks, so N people can finish it, and never two
copies of one triple. The check runs per candidate task, on the candidates' prompts only (an index probe of
annotations(annotator, prompt_id)), never as a filter over every annotation.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import Select, and_, func, literal_column, select, tuple_
from sqlalchemy.orm import InstrumentedAttribute, Session

from services.store import validate as v
from services.store.errors import UnknownPrompt
from services.store.models import TASK_KINDS, Annotation, AnnotationTask, Prompt, Response

# the queue's partial indexes (models.OPEN_FREE / OPEN_HELD) match only these literal predicates, not parameters
OPEN = AnnotationTask.status == literal_column("'open'")
FREE = and_(OPEN, AnnotationTask.held_by.is_(None))
HELD = and_(OPEN, AnnotationTask.held_by.is_not(None))
PAGE = 64  # candidate tasks read at first; each page after a full one twice as many, up to PAGE * 16
CANDIDATE = (  # what a scan reads of a task: enough to judge it, and to page on
    AnnotationTask.id,
    AnnotationTask.prompt_id,
    AnnotationTask.kind,
    AnnotationTask.response_keys,
    AnnotationTask.created_at,
    AnnotationTask.held_at,
)
FOR_GOOD: Literal["for good"] = "for good"  # they did their share of the prompt (or this very triple)
FOR_NOW: Literal["for now"] = "for now"  # what they hold of it fills their share: until it goes back, if ever
Block = Literal["for good", "for now"] | None


@dataclass(frozen=True)
class QueueConfig:
    """How the annotation service hands out work: one rule for ListTasks and the annotator's page.

    max_held: the tasks a person holds at once. 5: a person judges a triple in a minute or two, so five is a few
        minutes' work ahead without hoarding; a listing tops what they hold up to it (or to its `limit`, if smaller:
        nobody holds what they were not shown), and the page shows one at a time.
    lease_seconds: a held task nobody worked on this long (claimed, or opened on the page) goes back to the queue
        for anyone; its holder keeps it, and may still submit it, until someone else takes it.
    people_per_prompt: how many different people a prompt's tasks need. 0, the paper's rule: every task of a
        prompt goes to a different person (7 responses make 11 triples: 11 people). N: a person may take up to
        ceil(tasks / N) of a prompt's tasks, so N people can finish it (8 people, 11 triples: 2 each at most).
    """

    max_held: int = 5
    lease_seconds: float = 1800.0
    people_per_prompt: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.max_held <= 1000:
            raise ValueError(f"QueueConfig.max_held must be in 1..1000, got {self.max_held}")
        if not self.lease_seconds > 0:
            raise ValueError(f"QueueConfig.lease_seconds must be > 0, got {self.lease_seconds}")
        if self.people_per_prompt < 0:
            raise ValueError(
                f"QueueConfig.people_per_prompt must be >= 0 (0: the paper's rule), got {self.people_per_prompt}"
            )

    @property
    def lease(self) -> timedelta:
        return timedelta(seconds=self.lease_seconds)


def share(tasks: int, people: int) -> int:
    """How many of a prompt's `tasks` one person may take when `people` must be able to finish it (0: one each)."""
    return 1 if people <= 0 else max(1, math.ceil(tasks / people))


def people_needed(tasks: int, people: int) -> int:
    """How many different people finish a prompt of `tasks` tasks under `people_per_prompt` = `people`."""
    return math.ceil(tasks / share(tasks, people)) if tasks else 0


@dataclass(frozen=True)
class QueuedTask:
    task: AnnotationTask
    prompt: Prompt
    contents: dict[str, str]  # the task's response keys, in task order -> their contents


class Shares:
    """What one person has of each prompt (human annotations, held tasks), read for the candidates' prompts only,
    and whether they may take a candidate (`block`: None, FOR_NOW or FOR_GOOD)."""

    def __init__(self, session: Session, name: str, config: QueueConfig, held: Iterable[AnnotationTask]) -> None:
        self.session, self.name, self.people = session, name, config.people_per_prompt
        self.done: dict[str, list[tuple[str, ...]]] = {}  # prompt -> the triples they annotated (sorted keys)
        self.held: dict[str, list[tuple[str, ...]]] = {}
        self.sizes: dict[tuple[str, str], int] = {}  # (prompt, kind) -> its tasks
        for task in held:
            self.hold(task)

    def read(self, candidates: Sequence[Any]) -> None:
        """Load what they did of the candidates' prompts not read yet (one query; two with N people a prompt)."""
        new = {c.prompt_id for c in candidates} - self.done.keys()
        if not new:
            return
        self.done.update({pid: [] for pid in new})
        query = select(Annotation.prompt_id, AnnotationTask.response_keys).outerjoin(
            AnnotationTask, AnnotationTask.id == Annotation.task_id
        )
        query = query.where(
            Annotation.annotator == self.name, Annotation.kind == "human", Annotation.prompt_id.in_(new)
        )
        for pid, keys in self.session.execute(query):
            self.done[pid].append(tuple(sorted(keys or ())))
        if self.people:
            sizes = select(AnnotationTask.prompt_id, AnnotationTask.kind, func.count()).where(
                AnnotationTask.prompt_id.in_(new)
            )
            for pid, kind, n in self.session.execute(sizes.group_by(AnnotationTask.prompt_id, AnnotationTask.kind)):
                self.sizes[(pid, kind)] = int(n)

    def block(self, task: Any) -> Block:
        """Why they may not take the task (a row with prompt_id, kind, response_keys), None when they may."""
        keys = tuple(sorted(task.response_keys))
        done, held = self.done.get(task.prompt_id, []), self.held.get(task.prompt_id, [])
        most = share(self.sizes.get((task.prompt_id, task.kind), 1), self.people)
        if keys in done or len(done) >= most:
            return FOR_GOOD
        if keys in held or len(done) + len(held) >= most:
            return FOR_NOW
        return None

    def hold(self, task: Any) -> None:
        self.held.setdefault(task.prompt_id, []).append(tuple(sorted(task.response_keys)))

    def release(self, task: Any) -> None:
        self.held[task.prompt_id].remove(tuple(sorted(task.response_keys)))


def lock_prompt(session: Session, prompt_id: str) -> Prompt:
    """The prompt, locked until the transaction ends; UnknownPrompt when there is none.

    On PostgreSQL a row lock (SELECT ... FOR UPDATE), so two submits that close a prompt's last two tasks
    cannot both miss that nothing is left open; SQLite transactions here are serialised already.
    """
    prompt = session.get(Prompt, v.key("prompt_id", prompt_id), with_for_update=True)
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
    config: QueueConfig | None = None,
) -> list[QueuedTask]:
    """Open tasks, oldest first: of one prompt or all, of one kind ("triple", "pair") or both; with `annotator`,
    only those they may take, each on its own (`Shares` under `config`'s rule; what they hold counts)."""
    query = select(*CANDIDATE).where(OPEN)
    if prompt_id is not None:
        if session.get(Prompt, v.key("prompt_id", prompt_id)) is None:
            raise UnknownPrompt(f"unknown prompt {prompt_id!r}")
        query = query.where(AnnotationTask.prompt_id == prompt_id)
    if kind is not None:
        query = query.where(AnnotationTask.kind == v.one_of("kind", kind, TASK_KINDS))
    if created_before is not None:
        query = query.where(AnnotationTask.created_at < created_before)
    limit = v.count("limit", limit, minimum=1)
    order = (AnnotationTask.created_at, AnnotationTask.id)
    found: list[Any] = []
    if annotator is None:
        found = list(session.execute(query.order_by(*order).limit(limit)))
    else:
        name = v.key("annotator", annotator)
        shares = Shares(session, name, config or QueueConfig(), held_tasks(session, name))
        for page in pages(session, query, *order):
            shares.read(page)
            found += [t for t in page if shares.block(t) is None][: limit - len(found)]
            if len(found) >= limit:
                break
    tasks = session.scalars(select(AnnotationTask).where(AnnotationTask.id.in_([t.id for t in found])).order_by(*order))
    return queued(session, list(tasks))


def held_tasks(session: Session, name: str) -> list[AnnotationTask]:
    """The open tasks `name` holds (leases run out included, until someone else takes them), oldest first."""
    query = select(AnnotationTask).where(HELD, AnnotationTask.held_by == name)
    return list(session.scalars(query.order_by(AnnotationTask.created_at, AnnotationTask.id)))


def pages(session: Session, query: Select[Any], *order: InstrumentedAttribute[Any]) -> Iterator[list[Any]]:
    """The rows `query` selects (with the columns `order`, unique together), in that order, a page at a time: each
    an index range scan from where the last one ended (keyset pagination: no OFFSET, no cursor left open), the first
    PAGE rows, and twice as many after each full page (a long run of tasks nobody may take is passed in a few)."""
    after: tuple[Any, ...] | None = None
    size = PAGE
    while True:
        page_query = query if after is None else query.where(tuple_(*order) > tuple_(*after))
        page = list(session.execute(page_query.order_by(None).order_by(*order).limit(size)))
        if page:
            yield page
        if len(page) < size:
            return
        after, size = tuple(getattr(page[-1], column.key) for column in order), min(size * 2, PAGE * 16)


def queued(session: Session, tasks: Sequence[AnnotationTask]) -> list[QueuedTask]:
    """Each task with its prompt and its responses' contents, as an annotator is shown it (one query each)."""
    prompts = {p.id: p for p in session.scalars(select(Prompt).where(Prompt.id.in_({t.prompt_id for t in tasks})))}
    wanted = select(Response.prompt_id, Response.response_key, Response.content)
    found = session.execute(wanted.where(Response.prompt_id.in_(prompts)))
    contents = {(pid, rkey): content for pid, rkey, content in found}
    return [
        QueuedTask(t, prompts[t.prompt_id], {k: contents[(t.prompt_id, k)] for k in t.response_keys}) for t in tasks
    ]


def open_count(session: Session, prompt_id: str) -> int:
    """How many of the prompt's tasks are still open."""
    query = select(func.count()).select_from(AnnotationTask)
    query = query.where(AnnotationTask.prompt_id == prompt_id, AnnotationTask.status == "open")
    return int(session.scalar(query) or 0)
