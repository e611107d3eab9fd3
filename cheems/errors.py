"""The one exception tree. Every error Cheems raises on purpose is a `CheemsError` of one kind below.

    CheemsError                      reason "internal"
    ├── InvalidInput  (ValueError)   a request, file or value we cannot take: FormatError, ModelError, ConfigError...
    ├── NotFound      (LookupError)  a named thing that does not exist (a run, a prompt)
    ├── Conflict                     the state forbids it (a closed task, an id reused with other content)
    │   └── AlreadyExists            it is done once, and was (a task's annotation)
    ├── LimitExceeded                over a configured limit; the same request fails again
    ├── Unavailable                  a dependency (Triton, the broker, a port) cannot serve now; retryable
    ├── DeadlineExceeded             the caller's deadline passed first
    ├── Cancelled                    the caller went away
    ├── Unauthenticated              no credential, or one no active account has
    └── PermissionDenied             the account's role may not do this (`cheems.roles`)

Packages subclass a kind (`services.store.errors`, `services.scorer.errors`, ...). Only the edges map
kinds to the outside: exit codes in `cheems_cli.options`, gRPC status in `services.grpc_errors`,
HTTP status in `services.web.errors` and `services.scorer.http.app`. Each error has a `reason`, a stable word
clients may read.
"""

from __future__ import annotations

from pathlib import Path


class CheemsError(Exception):
    """Base of every error Cheems raises on purpose."""

    reason = "internal"


class InvalidInput(CheemsError, ValueError):
    """A request, file or value that cannot be used as given; the message names the field or line."""

    reason = "invalid_request"


class NotFound(CheemsError, LookupError):
    """A named thing (a run, a prompt, a sample) does not exist."""

    reason = "not_found"


class Conflict(CheemsError):
    """The current state forbids the change (a closed task; an idempotency key reused with other content)."""

    reason = "conflict"


class AlreadyExists(Conflict):
    """What may be done once was done already (a second, different annotation of an annotated task)."""

    reason = "already_exists"


class LimitExceeded(CheemsError):
    """More than a configured limit allows; sending the same request again fails the same way."""

    reason = "limit_exceeded"


class Unavailable(CheemsError):
    """A dependency cannot serve now (a backend restarting, a broker down, a port taken); retryable."""

    reason = "unavailable"


class DeadlineExceeded(CheemsError):
    """The caller's deadline (or the server's cap) passed first."""

    reason = "deadline_exceeded"


class Cancelled(CheemsError):
    """The caller cancelled or disconnected."""

    reason = "cancelled"


class Unauthenticated(CheemsError):
    """No credential, or one that no active account has (gRPC UNAUTHENTICATED, HTTP 401). Never names the token."""

    reason = "unauthenticated"


class PermissionDenied(CheemsError):
    """The caller's account may not do this: its role (the message names the role needed), or another's name."""

    reason = "permission_denied"


class PortInUse(Unavailable):
    """The address a server should listen on is taken (another instance?): it refuses to start."""

    reason = "port_in_use"


class ModelError(InvalidInput):
    """A checkpoint cannot be loaded, converted or exported."""

    reason = "invalid_model"


class ConfigError(InvalidInput):
    """A setting that cannot work as given (a dtype the device cannot run); refused before anything starts."""

    reason = "invalid_config"


class FormatError(InvalidInput):
    """A record in a jsonl file is malformed. The message names the file, the line and the field."""

    def __init__(self, path: str | Path, line: int, message: str, field: str | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message
        where = f"{self.path}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")
