"""The annotator page's work, transport-free: who is signed in, their next task, their submit, the admin overview.

    bench = Workbench(AnnotationService(engine, publisher))
    person = bench.sign_in(token)                         # Unauthenticated for a wrong token; Forbidden for a role
                                                          # that does not annotate (cheems.roles.ANNOTATE)
    task = bench.next_task(person)                        # their open task, else the oldest free one; or None
    bench.withheld(person)                                # free triples left for others (prompts they did)
    bench.submit(person, task.task_id, {"annotation_id": "web-1", "order": [["r1"], ["r2", "r3"]]})
    bench.overview(person)                                # Forbidden unless an admin

A task belongs to the annotator it was given to (a claim, `services.store.annotators`), and a prompt's triples
go to different annotators (none of a prompt they annotated or hold a task of). Submitting takes the same path,
and the same claim rule, as gRPC `SubmitAnnotation` (`submission.submit`, `services.store.assignments`). What an
annotator may hit:

    the same annotation sent twice              200, created False: stored once ("already submitted")
    a task given to someone else after the lease ran out, or reassigned      409 stale_task
    a task that has its annotation (another's, or theirs from another tab)   409 task_completed
    a task never given to them                                               403 forbidden
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cheems import errors
from cheems.roles import ADMIN, ANNOTATE, spelled
from services.annotation.algorithm.doubles import DoubleAgreement, double_agreement
from services.annotation.algorithm.quality import Judgment, Quality, annotator_quality, stored_relations
from services.annotation.service import AnnotationService, OpenTask, open_task_of
from services.annotation.submission import Submission, submit
from services.annotation.web.form import parse_form
from services.store import accounts
from services.store import annotators as queue
from services.store.db import session_scope
from services.store.filtered import FilteredResponse, filtered, reason_counts
from services.store.models import Annotation, AnnotationTask
from services.web.errors import Forbidden, Unauthenticated

FILTERED_SHOWN = 50  # the overview's list of responses the rule filter kept out


class UnknownWebTask(errors.NotFound):
    reason = "unknown_task"


@dataclass(frozen=True)
class WorkbenchConfig:
    lease_seconds: float = 1800.0  # a claimed task idle this long may be given to another annotator

    def __post_init__(self) -> None:
        if not self.lease_seconds > 0:
            raise ValueError(f"lease_seconds must be > 0, got {self.lease_seconds}")


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
    open: int  # open tasks they hold
    quality: Quality | None  # None: no annotation yet


@dataclass(frozen=True)
class Overview:
    annotators: list[AnnotatorRow]
    open_tasks: int  # open triple-wise tasks
    free_tasks: int  # of which nobody holds
    doubles: DoubleAgreement  # agreement of the two annotations of each doubled triple
    rule_filtered: dict[str, int]  # responses the rule filter kept out of annotation, by reason
    filtered: list[FilteredResponse]  # the newest of them (FILTERED_SHOWN at most)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Workbench:
    def __init__(
        self, service: AnnotationService, config: WorkbenchConfig | None = None, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self.service, self.config, self.clock = service, config or WorkbenchConfig(), clock
        self.lease = timedelta(seconds=self.config.lease_seconds)

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
        """The task the annotator holds, else the oldest free triple-wise task, now held by them."""
        with session_scope(self.service.engine) as session:
            queued = queue.claim_next(session, person.name, self.clock(), self.lease)
            return None if queued is None else open_task_of(queued)

    def withheld(self, person: Person) -> int:
        """Free triples left that the annotator may not take: of prompts they annotated or hold a task of."""
        with session_scope(self.service.engine) as session:
            return queue.withheld(session, person.name, self.clock(), self.lease)

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
            held = queue.open_claims(session)
            stored, rankings = queue.annotated_by_people(session)
            judgments = [judgment(a) for a in stored]
            doubles = double_agreement([(judgment(a), judgment(b)) for a, b in queue.doubled_annotations(session)])
            open_tasks, free_tasks = queue.queue_size(session, self.clock(), self.lease)
            rule_filtered, newest = reason_counts(session), filtered(session, limit=FILTERED_SHOWN)
        figures = annotator_quality(judgments, rankings)
        rows = [AnnotatorRow(p.name, True, p.admin, p.active, held.get(p.name, 0), figures.get(p.name)) for p in people]
        known = {p.name for p in people}
        rows += [AnnotatorRow(n, False, False, False, 0, q) for n, q in figures.items() if n not in known]
        return Overview(sorted(rows, key=lambda r: r.name), open_tasks, free_tasks, doubles, rule_filtered, newest)


def judgment(annotation: Annotation) -> Judgment:
    """A stored annotation as the quality figures read it."""
    relations = stored_relations(annotation.result)
    return Judgment(
        annotation.annotator, annotation.kind, annotation.prompt_id, relations, frozenset(annotation.discarded or [])
    )
