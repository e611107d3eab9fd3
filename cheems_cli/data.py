"""The store: `cheems ingest` and `cheems db upgrade`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    DatabaseUrl,
    KafkaBootstrap,
    clear_errors,
)

app = typer.Typer()
db = typer.Typer(help="The store's database.", no_args_is_help=True)


@app.command("ingest")
@clear_errors
def ingest_command(
    file: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="CheemsBench, CheemsPreference or raw jsonl.")
    ],
    db: DatabaseUrl,
    bootstrap: KafkaBootstrap,
) -> None:
    """Store prompts with responses (deduplicated); report rejected records with their line numbers."""
    from services.bus.client import Publisher
    from services.ingestion.records import parse_lines
    from services.ingestion.service import IngestionService
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    parsed = parse_lines(file.read_text(encoding="utf-8").splitlines(), file)
    publisher = Publisher(bootstrap) if bootstrap else None
    summary = IngestionService(create_engine_for(StoreConfig(db)), publisher, source=file.name).ingest(
        parsed.samples, parsed.errors
    )
    for error in summary.errors:
        typer.echo(f"{file}:{error.line}: {error.field + ': ' if error.field else ''}{error.message}", err=True)
    typer.echo(
        f"received {summary.received}  stored {summary.stored}  duplicates {summary.duplicates}  "
        f"rejected {summary.rejected}"
    )


@db.command("upgrade")
@clear_errors
def db_upgrade_command(
    db: DatabaseUrl,
) -> None:
    """Migrate the database to the newest schema (safe to run from several replicas at once)."""
    from services.store.migrate import current_revision, upgrade

    upgrade(db)
    typer.echo(f"database at revision {current_revision(db)}")
