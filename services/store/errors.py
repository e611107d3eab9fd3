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


class UnknownTask(StoreError, errors.InvalidInput, LookupError):
    """No task has this id, or it belongs to another prompt (a bad field of the request naming it)."""


class UnknownRun(StoreError, errors.NotFound):
    """No evaluation run has this id."""


class TaskClosed(StoreError, errors.Conflict):
    """The task is done: it takes no new annotations."""


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
