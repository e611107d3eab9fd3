"""Who each task is given to: the one claim rule of the annotation queue (gRPC ListTasks and the annotator's page),
and what an operator sees of it; the accounts are `services.store.accounts`.

with session_scope(engine) as s:
    queued = assign(s, "张三", now, QueueConfig())              # what they hold, topped up to max_held (5)
    [page] = assign(s, "张三", now, config, limit=1, opening=True)   # the page: the oldest they hold, opened now
    holder(s, task_id)                                           # "张三"
    holdings(s, now, config.lease)                               # per person: tasks held, past the lease, oldest

The rule (`assign`): a person holds at most `max_held` open tasks. A listing returns what they hold (oldest task
first) and tops it up to max_held, or to its `limit` if smaller, never more: first with tasks whose lease ran out
(held by someone else, nobody worked on them for the lease), then with free ones, oldest first; each a task they
may take (`tasks.Shares`: under the paper's rule none of a prompt they annotated or hold a task of). A lease is
renewed only by work on that task: the page opening it (`opening`: the task it shows); listing again renews
nothing. A task whose lease ran out stays its holder's, who may still submit it, until someone else takes it; then
their submit is stale (`assignments.check_assigned`). The holder lives on the task row (`held_by`, `held_at`);
`TaskClaim` keeps who ever held it.

Fast at any size: every read is an index range scan of candidates (models' partial indexes on the open tasks),
checked one by one against the person's share of the candidate's prompt; a person's scan of the free triples
starts where their last one found only triples they may never take (`Annotator.queue_from`), so prompts the team
cannot finish, or that a fast person is far ahead of, are passed once, not on every call. The chosen tasks are
taken in one statement (`hold`: UPDATE ... RETURNING over a FOR UPDATE SKIP LOCKED selection on PostgreSQL: two
people asking at once never get the same one, and neither waits) and their claims in another; SQLite serialises
writers. The person's row is locked first: two tabs of one person take turns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, case, func, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from cheems.roles import ANNOTATE
from services.store.errors import UnknownAnnotator
from services.store.models import Annotation, AnnotationTask, Annotator, Ranking, TaskClaim
from services.store.tasks import (
    CANDIDATE,
    FOR_GOOD,
    FREE,
    HELD,
    OPEN,
    QueueConfig,
    QueuedTask,
    Shares,
    held_tasks,
    pages,
    people_needed,
    queued,
)

GRACE = timedelta(minutes=2)  # a scan's start stays this far behind now: a task made just before may commit late


def assign(
    session: Session,
    name: str,
    now: datetime,
    config: QueueConfig,
    kind: str = "triple",
    prompt_id: str | None = None,
    limit: int = 100,
    opening: bool = False,
) -> list[QueuedTask]:
    """The open tasks `name` holds, topped up to `config.max_held` (or `limit`, if smaller) with tasks now theirs;
    the first `limit` of kind `kind` (and of `prompt_id`, when given), oldest first. `opening`: the first is
    opened (the page shows it): its lease starts again at `now`."""
    me = session.get(Annotator, name, with_for_update=True)  # one assignment of this person at a time
    if me is None:
        raise UnknownAnnotator(f"annotator: no account {name!r}")
    held = held_tasks(session, name)
    room = min(config.max_held, limit) - len(held)
    if room > 0:
        held += _take(session, me, now, config, kind, prompt_id, room, held)
    held.sort(key=lambda t: (t.created_at, t.id))
    shown = [t for t in held if t.kind == kind and prompt_id in (None, t.prompt_id)][:limit]
    if opening and shown:
        shown[0].held_at = now
    session.flush()
    return queued(session, shown)


def _take(
    session: Session,
    me: Annotator,
    now: datetime,
    config: QueueConfig,
    kind: str,
    prompt_id: str | None,
    room: int,
    held: list[AnnotationTask],
) -> list[AnnotationTask]:
    """Up to `room` tasks now `me`'s: leases run out first, then free tasks from where their scan starts."""
    shares, taken = Shares(session, me.name, config, held), list[AnnotationTask]()
    where = [AnnotationTask.kind == kind] + ([AnnotationTask.prompt_id == prompt_id] if prompt_id else [])
    idle = and_(HELD, AnnotationTask.held_at < now - config.lease, AnnotationTask.held_by != me.name)
    for page in pages(session, select(*CANDIDATE).where(idle, *where), AnnotationTask.held_at, AnnotationTask.id):
        taken += _claim_some(session, me.name, now, shares, page, idle, room - len(taken))
        if len(taken) >= room:
            return taken
    scanning = kind == "triple" and prompt_id is None  # a person's queue of triples: where its scan starts counts
    start = me.queue_from if scanning and me.queue_rule == config.people_per_prompt else None
    free = select(*CANDIDATE).where(FREE, *where)
    free = free if start is None else free.where(AnnotationTask.created_at >= start)
    first: datetime | None = None  # the first free task they may take some day
    last: datetime | None = None  # the last one looked at
    for page in pages(session, free, AnnotationTask.created_at, AnnotationTask.id):
        shares.read(page)
        first = first or next((t.created_at for t in page if shares.block(t) != FOR_GOOD), None)
        last = page[-1].created_at
        taken += _claim_some(session, me.name, now, shares, page, FREE, room - len(taken))
        if len(taken) >= room:
            break
    if scanning and (frontier := first or last) is not None:  # the tasks before it they may never take
        moved = min(utc(frontier), now - GRACE)
        me.queue_from, me.queue_rule = max(utc(start), moved) if start else moved, config.people_per_prompt
    return taken


