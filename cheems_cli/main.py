"""The `cheems` console command: the top floor. Each command parses, calls the package that owns the work, prints.

    cheems eval data/sample/open.jsonl data/sample/human.jsonl --rewards data/sample/rewards.jsonl

Commands import their packages inside their bodies so `cheems --help` stays fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cheems_cli import (
    ablation,
    accounts,
    annotation,
    data,
    dev,
    evaluation,
    lifecycle,
    models,
    scoring,
    services,
    system,
)
from cheems_cli.options import configure_logging
from services.observe.logs import FORMATS

app = typer.Typer(
    help="Build and evaluate Chinese reward models (CheemsBench, CheemsPreference, CheemsRM).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for group in (evaluation.app, annotation.app, scoring.app, models.app, ablation.app, data.app, system.app):
    app.add_typer(group)
app.add_typer(annotation.annotate, name="annotate")
app.add_typer(accounts.accounts, name="accounts")
app.add_typer(accounts.annotators, name="annotators")
app.add_typer(lifecycle.registry, name="models")
app.add_typer(data.db, name="db")
app.add_typer(services.service, name="service")
app.add_typer(dev.dev, name="dev")


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log debug messages.")] = False,
    log_format: Annotated[
        str | None,
        typer.Option(
            "--log-format",
            metavar="|".join(FORMATS),
            help="text (ISO timestamps) or json (one object a line); default CHEEMS_LOG_FORMAT, else text. "
            "Processes the command starts (cheems up's, torchrun's) log alike.",
        ),
    ] = None,
) -> None:
    # The handler and format for every command; a service names itself (cheems_cli.options.as_service) and
    # `cheems train` sets the level of its training processes (rank 0 INFO, trainer.report.configure_logging).
    try:
        configure_logging(verbose, log_format)
    except ValueError as e:  # a format neither text nor json, a level that is none
        raise typer.BadParameter(str(e), param_hint="'--log-format' (or CHEEMS_LOG_FORMAT, CHEEMS_LOG_LEVEL)") from None
