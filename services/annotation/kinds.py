"""Each kind of annotation closes only its own kind of task: a person's human annotation a triple they hold, an AI
judge's annotation an open pair task; and the kind is the sender's role, never a field of the request.

    kind = kind_for(caller(), "")                            # "human" for a person, "ai" for a service account
    check_task(session, "ai", task_id, prompt_id, "judge")   # before an annotation is stored
    pair_task(session, task_id)                              # the task a service closes without an annotation

Who sends what (`kind_for`): annotator and admin accounts submit human annotations, service accounts (the AI
judge) AI ones; a request that names the other kind is PERMISSION_DENIED, and one that names none
(ANNOTATOR_KIND_UNSPECIFIED) takes its sender's.

Which task each kind names (`check_task`, in the submit's transaction, after a replay of a stored annotation id
and before anything is stored):

    human   the claim rule (`services.store.assignments.check_assigned`), and the task is a triple
    ai      task_id given (else InvalidRecord, INVALID_ARGUMENT), of the prompt (else UnknownTask, NOT_FOUND), a pair
            (a triple is people's work: OtherKindsTask, PERMISSION_DENIED); a pair closed already is TaskClosed
            (FAILED_PRECONDITION) when the annotation is stored

So a service account can never close a task a person holds, and a person never closes the judge's pairs. A pair
the judge cannot decide is closed without an annotation (`CloseTask`, service accounts only, pairs only:
`pair_task`). Files of annotations (`cheems resolve`, `cheems annotate judge`) never reach the store: they are
another path, an operator's, resolved offline.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from cheems.errors import PermissionDenied
from cheems.roles import ANNOTATE, SERVICE, Caller
from services.store import validate as v
from services.store.assignments import check_assigned
from services.store.errors import InvalidRecord, OtherKindsTask, UnknownTask
from services.store.models import AnnotationTask

TASK_OF = {"human": "triple", "ai": "pair"}  # the kind of task each kind of annotation closes


def kind_for(who: Caller, requested: str) -> str:
    """The kind of annotation `who` submits: "ai" for a service account, "human" for a person who annotates;
    `requested` ("" = unspecified) must be that kind. PermissionDenied otherwise."""
    own = "ai" if who.role == SERVICE else "human" if who.role in ANNOTATE else ""
    if not own:
        raise PermissionDenied(f"{who.name} ({who.role}) submits no annotations")
    if requested and requested != own:
        if own == "ai":
            raise PermissionDenied(
                f"{who.name} is a service account: it submits AI annotations (kind ANNOTATOR_KIND_AI) in its name; "
                "human annotations come from the annotators' own accounts"
            )
        raise PermissionDenied(f"{who.name} is a person ({who.role}): AI annotations come from service accounts")
    return own


def check_task(session: Session, kind: str, task_id: str | None, prompt_id: str, annotator: str) -> AnnotationTask:
    """The task an annotation of `kind` by `annotator` may close; raises as the module's table says."""
    if kind == "human":
        task = check_assigned(session, task_id, prompt_id, annotator)
    else:
        if not task_id:
            raise InvalidRecord(
                "task_id is required for an AI annotation: it names an open pair task (ListTasks with group_size 2)"
            )
        task = _task(session, task_id)
        if task.prompt_id != prompt_id:
            raise UnknownTask(f"prompt {prompt_id}: no task {task_id!r}")
    _same_kind(task, kind)
    return task


def pair_task(session: Session, task_id: str) -> AnnotationTask:
    """The pair task a service account may close without an annotation: UnknownTask, or OtherKindsTask for a
    triple (people's work: an operator corrects it with ReassignTask or VoidAnnotation)."""
    task = _task(session, task_id)
    _same_kind(task, "ai")
    return task


def _task(session: Session, task_id: str) -> AnnotationTask:
    task = session.get(AnnotationTask, v.key("task_id", task_id))  # a NUL or an overlong id: InvalidRecord
    if task is None:
        raise UnknownTask(f"no task {task_id!r}")
    return task


def _same_kind(task: AnnotationTask, kind: str) -> None:
    if task.kind == TASK_OF[kind]:
        return
    if kind == "ai":
        raise OtherKindsTask(
            f"task {task.id} is a triple, people's work: an AI judge's service account closes only AI pair tasks "
            "(ListTasks with group_size 2)"
        )
    raise OtherKindsTask(f"task {task.id} is an AI judge's pair: people annotate triples")
