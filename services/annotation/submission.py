"""One way in for an annotation, whoever sends it: gRPC `SubmitAnnotation` and the annotator's web page.

    created = submit(service, Submission("a1", prompt_id, "张三", "human", {"order": [["r1"], ["r2", "r3"]]},
                                         discarded=[], task_id=task_id))

The checks here plus `AnnotationService.submit` (the store's validation, one transaction, the outbox events,
resolution when the prompt's last task closes) are the whole path; the adapters only decode into a
`Submission` and map errors to their status. A replay of a stored annotation returns False and stores nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
    """Store the annotation and close its task (see `AnnotationService.submit`); False for a replay."""
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
