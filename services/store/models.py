"""The tables, as typed SQLAlchemy 2 declarative models. Migrations in migrations/ create them; keep both in step.

JSON columns hold lists and dicts (categories, response keys, raw annotation results, rankings).
Constraint names come from one naming convention, so migrations can refer to them on every backend.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from cheems.roles import ADMIN, ROLES

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}
KEY = 128  # response keys ("r1", md5 hex), annotation and task ids
TASK_KINDS = ("triple", "pair")
TASK_STATUSES = ("open", "done")
ANNOTATION_KINDS = ("human", "ai")
EXPORT_KINDS = ("bench", "preference")
MODEL_STATES = ("candidate", "evaluated", "production", "rejected", "retired")
MODEL_SOURCES = ("training", "registered")
CORRECTIONS = ("reassigned", "voided")
MODEL_ACTIONS = ("registered", "evaluated", "promoted", "demoted", "rolled_back", "rejected", "retired")


def utcnow() -> datetime:
    return datetime.now(UTC)


def _one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    allowed = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({allowed})", name=column)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: ClassVar[dict[Any, Any]] = {
        dict[str, Any]: JSON,
        list[Any]: JSON,
        datetime: DateTime(timezone=True),
    }


class Prompt(Base):
    """A prompt in context; its id is the sha256 of (system prompt, text[, history]), so it is stored once."""

    __tablename__ = "prompts"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    system_prompt: Mapped[str | None] = mapped_column(Text)
    category: Mapped[list[Any]]
    source: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # earlier turns [{"role", "content"}], oldest first; NULL (not JSON null) when there are none
    history: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))


class Response(Base):
    """A candidate response; `response_key` is its id within the prompt ("r1", or the md5 of its content)."""

    __tablename__ = "responses"
    __table_args__ = (UniqueConstraint("prompt_id", "response_key"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    prompt_id: Mapped[str] = mapped_column(ForeignKey("prompts.id"))
    response_key: Mapped[str] = mapped_column(String(KEY))
    content: Mapped[str] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String(200))
    # the rule the rule-based filter found broken ("too_long", "non_chinese", ...); NULL: kept (annotated)
    filter_reason: Mapped[str | None] = mapped_column(String(32))


OPEN_FREE = "status = 'open' AND held_by IS NULL"  # the queue's partial indexes (literal: a parameter misses them)
OPEN_HELD = "status = 'open' AND held_by IS NOT NULL"


def _partial(name: str, where: str, *columns: str) -> Index:
    """An index of the rows `where` holds, on PostgreSQL and SQLite alike."""
    return Index(name, *columns, postgresql_where=text(where), sqlite_where=text(where))


class AnnotationTask(Base):
    """A group of responses (three for humans, two for AI judges) waiting for annotations.

    `held_by` / `held_at`: who holds the open task now and since when it was last worked on (claimed, or opened on
    the page); the lease runs from `held_at` (`services.store.annotators`, the one claim rule, keeps them in step
    with `TaskClaim`, the history). The partial indexes make the queue's reads range scans of the candidates only:
    free tasks oldest first, a person's held tasks, leases by age."""

    __tablename__ = "annotation_tasks"
    __table_args__ = (
        _one_of("kind", TASK_KINDS),
        _one_of("status", TASK_STATUSES),
        Index("ix_annotation_tasks_status_created_at", "status", "created_at"),  # ListTasks: open, oldest first
        _partial("ix_annotation_tasks_free", OPEN_FREE, "kind", "created_at", "id"),  # nobody's, oldest first
        _partial("ix_annotation_tasks_held_by", OPEN_HELD, "held_by", "created_at", "id"),  # what a person holds
        _partial("ix_annotation_tasks_held_at", OPEN_HELD, "kind", "held_at", "id"),  # leases of a kind, oldest first
        Index("ix_annotation_tasks_prompt_id_status", "prompt_id", "status"),  # a prompt's open tasks (submit)
    )

    id: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    prompt_id: Mapped[str] = mapped_column(ForeignKey("prompts.id"), index=True)
    response_keys: Mapped[list[Any]]
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), default="open")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # 0: the task; 1: a second, independent annotation of the same triple (double annotation, for agreement)
    copy: Mapped[int] = mapped_column(default=0, server_default="0")
    held_by: Mapped[str | None] = mapped_column(String(200))  # the holder of an open task (NULL: nobody)
    held_at: Mapped[datetime | None]  # when its holder claimed it or last opened it: the lease runs from here


