"""`cheems accounts ...` (and its older sibling `cheems annotators ...`): who may call the services, with which role.

cheems accounts add etl --role operator             # prints etl's token once (the store keeps its sha256)
cheems accounts add eval-worker --role service --token-file /secrets/eval-worker/token   # a token made elsewhere
cheems accounts list | reset NAME [--token-file F] | disable NAME | enable NAME | role NAME --role R
cheems annotators add 张三 [--admin]                 # the same as --role annotator (or admin)

Roles (`cheems.roles`): annotator, operator, admin, service, scorer-client. The commands talk to the store
(`--db`), so whoever may run them holds the database's credentials: managing accounts is the database admin's.
A token is never taken from the command line: printed once, or read from `--token-file` (one word of at least 128
bits: `cheems.credentials.check_strength`, the rule the store holds it to). Nothing re-enables a disabled account
or restores a reset token but these commands (`cheems up` refuses to start instead).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cheems.credentials import check_strength, read_secret
from cheems.roles import ADMIN, ANNOTATOR, ROLES
from cheems_cli.options import DatabaseUrl, clear_errors

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

accounts = typer.Typer(help="Accounts and their roles: who may call which service.", no_args_is_help=True)
annotators = typer.Typer(help="Annotator accounts (cheems accounts, roles annotator and admin).", no_args_is_help=True)
Name = Annotated[str, typer.Argument(help="The account's name (what its annotations and actions carry).")]
Role = Annotated[str, typer.Option(help=f"What it may do: {', '.join(ROLES)}.")]
TokenFile = Annotated[
    Path | None,
    typer.Option(
        dir_okay=False, help="Take the token in this file (made elsewhere, e.g. a Kubernetes Secret's) instead."
    ),
]


def _engine(db: str) -> Engine:
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    return create_engine_for(StoreConfig(db))


def _token(token_file: Path | None) -> str | None:
    return None if token_file is None else check_strength(read_secret(token_file, "--token-file"), "--token-file")


@accounts.command("add")
@clear_errors
def add_command(name: Name, role: Role, db: DatabaseUrl, token_file: TokenFile = None) -> None:
    """Create an account and print its token (shown once: hand it over). With --token-file the account takes that
    token and nothing is printed; adding the same account again with it changes nothing."""
    from services.store.accounts import add_account
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        token = add_account(session, name, role, _token(token_file))
    typer.echo(f"account {name} ({role}) has the token of {token_file}" if token_file else token)


@accounts.command("reset")
@clear_errors
def reset_command(name: Name, db: DatabaseUrl, token_file: TokenFile = None) -> None:
    """Print a new token for NAME (or take --token-file's); the old one stops working (a disabled account stays
    disabled: `enable`)."""
    from services.store.accounts import reset_token
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        token = reset_token(session, name, _token(token_file))
    typer.echo(f"account {name} has the token of {token_file}" if token_file else token)


@accounts.command("disable")
@clear_errors
def disable_command(name: Name, db: DatabaseUrl) -> None:
    """NAME's token is refused from its next call; what it did stays."""
    from services.store.accounts import disable
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        disable(session, name)
    typer.echo(f"disabled {name}")


@accounts.command("enable")
@clear_errors
def enable_command(name: Name, db: DatabaseUrl) -> None:
    """NAME's token (the one it had) is taken again from its next call."""
    from services.store.accounts import enable
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        enable(session, name)
    typer.echo(f"enabled {name}")


@accounts.command("role")
@clear_errors
def role_command(name: Name, role: Role, db: DatabaseUrl) -> None:
    """NAME's role from its next call (its token stays)."""
    from services.store.accounts import set_role
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        set_role(session, name, role)
    typer.echo(f"{name} is {role}")


@accounts.command("list")
@clear_errors
def list_command(db: DatabaseUrl) -> None:
    """Every account: name, role, state."""
    from services.store.accounts import list_accounts
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        for account in list_accounts(session):
            typer.echo(f"{account.name}\t{account.role}\t{'active' if account.active else 'disabled'}")


@annotators.command("add")
@clear_errors
def add_annotator_command(
    name: Name,
    db: DatabaseUrl,
    admin: Annotated[
        bool, typer.Option(help="An admin: also sees the overview, promotes and rolls back models.")
    ] = False,
) -> None:
    """Create a person's account (role annotator, or admin) and print its token (shown once)."""
    add_command(name, ADMIN if admin else ANNOTATOR, db)


annotators.command("reset")(reset_command)
annotators.command("disable")(disable_command)
annotators.command("enable")(enable_command)
annotators.command("list")(list_command)
