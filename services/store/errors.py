"""The store's exception tree. Edges (CLI, gRPC, HTTP) map these to exit codes and statuses."""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the store raises on purpose."""


class InvalidRecord(StoreError, ValueError):
    """A value the schema does not allow (an unknown kind, a malformed result); the message names the field."""


class UnknownPrompt(StoreError, LookupError):
    """No prompt has this id."""


class UnknownResponse(StoreError, LookupError):
    """A response key that the prompt does not have."""


class UnknownTask(StoreError, LookupError):
    """No task has this id, or it belongs to another prompt."""


class TaskClosed(StoreError):
    """The task is done: it takes no new annotations."""


class Conflict(StoreError):
    """An idempotency key (annotation id, response key) was reused with other content."""