class Annotation(Base):
    """One raw judgment, e.g. {"order": [["r1"], ["r2", "r3"]]}; its id is the caller's idempotency key."""

    __tablename__ = "annotations"
    __table_args__ = (
        _one_of("kind", ANNOTATION_KINDS),
        Index("ix_annotations_annotator_prompt_id", "annotator", "prompt_id"),  # a person's share of a prompt
    )

    id: Mapped[str] = mapped_column(String(KEY), primary_key=True)
    prompt_id: Mapped[str] = mapped_column(ForeignKey("prompts.id"), index=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("annotation_tasks.id"))
    annotator: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    result: Mapped[dict[str, Any]]
    discarded: Mapped[list[Any]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    voided_at: Mapped[datetime | None]  # an operator or admin voided it (`assignments.void`): it no longer counts


class Ranking(Base):
    """The resolved partial ranking of a prompt's responses (1 = best, ties share a rank)."""

    __tablename__ = "rankings"

    prompt_id: Mapped[str] = mapped_column(ForeignKey("prompts.id"), primary_key=True)
    rank: Mapped[dict[str, Any]]
    conflicts: Mapped[int]
    merged_nodes: Mapped[int]
    resolved_at: Mapped[datetime] = mapped_column(default=utcnow)


class Export(Base):
    """A file written from the store (a bench or preference jsonl) and its checksum."""

    __tablename__ = "exports"
    __table_args__ = (_one_of("kind", EXPORT_KINDS),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(Text)
    records: Mapped[int]
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


RUN_STATES = ("running", "succeeded", "failed")


class EvalRun(Base):
    """A CheemsBench evaluation fed through Kafka: which files, which scorer, and the result when complete."""

    __tablename__ = "eval_runs"
    __table_args__ = (_one_of("state", RUN_STATES),)

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    bench_files: Mapped[list[Any]]
    scorer_url: Mapped[str] = mapped_column(Text)
    semantics: Mapped[str] = mapped_column(String(16))
    items_total: Mapped[int]
    state: Mapped[str] = mapped_column(String(16), default="running")
    result: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Bins of the calibration error the result is computed with; runs stored before revision 0003 had 5.
    ece_bins: Mapped[int] = mapped_column(default=5, server_default="5")
    model_id: Mapped[str | None] = mapped_column(String(64))  # the registered model evaluated, when one


class EvalScore(Base):
    """The scores of one benchmark prompt in a run; the primary key makes a redelivered event a no-op."""

    __tablename__ = "eval_scores"

    run_id: Mapped[str] = mapped_column(ForeignKey("eval_runs.id"), primary_key=True)
    item: Mapped[str] = mapped_column(String(KEY), primary_key=True)  # "<subset>:<index>"
    response_ids: Mapped[list[Any]]
    scores: Mapped[list[Any]]


TRAINING_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
LAUNCHERS = ("local", "kubernetes")


class Dataset(Base):
    """A content-hashed snapshot of resolved rankings as training data; the same file is the same dataset."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the file's bytes
    recipe: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(Text)
    prompts: Mapped[int]
    pairs: Mapped[int]
    rankings: Mapped[int]  # resolved rankings it was made from
    supervisor_model_id: Mapped[str | None] = mapped_column(String(64))  # distant supervision's model
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # how it was made: settings (margins, seed, filter thresholds) and counts per source before/after each step
    details: Mapped[dict[str, Any] | None]


class Training(Base):
    """A training run: what it trains on, where it runs, how far it got; `handle` is what a restarted
    training service re-attaches to (a local process group, or a Kubernetes Job's name)."""

    __tablename__ = "trainings"
    __table_args__ = (_one_of("state", TRAINING_STATES), _one_of("launcher", LAUNCHERS))

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    dataset_id: Mapped[str] = mapped_column(ForeignKey("datasets.id"))
    recipe: Mapped[str] = mapped_column(String(64))
    overrides: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(16), default="pending")
    launcher: Mapped[str] = mapped_column(String(16))
    out_dir: Mapped[str] = mapped_column(Text)
    handle: Mapped[str | None] = mapped_column(Text)
    step: Mapped[int] = mapped_column(default=0)
    total_steps: Mapped[int] = mapped_column(default=0)
    loss: Mapped[float | None]
    overall: Mapped[float | None]
    model_id: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    requested_by: Mapped[str | None] = mapped_column(
        String(220)
    )  # person:/service:NAME, policy:auto; NULL: before 0010
    tracking: Mapped[dict[str, Any] | None]  # {backend: run id or log dir} the trainer reported to; NULL: before 0013


class RegisteredModel(Base):
    """A reward model: a standard AutoModelForSequenceClassification directory, exported by a training run
    (source "training") or registered from anywhere (`cheems models register`, source "registered": no
    dataset, recipe or training). `state` is where it stands in the lifecycle (services.store.lifecycle)."""

    __tablename__ = "models"
    __table_args__ = (_one_of("state", MODEL_STATES), _one_of("source", MODEL_SOURCES))

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    dataset_id: Mapped[str | None] = mapped_column(ForeignKey("datasets.id"))
    recipe: Mapped[str | None] = mapped_column(String(64))
    dataset_recipe: Mapped[str | None] = mapped_column(String(64))
    training_id: Mapped[str | None] = mapped_column(ForeignKey("trainings.id"), unique=True)
    overall: Mapped[float | None]  # CheemsBench overall at the end of training, when evaluated there
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    state: Mapped[str] = mapped_column(String(16), default="candidate")
    source: Mapped[str] = mapped_column(String(16), default="training")
    tracking: Mapped[dict[str, Any] | None]  # its training's reporting runs (as Training.tracking); NULL: none known


class ModelAlias(Base):
    """A name that points at one model (`production`); its row is locked by every change of what it names."""

    __tablename__ = "model_aliases"

    alias: Mapped[str] = mapped_column(String(64), primary_key=True)
    model_id: Mapped[str | None] = mapped_column(ForeignKey("models.id"))
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ModelTransition(Base):
    """One step of a model's lifecycle, kept forever: who (a person or a policy) moved it, from where, why."""

    __tablename__ = "model_transitions"
    __table_args__ = (_one_of("action", MODEL_ACTIONS),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)  # the order of the steps
    model_id: Mapped[str] = mapped_column(ForeignKey("models.id"), index=True)
    action: Mapped[str] = mapped_column(String(16))
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    actor: Mapped[str] = mapped_column(String(200))
    reason: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]]
    at: Mapped[datetime] = mapped_column(default=utcnow)


