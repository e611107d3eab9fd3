"""`cheems annotators ...`: the accounts people sign in with on the annotator's page.

cheems annotators add 张三            # prints 张三's personal token once (the store keeps its sha256)
cheems annotators add lead --admin    # an admin also sees the overview of every annotator
cheems annotators list | reset NAME | disable NAME
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from cheems_cli.options import DatabaseUrl, clear_errors

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

annotators = typer.Typer(help="Annotator accounts for the annotator's web page.", no_args_is_help=True)
Name = Annotated[str, typer.Argument(help="The annotator's name (their annotations carry it).")]


def _engine(db: str) -> Engine:
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    return create_engine_for(StoreConfig(db))


@annotators.command("add")
@clear_errors
def add_command(
    name: Name,
    db: DatabaseUrl,
    admin: Annotated[bool, typer.Option(help="May see the overview of every annotator.")] = False,
) -> None:
    """Create an account and print its token (shown once: hand it to the person)."""
    from services.store.annotators import add_annotator
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        token = add_annotator(session, name, admin)
    typer.echo(token)


@annotators.command("reset")
@clear_errors
def reset_command(name: Name, db: DatabaseUrl) -> None:
    """Print a new token for NAME; the old one stops working (a disabled account is enabled again)."""
    from services.store.annotators import reset_token
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        token = reset_token(session, name)
    typer.echo(token)


@annotators.command("disable")
@clear_errors
def disable_command(name: Name, db: DatabaseUrl) -> None:
    """NAME's token no longer signs in; their annotations stay."""
    from services.store.annotators import disable
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        disable(session, name)
    typer.echo(f"disabled {name}")


@annotators.command("list")
@clear_errors
def list_command(db: DatabaseUrl) -> None:
    """Every account: name, role, state."""
    from services.store.annotators import list_annotators
    from services.store.db import session_scope

    with session_scope(_engine(db)) as session:
        for person in list_annotators(session):
            role = "admin" if person.admin else "annotator"
            typer.echo(f"{person.name}\t{role}\t{'active' if person.active else 'disabled'}")
