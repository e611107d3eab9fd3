"""The gRPC edge of the error tree: each kind of `cheems.errors` -> one status code, for every service.

    except CheemsError as e:
        abort(context, e)   # status from STATUS, the message, and trailing metadata cheems-error-reason
    error_reason(rpc_error)   # on the client: that word ("" when the server sent none)
    raise error_of(rpc_error, "annotation service") from None   # on the client: the kind the status stands for

Clients decide on retries from the status and the `cheems-error-reason` word, never from message text. A client
that reports a failed call as an error of the tree reads STATUS backwards (`error_of`): one map both ways.
"""

from __future__ import annotations

from typing import NoReturn

import grpc

from cheems import errors

REASON_KEY = "cheems-error-reason"
STATUS: list[tuple[type[errors.CheemsError], grpc.StatusCode]] = [
    (errors.InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.Conflict, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.LimitExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (errors.Cancelled, grpc.StatusCode.CANCELLED),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.CheemsError, grpc.StatusCode.INTERNAL),
]


def status_of(error: errors.CheemsError) -> grpc.StatusCode:
    return next(code for kind, code in STATUS if isinstance(error, kind))


def abort(context: grpc.ServicerContext, error: errors.CheemsError) -> NoReturn:
    """End the call with the error's status, message and reason (raises, as `context.abort` does)."""
    context.set_trailing_metadata(((REASON_KEY, error.reason),))
    context.abort(status_of(error), str(error))
    raise AssertionError("context.abort raises")


def error_reason(error: grpc.RpcError) -> str:
    """The server's `cheems-error-reason` for a failed call; "" when it sent none (an error of gRPC itself)."""
    read = getattr(error, "trailing_metadata", None)
    for key, value in (read() if callable(read) else None) or ():
        if key == REASON_KEY:
            return value.decode() if isinstance(value, bytes) else str(value)
    return ""


def error_of(error: grpc.RpcError, service: str) -> errors.CheemsError:
    """A failed call as the kind of `cheems.errors` its status stands for (STATUS read backwards; a status no kind
    has, INTERNAL or UNKNOWN, is a plain CheemsError), the message naming `service`, the status and its details."""
    code = error.code()
    kind = next((k for k, c in STATUS if c == code), errors.CheemsError)
    return kind(f"{service}: {code.name}: {error.details()}")
