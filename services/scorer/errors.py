"""Scorer errors; `grpc_server` and `http_app` map them to gRPC and HTTP statuses at the edge."""

from cheems.errors import CheemsError


class ScorerError(CheemsError):
    """Base of the scorer's errors."""


class InvalidRequest(ScorerError):
    """The request is malformed (no responses, empty prompt): INVALID_ARGUMENT / 400."""


class LimitExceeded(ScorerError):
    """More responses or tokens than the configured limits: RESOURCE_EXHAUSTED / 413."""


class BackendUnavailable(ScorerError):
    """The inference backend (Triton) cannot be reached: UNAVAILABLE / 503."""


class DeadlineExceeded(ScorerError):
    """The caller's deadline passed before scores were ready: DEADLINE_EXCEEDED / 504."""
