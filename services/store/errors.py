"""The store's errors: each is a kind of the one tree in `cheems.errors`, mapped to statuses at the edges."""

from __future__ import annotations

from cheems import errors


class StoreError(errors.CheemsError):
    """Base of every error the store raises on purpose."""


class InvalidRecord(StoreError, errors.InvalidInput):
    """A value the schema does not allow (an unknown kind, a malformed result); the message names the field."""


class UnknownPrompt(StoreError, errors.NotFound):
    """No prompt has this id."""


class UnknownResponse(StoreError, errors.InvalidInput, LookupError):
    """A response key that the prompt does not have (a bad field of the request naming it)."""


class UnknownTask(StoreError, errors.NotFound):
    """No task has this id, or it belongs to another prompt."""


class UnknownRun(StoreError, errors.NotFound):
    """No evaluation run has this id."""


class TaskClosed(StoreError, errors.Conflict):
    """The task is done: it takes no new annotations."""


class TaskAnnotated(StoreError, errors.AlreadyExists):
    """The task has its annotation already: a task takes one (`services.store.assignments`)."""

    reason = "task_completed"


class NotAssigned(StoreError, errors.PermissionDenied):
    """A human annotation of a task that was never assigned to its annotator."""

    reason = "forbidden"  # as the pages say it: not yours


class OtherKindsTask(StoreError, errors.PermissionDenied):
    """A task of the other kind of work: an AI annotation (or a service's close) naming a person's triple, or a
    human annotation naming an AI judge's pair (`services.annotation.kinds`)."""

    reason = "other_kinds_task"


class StaleTask(StoreError, errors.Conflict):
    """The task was assigned to another annotator after this one held it (their lease ran out, or it was
    reassigned)."""

    reason = "stale_task"


class Conflict(StoreError, errors.Conflict):
    """An idempotency key (annotation id, response key) was reused with other content."""


class DatabaseUnreachable(StoreError, errors.InvalidInput):
    """No connection to the database the URL names (wrong host, port, name or credentials, or it is down).

    An input error at the edges (exit 2): a command given a URL it cannot use stops at once, naming it."""

    reason = "database_unreachable"


class UnknownDataset(StoreError, errors.NotFound):
    """No dataset has this id."""


class UnknownTraining(StoreError, errors.NotFound):
    """No training has this id."""


class UnknownModel(StoreError, errors.NotFound):
    """No registered model has this id."""


class UnknownAnnotator(StoreError, errors.NotFound):
    """No annotator account has this name."""


class UnknownAnnotation(StoreError, errors.NotFound):
    """No annotation has this id."""
