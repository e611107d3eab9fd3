"""`cheems eval`: CheemsBench metrics from a rewards file, or scored through Kafka."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    DatabaseUrl,
    KafkaBootstrap,
    ScorerUrl,
    clear_errors,
)

app = typer.Typer()


@app.command("eval")
@clear_errors
def eval_command(
    bench: Annotated[
        list[Path],
        typer.Argument(
            exists=True,
            dir_okay=False,
            help="CheemsBench jsonl files; each is one subset named by its file stem.",
        ),
    ],
    scorer_url: ScorerUrl,
    bootstrap: KafkaBootstrap,
    db: DatabaseUrl,
    rewards: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help='jsonl of {"input", "id", "reward"}.')
    ] = None,
    semantics: Annotated[
        str,
        typer.Option(help="paper: a reward tie is wrong in both metrics; official: a tie does not break exact match."),
    ] = "paper",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the metrics as JSON here.")] = None,
    report: Annotated[
        Path | None, typer.Option(help="Write results.json, per_category.png and README.md here.")
    ] = None,
    ece_bins: Annotated[int, typer.Option(min=1, help="Bins of the calibration error.")] = 5,
    via_kafka: Annotated[
        bool, typer.Option(help="Score through Kafka and scorer workers instead of --rewards.")
    ] = False,
) -> None:
    """Score a reward model on CheemsBench from a file of its rewards."""
    from evaluator.evaluate import EvalOptions, evaluate_files
    from evaluator.metrics import Semantics
    from evaluator.report import format_table, write_json, write_report

    if semantics not in {s.value for s in Semantics}:
        raise typer.BadParameter(f"must be 'paper' or 'official', got {semantics!r}", param_hint="--semantics")
    if via_kafka == (rewards is not None) or (via_kafka and not scorer_url):
        raise typer.BadParameter("give --rewards, or --via-kafka with --scorer-url")
    options = EvalOptions(Semantics(semantics), ece_bins)
    if rewards is not None:
        result = evaluate_files(bench, rewards, options)
    else:
        from evaluator.pipeline.driver import run_via_kafka  # Kafka and the store: imported only when asked for

        result = run_via_kafka([str(b) for b in bench], scorer_url, db, bootstrap, options)
    typer.echo(format_table(result))
    if json_out:
        write_json(result, json_out)
        typer.echo(f"\nwrote {json_out}")
    if report:
        for path in write_report(result, report):
            typer.echo(f"wrote {path}")