def utc(when: datetime) -> datetime:
    """A stored time as an aware UTC one (SQLite returns naive UTC)."""
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _claim_some(
    session: Session,
    name: str,
    now: datetime,
    shares: Shares,
    page: Sequence[Any],
    still: ColumnElement[bool],
    room: int,
) -> list[AnnotationTask]:
    """Of the candidates `page`, up to `room` that `name` may take, now theirs: chosen as if each were taken, then
    locked and taken in one statement, those another listing took meanwhile left out and the choice made again."""
    shares.read(page)
    taken: list[AnnotationTask] = []
    rest = list(page)
    while len(taken) < room:
        chosen: list[Any] = []
        for candidate in rest:
            if len(taken) + len(chosen) >= room:
                break
            if shares.block(candidate) is None:
                shares.hold(candidate)
                chosen.append(candidate)
        if not chosen:
            break
        got = {task.id: task for task in hold(session, [c.id for c in chosen], still, name, now)}
        for candidate in chosen:
            if candidate.id not in got:  # taken by another listing since the page was read
                shares.release(candidate)
        taken += got.values()
        rest = [c for c in rest if c not in chosen]
    return taken


def hold(
    session: Session, ids: Sequence[str], still: ColumnElement[bool], name: str, now: datetime
) -> list[AnnotationTask]:
    """The tasks `ids` that still match `still`, now `name`'s from `now`, in one statement: on PostgreSQL each row
    locked first, skipping rows another transaction holds (FOR UPDATE SKIP LOCKED), and checked again on its newest
    version (a task another listing took just before no longer matches); their claims recorded."""
    free = select(AnnotationTask.id).where(AnnotationTask.id.in_(ids), still).with_for_update(skip_locked=True)
    locked = free.cte("locked")
    taking = update(AnnotationTask).where(AnnotationTask.id == locked.c.id).values(held_by=name, held_at=now)
    taking = taking.returning(AnnotationTask).execution_options(synchronize_session=False, populate_existing=True)
    tasks = list(session.scalars(taking))
    _record_claims(session, [t.id for t in tasks], name, now)
    return tasks


def claim(session: Session, task: AnnotationTask, name: str, now: datetime) -> None:
    """`name` holds the task from `now` (the task row says so; their claim is recorded, or its time renewed)."""
    task.held_by, task.held_at = name, now
    _record_claims(session, [task.id], name, now)


