"""What every command shares: option types read from the environment, and the one error -> exit code edge."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any, TypeVar

import typer

from cheems import errors
from cheems.settings import Settings, env_name, setting

F = TypeVar("F", bound=Callable[..., Any])


def from_settings(field: str, help: str) -> Any:
    """An option that falls back to `cheems.settings.Settings` (its env var, then its one default)."""
    default = Settings.model_fields[field].default
    return typer.Option(
        envvar=env_name(field),
        default_factory=lambda: setting(field),
        show_default=str(default) if default else False,
        help=help,
    )


# Options several commands share; the Kubernetes manifests set their environment variables.
ListenHost = Annotated[
    str, typer.Option(help="Address to listen on: 127.0.0.1 = this machine only (default); 0.0.0.0 in a pod.")
]
DatabaseUrl = Annotated[str, from_settings("database_url", "SQLAlchemy URL of the store.")]
KafkaBootstrap = Annotated[str, from_settings("kafka_bootstrap", "Kafka bootstrap servers (empty: none or embedded).")]
ScorerUrl = Annotated[str, from_settings("scorer_url", "host:port of the scorer's gRPC endpoint.")]
ScorerToken = Annotated[str, from_settings("scorer_token", "Bearer token of the scorer (empty = none).")]


def required(value: str, option: str) -> str:
    """An option that this command cannot run without, though its setting may be empty elsewhere."""
    if not value.strip():
        raise typer.BadParameter(f"required here (or set {option})")
    return value


# error kind -> exit code: 2 = the input or the request (as for a usage error), 3 = a dependency
# (broker, scorer, Triton) could not serve; retrying later may work; 1 = anything else we raised.
EXIT_CODES: list[tuple[type[BaseException], int]] = [
    (errors.InvalidInput, 2),
    (errors.NotFound, 2),
    (errors.Conflict, 2),
    (errors.LimitExceeded, 2),
    (OSError, 2),  # a file that cannot be read or written
    (errors.Unavailable, 3),
    (errors.DeadlineExceeded, 3),
    (errors.Cancelled, 3),
    (errors.CheemsError, 1),
]


def exit_code(error: BaseException) -> int:
    return next(code for kind, code in EXIT_CODES if isinstance(error, kind))


def clear_errors(command: F) -> F:
    """Report expected failures as one `error:` line on stderr and their exit code, without a traceback."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (errors.CheemsError, OSError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(exit_code(e)) from None

    return run  # type: ignore[return-value]
