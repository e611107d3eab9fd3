"""`cheems models ...`: the model registry's lifecycle, by hand.

cheems models register out/qwen-rm --id rm-qwen-base   # any checkpoint that loads and scores; prints its id
cheems models list [--json]                            # id, state, aliases, overall, path; newest first
cheems models promote rm-qwen-base [--force]           # production now (a rejected one needs --force)
cheems models rollback                                 # production returns to the one before
cheems models reject rm-x --reason "..."               # never the production model

Each step is recorded (who, when, why) and announced on cheems.models.v1 through the store's outbox.
`--as NAME` names the person (default: $USER).
"""

from __future__ import annotations

import getpass
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cheems_cli.options import DatabaseUrl, clear_errors

if TYPE_CHECKING:
    from services.models.lifecycle import ModelLifecycle
    from services.store.lifecycle import Change

registry = typer.Typer(help="The model registry: register, list, promote, roll back, reject.", no_args_is_help=True)
ModelId = Annotated[str, typer.Argument(help="A registered model's id.")]
Actor = Annotated[str, typer.Option("--as", help="Who does this (recorded as person:NAME); default: $USER.")]
Reason = Annotated[str, typer.Option(help="Why (recorded with the step).")]


def _lifecycle(db: str) -> ModelLifecycle:
    from services.models.lifecycle import ModelLifecycle
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    return ModelLifecycle(create_engine_for(StoreConfig(db)))


def _person(name: str) -> str:
    return f"person:{name or getpass.getuser()}"


def _print(changes: list[Change], production: str | None) -> None:
    for c in changes:
        typer.echo(f"{c.model_id}: {c.from_state or '-'} -> {c.to_state}" + (f" ({c.reason})" if c.reason else ""))
    if not changes:
        typer.echo("nothing changed")
    typer.echo(f"production: {production or '(none)'}")


@registry.command("register")
@clear_errors
def register_command(
    path: Annotated[str, typer.Argument(help="A sequence-classification RM directory (safetensors).")],
    db: DatabaseUrl,
    model_id: Annotated[str, typer.Option("--id", help="Its id (default: rm- and a new random id).")] = "",
    actor: Actor = "",
    reason: Reason = "",
) -> None:
    """Register a checkpoint trained anywhere as a candidate; it must load and score (nothing is stored if not)."""
    typer.echo(_lifecycle(db).register(path, model_id or None, _person(actor), reason).id)


@registry.command("list")
@clear_errors
def list_command(
    db: DatabaseUrl, as_json: Annotated[bool, typer.Option("--json", help="A JSON list of objects.")] = False
) -> None:
    """Every model, newest first: id, state, aliases, CheemsBench overall, path."""
    from services.store import registry as store_registry
    from services.store.db import session_scope

    lifecycle = _lifecycle(db)
    with session_scope(lifecycle.engine) as session:
        results = store_registry.model_results(session)
    rows: list[dict[str, Any]] = [
        {
            "id": m.id,
            "state": m.state,
            "aliases": names,
            "overall": results[m.id][1] if m.id in results else m.overall,
            "path": m.path,
            "source": m.source,
            "created_at": m.created_at.isoformat(),
        }
        for m, names in lifecycle.listing()
    ]
    if as_json:
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        return
    for row in rows:
        overall = "-" if row["overall"] is None else f"{row['overall']:.4f}"
        aliases = ",".join(row["aliases"])
        typer.echo(f"{row['id']:<24} {row['state']:<10} {aliases:<11} {overall:>7}  {row['path']}")


@registry.command("promote")
@clear_errors
def promote_command(
    model_id: ModelId,
    db: DatabaseUrl,
    force: Annotated[bool, typer.Option(help="Promote a rejected or retired model anyway.")] = False,
    actor: Actor = "",
    reason: Reason = "",
) -> None:
    """Make MODEL_ID the production model (the one before is kept as a rollback target)."""
    lifecycle = _lifecycle(db)
    changes = lifecycle.promote(model_id, _person(actor), reason, force)
    _print(changes, getattr(lifecycle.production(), "id", None))


@registry.command("rollback")
@clear_errors
def rollback_command(db: DatabaseUrl, actor: Actor = "", reason: Reason = "") -> None:
    """Production returns to the model that was production before the current one."""
    lifecycle = _lifecycle(db)
    changes = lifecycle.rollback(_person(actor), reason)
    _print(changes, getattr(lifecycle.production(), "id", None))


@registry.command("reject")
@clear_errors
def reject_command(
    model_id: ModelId,
    db: DatabaseUrl,
    reason: Annotated[str, typer.Option(help="Why it is rejected (required).")],
    actor: Actor = "",
) -> None:
    """Reject MODEL_ID: it is no longer served (not the production model: promote another or roll back first)."""
    lifecycle = _lifecycle(db)
    changes = lifecycle.reject(model_id, _person(actor), reason)
    _print(changes, getattr(lifecycle.production(), "id", None))