class OutboxEvent(Base):
    """An event written in the same transaction as the change it announces, published to Kafka after the
    commit and then deleted (a transactional outbox: a stored change's event is never lost, at worst sent twice)."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)  # publishing order
    topic: Mapped[str] = mapped_column(String(200))
    key: Mapped[str] = mapped_column(Text)
    value: Mapped[bytes] = mapped_column(LargeBinary)  # the serialized event, its header (event id) filled
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # the W3C trace context of the change ({"traceparent": ..., "tracestate": ...}; NULL untraced): the relay sends
    # the event as its child, so the event's consumers join the trace of the call that made the change
    trace_context: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))


class Annotator(Base):
    """An account: a person (annotator, operator, admin) or a service, with a role (`cheems.roles`). It signs in
    with a token, stored here only as its sha256. (The table kept the name it had when only annotators had one.)"""

    __tablename__ = "annotators"
    __table_args__ = (_one_of("role", ROLES),)

    name: Mapped[str] = mapped_column(String(200), primary_key=True)  # what their annotations carry as `annotator`
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    active: Mapped[bool] = mapped_column(default=True)  # False: the token no longer signs in
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    role: Mapped[str] = mapped_column(String(32), default="annotator")
    # where their scan of the free triples starts (`annotators.assign`): every free triple before it was one they
    # may never take under the rule `queue_rule` (QueueConfig.people_per_prompt); NULL: from the oldest
    queue_from: Mapped[datetime | None]
    queue_rule: Mapped[int | None]

    @property
    def admin(self) -> bool:
        """Sees every annotator's figures, promotes and rolls back models."""
        return self.role == ADMIN


class TaskClaim(Base):
    """A task given to an annotator (their listing, the page, an operator's reassign), and when (last): who ever
    held a task, so a former holder's submit is stale, not unassigned. Who holds it now is `AnnotationTask.held_by`."""

    __tablename__ = "task_claims"

    task_id: Mapped[str] = mapped_column(ForeignKey("annotation_tasks.id"), primary_key=True)
    annotator: Mapped[str] = mapped_column(ForeignKey("annotators.name"), primary_key=True, index=True)
    claimed_at: Mapped[datetime] = mapped_column(default=utcnow)


class AnnotationCorrection(Base):
    """An operator's or admin's correction of annotation work, kept forever: a task reassigned to `annotator`
    (from `previous`), or `annotator`'s annotation voided; who did it (`actor`, person:NAME) and why."""

    __tablename__ = "annotation_corrections"
    __table_args__ = (_one_of("action", CORRECTIONS),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column(String(16))
    task_id: Mapped[str | None] = mapped_column(String(KEY))
    annotation_id: Mapped[str | None] = mapped_column(String(KEY))
    annotator: Mapped[str] = mapped_column(String(200))
    previous: Mapped[str | None] = mapped_column(String(200))
    actor: Mapped[str] = mapped_column(String(220))
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(default=utcnow)