def _record_claims(session: Session, ids: Sequence[str], name: str, now: datetime) -> None:
    """TaskClaim rows of (task, name) at `now`, made or renewed (one upsert)."""
    if not ids:
        return
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    rows = insert(TaskClaim).values([{"task_id": i, "annotator": name, "claimed_at": now} for i in ids])
    session.execute(rows.on_conflict_do_update(index_elements=["task_id", "annotator"], set_={"claimed_at": now}))


def holder(session: Session, task_id: str) -> str | None:
    """Who holds the task now (None: nobody, or no such task)."""
    return session.scalar(select(AnnotationTask.held_by).where(AnnotationTask.id == task_id))


def ever_held(session: Session, task_id: str, name: str) -> bool:
    return session.get(TaskClaim, (task_id, name)) is not None


@dataclass(frozen=True)
class Holding:
    """What one person holds of the open tasks: how many, how many past the lease, and since when the least
    recently worked on was claimed or opened."""

    annotator: str
    tasks: int
    idle: int  # past the lease: anyone may take them
    oldest: datetime


def holdings(session: Session, now: datetime, lease: timedelta) -> list[Holding]:
    """Who holds open tasks, by name (one scan of the held tasks' index)."""
    idle = func.sum(case((AnnotationTask.held_at < now - lease, 1), else_=0))
    query = select(AnnotationTask.held_by, func.count(), idle, func.min(AnnotationTask.held_at)).where(HELD)
    rows = session.execute(query.group_by(AnnotationTask.held_by).order_by(AnnotationTask.held_by))
    return [Holding(str(name), int(n), int(late or 0), utc(oldest)) for name, n, late, oldest in rows]


def queue_size(session: Session, now: datetime, lease: timedelta) -> tuple[int, int]:
    """(open triple-wise tasks, of which nobody holds within the lease)."""
    triples = AnnotationTask.kind == "triple"
    total = session.scalar(select(func.count()).select_from(AnnotationTask).where(OPEN, triples)) or 0
    return int(total), withheld(session, now, lease)


def withheld(session: Session, now: datetime, lease: timedelta) -> int:
    """Free triples: nobody's, or past their lease. For a person the queue gave no task, every one of them is left
    for others (prompts they did their share of)."""
    triples = AnnotationTask.kind == "triple"
    free = session.scalar(select(func.count()).select_from(AnnotationTask).where(FREE, triples)) or 0
    idle = and_(HELD, triples, AnnotationTask.held_at < now - lease)
    return int(free) + int(session.scalar(select(func.count()).select_from(AnnotationTask).where(idle)) or 0)


@dataclass(frozen=True)
class Unfinishable:
    """Prompts with open triples that the accounts that annotate cannot finish under the rule: `prompts` of them,
    the most people one of them needs, the accounts that annotate (active, role annotator or admin)."""

    prompts: int
    needed: int
    accounts: int
    people_per_prompt: int


def unfinishable(session: Session, people_per_prompt: int) -> Unfinishable:
    """How many prompts with open triples need more different people than there are accounts that annotate."""
    accounts = select(func.count()).select_from(Annotator).where(Annotator.active, Annotator.role.in_(ANNOTATE))
    people = int(session.scalar(accounts) or 0)
    still_open = func.sum(case((AnnotationTask.status == "open", 1), else_=0))
    per_prompt = (
        select(func.count().label("n"))
        .where(AnnotationTask.kind == "triple")
        .group_by(AnnotationTask.prompt_id)
        .having(still_open > 0)
        .subquery()
    )
    sizes = session.execute(select(per_prompt.c.n, func.count()).group_by(per_prompt.c.n))
    needs: Counter[int] = Counter()  # prompt sizes that need as many people add up
    for n, count in sizes:
        needs[people_needed(int(n), people_per_prompt)] += int(count)
    short = {need: count for need, count in needs.items() if need > people}
    return Unfinishable(sum(short.values()), max(short, default=0), people, people_per_prompt)


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
