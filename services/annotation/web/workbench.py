"""The annotator page's work, transport-free: who is signed in, their next task, their submit, the admin overview.

    bench = Workbench(AnnotationService(engine, publisher))
    person = bench.sign_in(token)                         # Unauthenticated for a wrong token; Forbidden for a role
                                                          # that does not annotate (cheems.roles.ANNOTATE)
    task = bench.next_task(person)                        # the oldest task they hold, else a new one; or None
    bench.withheld(person)                                # free triples left for others (prompts they did)
    bench.submit(person, task.task_id, {"annotation_id": "web-1", "order": [["r1"], ["r2", "r3"]]})
    bench.overview(person)                                # Forbidden unless an admin

The next task comes from the queue's one rule, the one their gRPC ListTasks follows (`AnnotationService.assign`,
`services.store.annotators`), with a limit of one: the oldest task they hold (opened now, so its lease starts
again), else one given to them now, of a prompt they have not done their share of. Submitting takes the same path,
and the same claim rule, as gRPC `SubmitAnnotation` (`submission.submit`, `services.store.assignments`). The
overview shows who holds what (`annotators.holdings`) and the prompts the accounts cannot finish under the
service's rule (`annotators.unfinishable`). What an annotator may hit:

    the same annotation sent twice              200, created False: stored once ("already submitted")
    a task given to someone else after the lease ran out, or reassigned      409 stale_task
    a task that has its annotation (another's, or theirs from another tab)   409 task_completed
    a task never given to them                                               403 forbidden
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cheems import errors
from cheems.roles import ADMIN, ANNOTATE, spelled
from services.annotation.algorithm.doubles import DoubleAgreement, double_agreement
from services.annotation.algorithm.quality import Judgment, Quality, annotator_quality, stored_relations
from services.annotation.service import AnnotationService, OpenTask
from services.annotation.submission import Submission, submit
from services.annotation.web.form import parse_form
from services.store import accounts
from services.store import annotators as queue
from services.store.annotators import Holding, Unfinishable
from services.store.db import session_scope
from services.store.filtered import FilteredResponse, filtered, reason_counts
from services.store.models import Annotation, AnnotationTask
from services.web.errors import Forbidden, Unauthenticated

FILTERED_SHOWN = 50  # the overview's list of responses the rule filter kept out


class UnknownWebTask(errors.NotFound):
    reason = "unknown_task"


@dataclass(frozen=True)
class Person:
    name: str
    admin: bool


@dataclass(frozen=True)
class AnnotatorRow:
    name: str
    account: bool  # False: a name seen on annotations (gRPC, simulated) without a web account
    admin: bool
    active: bool
    held: Holding | None  # the open tasks they hold (None: none)
    quality: Quality | None  # None: no annotation yet


@dataclass(frozen=True)
class Overview:
    annotators: list[AnnotatorRow]
    open_tasks: int  # open triple-wise tasks
    free_tasks: int  # of which nobody holds (or nobody worked on for the lease)
    unfinishable: Unfinishable  # prompts the accounts that annotate cannot finish under the rule
    doubles: DoubleAgreement  # agreement of the two annotations of each doubled triple
    rule_filtered: dict[str, int]  # responses the rule filter kept out of annotation, by reason
    filtered: list[FilteredResponse]  # the newest of them (FILTERED_SHOWN at most)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Workbench:
    def __init__(self, service: AnnotationService, clock: Callable[[], datetime] = utcnow) -> None:
        self.service, self.clock = service, clock
        self.lease = service.queue.lease

    def sign_in(self, token: str | None) -> Person:
        if not token:
            raise Unauthenticated("sign in: send your token as `authorization: Bearer <token>`")
        who = accounts.AccountBook(self.service.engine)(token)
        if who is None:
            raise Unauthenticated("this token signs nobody in (mistyped, reset or disabled?)")
        if who.role not in ANNOTATE:
            raise Forbidden(f"the annotator's page needs the role {spelled(ANNOTATE)}; {who.name} is {who.role}")
        return Person(who.name, who.role == ADMIN)

    def next_task(self, person: Person) -> OpenTask | None:
        """The oldest triple-wise task the annotator holds, opened now, else one given to them now (None: none)."""
        tasks = self.service.assign(person.name, group_size=3, limit=1, opening=True, now=self.clock())
        return tasks[0] if tasks else None

    def withheld(self, person: Person) -> int:
        """Free triples left for others, asked after `next_task` gave the annotator none: they did their share of
        each one's prompt (annotated or hold its tasks)."""
        with session_scope(self.service.engine) as session:
            return queue.withheld(session, self.clock(), self.lease)

    def submit(self, person: Person, task_id: str, body: Any) -> bool:
        """Store the annotator's ranking of a task assigned to them (the claim rule of `submission`); False when
        this annotation was stored already."""
        with session_scope(self.service.engine) as session:
            task = session.get(AnnotationTask, task_id)
            if task is None or task.kind != "triple":
                raise UnknownWebTask(f"no triple-wise task {task_id!r}")
            form = parse_form(body, list(task.response_keys))
            prompt_id = task.prompt_id
        submission = Submission(
            form.annotation_id, prompt_id, person.name, "human", {"order": form.order}, form.discarded, task_id
        )
        return submit(self.service, submission)

    def overview(self, person: Person) -> Overview:
        """Every annotator's held tasks, annotations, agreement and cycle share; admins only."""
        if not person.admin:
            raise Forbidden("the overview is for admins")
        with session_scope(self.service.engine) as session:
            people = [a for a in accounts.list_accounts(session) if a.role in ANNOTATE]
            held = {h.annotator: h for h in queue.holdings(session, self.clock(), self.lease)}
            unfinishable = queue.unfinishable(session, self.service.queue.people_per_prompt)
            stored, rankings = queue.annotated_by_people(session)
            judgments = [judgment(a) for a in stored]
            pairs = [(judgment(a), judgment(b)) for a, b in queue.doubled_annotations(session)]
            doubles = double_agreement(pairs, judgments)
            open_tasks, free_tasks = queue.queue_size(session, self.clock(), self.lease)
            rule_filtered, newest = reason_counts(session), filtered(session, limit=FILTERED_SHOWN)
        figures = annotator_quality(judgments, rankings)
        rows = [AnnotatorRow(p.name, True, p.admin, p.active, held.get(p.name), figures.get(p.name)) for p in people]
        known = {p.name for p in people}
        rows += [AnnotatorRow(n, False, False, False, held.get(n), q) for n, q in figures.items() if n not in known]
        rows.sort(key=lambda r: r.name)
        return Overview(rows, open_tasks, free_tasks, unfinishable, doubles, rule_filtered, newest)


def judgment(annotation: Annotation) -> Judgment:
    """A stored annotation as the quality figures read it."""
    relations = stored_relations(annotation.result)
    return Judgment(
        annotation.annotator, annotation.kind, annotation.prompt_id, relations, frozenset(annotation.discarded or [])
    )
