"""JSON errors of the pages' HTTP endpoints: `{"error": message, "reason": word}` with a status per error kind."""

from __future__ import annotations

from starlette.responses import JSONResponse

from cheems import errors

Unauthenticated = errors.Unauthenticated  # no token, or one that signs nobody in (HTTP 401)


class Forbidden(errors.PermissionDenied):
    """Signed in, but this is not theirs to see or change (HTTP 403)."""

    reason = "forbidden"


# error kind (cheems.errors) -> HTTP status; the first matching kind wins
STATUSES: list[tuple[type[errors.CheemsError], int]] = [
    (errors.Unauthenticated, 401),
    (errors.PermissionDenied, 403),
    (errors.InvalidInput, 400),
    (errors.NotFound, 404),
    (errors.Conflict, 409),
    (errors.LimitExceeded, 413),
    (errors.Unavailable, 503),
    (errors.DeadlineExceeded, 504),
    (errors.Cancelled, 499),  # the caller went away (nginx's code)
]


def status_of(exc: BaseException) -> int:
    """The HTTP status of an error: by its `cheems.errors` kind, 500 for anything else."""
    return next((status for kind, status in STATUSES if isinstance(exc, kind)), 500)


def json_error(status: int, message: str, reason: str) -> JSONResponse:
    """An error body scripts can read: the message for people, the reason word for code."""
    return JSONResponse({"error": message, "reason": reason}, status_code=status)


def error_response(exc: errors.CheemsError) -> JSONResponse:
    """`json_error` of a Cheems error: its status, message and reason."""
    return json_error(status_of(exc), str(exc), exc.reason)
