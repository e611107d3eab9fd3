"""What every command shares: option types read from the environment, and the one error -> exit code edge."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any, TypeVar

import typer

from cheems import errors

F = TypeVar("F", bound=Callable[..., Any])
# Options several commands share, read from the environment the Kubernetes manifests set.
ListenHost = Annotated[
    str, typer.Option(help="Address to listen on: 127.0.0.1 = this machine only (default); 0.0.0.0 in a pod.")
]
DatabaseUrl = Annotated[str, typer.Option(envvar="CHEEMS_DATABASE_URL", help="SQLAlchemy URL.")]
KafkaBootstrap = Annotated[str, typer.Option(envvar="CHEEMS_KAFKA_BOOTSTRAP", help="Kafka bootstrap servers.")]


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
