"""One way in for an annotation, whoever sends it: gRPC `SubmitAnnotation` and the annotator's web page.

    created = submit(service, Submission("a1", prompt_id, "张三", "human", {"order": [["r1"], ["r2", "r3"]]},
                                         discarded=[], task_id=task_id))

The checks here plus `AnnotationService.submit` (the store's validation, one transaction, the outbox events,
resolution when the prompt's last task closes) are the whole path; the adapters only decode into a
`Submission` and map errors to their status. A replay of a stored annotation returns False and stores nothing.

Who annotated is the account that sends it, never a name in the request, and so is the kind (`attribute`): a
person submits human annotations in their own name (an empty `annotator` names them); a service account (an AI
judge) submits AI annotations under its own account name (an empty `annotator`, or its own name); naming anyone
else, or the other kind, is PermissionDenied (`kinds.kind_for`). Each kind closes only its own kind of task
(`kinds.check_task`): a person's a triple they hold, a service's an open pair.

The claim rule, the same for gRPC and the page (`services.store.assignments`): a human annotation names a
`task_id` assigned to its annotator (their ListTasks or the page assigns tasks; an operator or admin may reassign
one), and a task takes one annotation: no task_id is INVALID_ARGUMENT, an unknown task NOT_FOUND, a task never
assigned to them PERMISSION_DENIED, a task annotated already ALREADY_EXISTS, a task assigned to someone else since
FAILED_PRECONDITION (stale). Sending the same annotation (annotation_id and content) again is a replay: created
False. `listed_for` says whose tasks ListTasks lists, and `assigns` whether it assigns them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cheems.errors import PermissionDenied
from cheems.roles import ANNOTATE, ANNOTATOR, Caller
from services.annotation.kinds import kind_for
from services.annotation.service import AnnotationService
from services.store.errors import InvalidRecord

KINDS = ("human", "ai")


@dataclass(frozen=True)
class Submission:
    annotation_id: str  # the sender's idempotency key: the same annotation sent twice is stored once
    prompt_id: str
    annotator: str
    kind: str  # "human" or "ai"
    result: dict[str, Any]  # {"order": [[id, ...], ...]} | {"better", "worse"} | {"equal": [a, b]}
    discarded: list[str] = field(default_factory=list)
    task_id: str | None = None


def submit(service: AnnotationService, submission: Submission) -> bool:
    """Store the annotation and close its task (see `AnnotationService.submit`: a human annotation's task must be
    assigned to its annotator, once); False for a replay."""
    if not submission.annotation_id or not submission.annotator:
        raise InvalidRecord("annotation_id and annotator are required")
    if submission.kind not in KINDS:
        raise InvalidRecord("kind must be ANNOTATOR_KIND_HUMAN or ANNOTATOR_KIND_AI")
    return service.submit(
        submission.annotation_id,
        submission.prompt_id,
        submission.annotator,
        submission.kind,
        submission.result,
        list(submission.discarded),
        submission.task_id or None,
    )


def attribute(who: Caller, annotator: str, kind: str) -> tuple[str, str]:
    """(annotator, kind) of an annotation sent by `who`: always `who.name`, and the kind of their role
    (`kinds.kind_for`: "" takes it); PermissionDenied when the request names someone else or the other kind."""
    own = kind_for(who, kind)
    if annotator and annotator != who.name:
        if own == "ai":
            raise PermissionDenied(
                f"{who.name} may not submit an annotation in the name of {annotator!r}: an AI annotation carries "
                "the judge account's own name (leave annotator empty)"
            )
        raise PermissionDenied(
            f"{who.name} may not submit an annotation in the name of {annotator!r}: an annotation's annotator is "
            "the account that sends it"
        )
    return who.name, own


def assigns(who: Caller, listed: str | None) -> bool:
    """Whether a listing for `listed` assigns the tasks it lists: only a person who annotates, listing their own."""
    return who.role in ANNOTATE and listed == who.name


def listed_for(who: Caller, annotator: str) -> str | None:
    """Whose tasks ListTasks lists: an annotator's own (an empty field names them; another's is PermissionDenied);
    for an operator, admin or service, the named annotator's (None: every open task)."""
    if who.role != ANNOTATOR:
        return annotator or None
    if annotator and annotator != who.name:
        raise PermissionDenied(f"{who.name} may list only their own tasks, not {annotator!r}'s")
    return who.name
