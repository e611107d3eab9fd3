"""Data in: `cheems ingest`, `cheems convert`, and the store's `cheems db upgrade`.

Both data commands read every layout `cheems.formats.layouts` knows, from jsonl, a JSON array or Parquet,
account for every record, and exit 0 when all were taken, 1 when some were rejected (the others are
stored or written all the same), 2 when the input cannot be used at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    EXIT_REJECTED,
    DatabaseUrl,
    KafkaBootstrap,
    clear_errors,
    say,
)

app = typer.Typer()
db = typer.Typer(help="The store's database.", no_args_is_help=True)

LAYOUT_HELP = (
    "Read every record in this layout instead of telling it from the fields: cheemsbench, pairwise, "
    "annotations, samples, trl, hh-rlhf, sharegpt, alpaca."
)
Layout = Annotated[str | None, typer.Option("--format", help=LAYOUT_HELP)]
DataFile = Annotated[
    Path, typer.Argument(exists=True, dir_okay=False, help="jsonl, JSON array (.json) or Parquet file, any layout.")
]


def account(file: Path, rejected: Iterable[tuple[int, str | None, str]], summary: str) -> None:
    """Each rejected record (line, field, reason) as `FILE:LINE: field: reason` on stderr, then the summary;
    exit 1 when any was rejected."""
    rejected = list(rejected)
    for line, field, message in rejected:
        typer.echo(f"{file}:{line}: {field + ': ' if field else ''}{message}", err=True)
    typer.echo(summary)
    if rejected:
        raise typer.Exit(EXIT_REJECTED)


@app.command("ingest")
@clear_errors
def ingest_command(file: DataFile, db: DatabaseUrl, bootstrap: KafkaBootstrap, layout: Layout = None) -> None:
    """Store prompts with responses (deduplicated); report rejected records with their line numbers.

    Exit 0: every record stored or already there; 1: some rejected (the rest stored); 2: unusable input
    or an unreachable database."""
    from services.bus.client import Publisher
    from services.ingestion.records import read_samples
    from services.ingestion.service import IngestionService
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade

    upgrade(db)
    parsed = read_samples(file, layout)
    # the samples' events go through the store's outbox: published before the exit if the broker takes them,
    # else by the next relay of this database (the ingestion service's)
    publisher = Publisher(bootstrap, max_block_ms=10000, connect=False) if bootstrap else None
    service = IngestionService(create_engine_for(StoreConfig(db)), publisher, source=file.name)
    try:
        summary = service.ingest(parsed.samples, parsed.errors)
    finally:
        service.close()
        if publisher is not None:
            publisher.close(timeout=10)
    account(
        file,
        ((e.line, e.field, e.message) for e in summary.errors),
        f"received {summary.received}  stored {summary.stored}  duplicates {summary.duplicates}  "
        f"rejected {summary.rejected}",
    )


@app.command("convert")
@clear_errors
def convert_command(
    file: DataFile,
    out: Annotated[Path, typer.Option(help="The official jsonl to write (CheemsBench or CheemsPreference).")],
    layout: Layout = None,
) -> None:
    """Rewrite preference data of any layout in the official layouts (records of one prompt merged).

    Exit 0: every record converted; 1: some rejected (the rest written); 2: unusable input."""
    from cheems.formats.convert import convert

    result = convert(file, out, layout)
    read = ", ".join(f"{n} {name}" for name, n in sorted(result.layouts_in.items())) or "none"
    account(
        file,
        ((e.line, e.field, e.message) for e in result.errors),
        f"read {result.read} records ({read}), rejected {len(result.errors)}; "
        f"wrote {result.written} prompts to {out} as {result.layout}",
    )


@db.command("upgrade")
@clear_errors
def db_upgrade_command(
    db: DatabaseUrl,
) -> None:
    """Migrate the database to the newest schema (safe to run from several replicas at once)."""
    from services.store.migrate import current_revision, upgrade

    upgrade(db)
    say(f"database at revision {current_revision(db)}")  # a line of `cheems up`'s migrations log
