"""What every command shares: option types read from the environment, and the one error -> exit code edge."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Annotated, Any, TypeVar

import typer

from cheems.errors import CheemsError

F = TypeVar("F", bound=Callable[..., Any])
# Options several commands share, read from the environment the Kubernetes manifests set.
ListenHost = Annotated[
    str, typer.Option(help="Address to listen on: 127.0.0.1 = this machine only (default); 0.0.0.0 in a pod.")
]
DatabaseUrl = Annotated[str, typer.Option(envvar="CHEEMS_DATABASE_URL", help="SQLAlchemy URL.")]
KafkaBootstrap = Annotated[str, typer.Option(envvar="CHEEMS_KAFKA_BOOTSTRAP", help="Kafka bootstrap servers.")]


def clear_errors(command: F) -> F:
    """Report expected failures as one `error:` line on stderr and exit 2, without a traceback."""

    @wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (CheemsError, OSError) as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from None

    return run  # type: ignore[return-value]
