"""Scorer errors, each a kind of `cheems.errors`; `server` and `http.app` map them to gRPC and HTTP statuses.

Each error has a `reason`: a stable machine-readable word sent with every error reply (gRPC trailing
metadata `cheems-error-reason`, the JSON body's `reason`), so clients decide on retries from the
status code and this word, never from message text.
"""

from cheems import errors
from cheems.errors import CheemsError


class ScorerError(CheemsError):
    """Base of the scorer's errors."""

    reason = "internal"


class InvalidRequest(ScorerError, errors.InvalidInput):
    """The request is malformed (no responses, empty prompt): INVALID_ARGUMENT / 400."""

    reason = "invalid_request"


class LimitExceeded(ScorerError, errors.LimitExceeded):
    """More responses, items, bytes or tokens than the configured limits: RESOURCE_EXHAUSTED / 413.

    Sending the same request again fails the same way: clients must not retry it."""

    reason = "limit_exceeded"


class BackendUnavailable(ScorerError, errors.Unavailable):
    """The inference backend (Triton) cannot be reached or is restarting: UNAVAILABLE / 503. Retryable."""

    reason = "backend_unavailable"


class DeadlineExceeded(ScorerError, errors.DeadlineExceeded):
    """The caller's deadline (or the server's cap per call) passed first: DEADLINE_EXCEEDED / 504."""

    reason = "deadline_exceeded"


class ClientGone(ScorerError, errors.Cancelled):
    """The caller cancelled or disconnected; the rest of its work is dropped: CANCELLED / 499."""

    reason = "cancelled"


class FeedUnavailable(ScorerError, errors.Unavailable):
    """`--follow` cannot read the models topic (no broker, no topic): the scorer does not start (exit 3)."""

    reason = "broker_unavailable"


class UnknownModel(ScorerError, errors.NotFound):
    """A call named a model this scorer does not serve: unknown to the registry, rejected or retired."""

    reason = "model_not_found"
