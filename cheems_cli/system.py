"""The whole system: `cheems up` (every service on one machine, supervised) and `cheems status`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    AccountTokenFile,
    DatabaseUrl,
    Lease,
    MaxHeld,
    PeoplePerPrompt,
    account_token,
    clear_errors,
)

app = typer.Typer()
SAMPLE_BENCH = Path(__file__).resolve().parent.parent / "data" / "sample"


def default_bench() -> list[Path]:
    """The bundled sample benchmark, where this checkout has it."""
    return [p for p in (SAMPLE_BENCH / "open.jsonl", SAMPLE_BENCH / "human.jsonl") if p.exists()]


@app.command("up")
@clear_errors
def up_command(
    data_dir: Annotated[
        Path, typer.Option(help="Database, datasets, trainings, models and logs/<process>.log.")
    ] = Path("out/up"),
    db: Annotated[str, typer.Option(help="SQLAlchemy URL of the store (default: a SQLite file in --data-dir).")] = "",
    bench: Annotated[
        list[Path] | None,
        typer.Option(exists=True, dir_okay=False, help="CheemsBench files every new model is evaluated on."),
    ] = None,
    base_model: Annotated[
        Path | None, typer.Option(help="Model training starts from (default: a tiny RM, made).")
    ] = None,
    auto_after: Annotated[
        int, typer.Option(min=0, help="Train once this many new rankings arrived (0 = on request).")
    ] = 20,
    recipe: Annotated[str, typer.Option(help="Training recipe.")] = "tiny-cpu",
    dataset_recipe: Annotated[
        str,
        typer.Option(
            help="What datasets hold: human, ai, ai-distant, human+ai-distant, the AI ones optionally -debias "
            "(default: the paper's; a human dataset is trained first, to supervise the AI annotations)."
        ),
    ] = "human+ai-distant-debias",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Training override key=value.")] = None,
    judge_url: Annotated[
        str, typer.Option(help="OpenAI-compatible API of the AI judge (empty: no judge worker).")
    ] = "",
    judge_model: Annotated[str, typer.Option(help="The judge's model name.")] = "judge",
    judge_key_file: Annotated[str, typer.Option(help="File holding the judge's API key.")] = "",
    ai_sources: Annotated[str, typer.Option(help="Samples (by source, fnmatch) the AI judge annotates.")] = "*",
    human_sources: Annotated[str, typer.Option(help="Samples (by source, fnmatch) that get human tasks.")] = "*",
    ports_from: Annotated[int, typer.Option(help="Listen on a block of ports from here (0 = the standard ports).")] = 0,
    nproc: Annotated[int, typer.Option(min=1, help="Training processes (torchrun).")] = 1,
    max_held: MaxHeld = 5,
    lease: Lease = 1800.0,
    people_per_prompt: PeoplePerPrompt = 0,
) -> None:
    """Run the whole loop on this machine until Ctrl-C: broker, store, ingestion, annotation (+ AI judge),
    training, the scorer following the registry, score workers, sink and the evaluation API. Every service checks
    its callers' accounts; the operator's token is in DATA_DIR/accounts/operator.token (0600). The annotation queue
    hands out work by --max-held, --lease and --people-per-prompt (give `cheems status` the same)."""
    from services import hosting
    from system.plan import OPERATOR_ACCOUNT, SystemConfig, addresses, metrics_urls
    from system.supervisor import Supervisor
    from system.up import up

    config = SystemConfig(
        data_dir=data_dir, db=db, base_model=base_model, bench=bench if bench is not None else default_bench(),
        judge_url=judge_url, judge_model=judge_model, judge_key_file=judge_key_file, ai_sources=ai_sources,
        human_sources=human_sources, training_recipe=recipe, dataset_recipe=dataset_recipe,
        training_overrides=set_ or [], auto_after=auto_after, nproc=nproc, ports_from=ports_from,
        extra={"annotation": ["--max-held", str(max_held), "--lease", str(lease),
                              "--people-per-prompt", str(people_per_prompt)]},
    )  # fmt: skip
    began = time.monotonic()

    def event(name: str, what: str, detail: str) -> None:
        typer.echo(f"[{time.monotonic() - began:7.1f}s] {name:<12} {what}{'  ' + detail if detail else ''}")

    def ready(system: Supervisor) -> None:
        typer.echo(f"up: every service healthy; logs in {system.log_dir}/; Ctrl-C stops everything")
        for name, address in addresses(config).items():
            typer.echo(f"  {name:<12} {address}")
        typer.echo(f"  {'leaderboard':<12} http://127.0.0.1:{config.port(hosting.EVALUATION_HTTP_PORT)}/")
        typer.echo(f"  {'metrics':<12} {metrics_urls(config)['up']} (every process's: cheems status --json)")
        typer.echo(f"  {'operator':<12} token in {config.token_file(OPERATOR_ACCOUNT)} (CHEEMS_TOKEN_FILE)")

    up(config, event, ready)


@app.command("status")
@clear_errors
def status_command(
    db: DatabaseUrl,
    json_: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    ports_from: Annotated[int, typer.Option(help="The port block `cheems up --ports-from` used (0 = standard).")] = 0,
    timeout: Annotated[float, typer.Option(help="Seconds per health check.")] = 2.0,
    token_file: AccountTokenFile = None,
    people_per_prompt: PeoplePerPrompt = 0,
    lease: Lease = 1800.0,
) -> None:
    """Each service's health, how much each stage holds, who holds which annotation tasks (and the prompts the
    accounts cannot finish under --people-per-prompt: give the annotation service's, and its --lease), and the
    models with their CheemsBench results, best first (what the scorer holds asked with your account's token:
    --token-file, CHEEMS_TOKEN, or `cheems up`'s operator)."""
    from services.annotation.config import QueueConfig
    from services.store.db import StoreConfig, create_engine_for
    from system.plan import SystemConfig, addresses, metrics_urls
    from system.status import render, status

    system = SystemConfig(ports_from=ports_from, judge_url="-")  # the judge's ports too: reported when it answers
    services = addresses(system)
    services.pop("broker", None)  # not gRPC: its health is the services' that use it
    token = account_token(token_file, services["scorer"])
    engine = create_engine_for(StoreConfig(db))
    queue = QueueConfig(lease_seconds=lease, people_per_prompt=people_per_prompt)
    report = status(engine, services, timeout, token, metrics_urls(system), optional=("judge",), queue=queue)
    typer.echo(json.dumps(report, ensure_ascii=False, indent=2) if json_ else render(report))


@app.command("demo")
@clear_errors
def demo_command(
    out: Annotated[Path, typer.Option(help="Where the demo keeps its store, datasets, models and logs.")] = Path(
        "out/demo"
    ),
    trainings: Annotated[int, typer.Option(min=1, max=2, help="1: train on human rankings; 2: then human + AI.")] = 2,
    epochs: Annotated[int, typer.Option(min=1, help="Training epochs per model.")] = 6,
    ports_from: Annotated[int, typer.Option(help="Listen on a block of ports from here (0 = the standard ports).")] = 0,
    timeout: Annotated[float, typer.Option(help="Give up after this many seconds.")] = 600.0,
) -> None:
    """The loop through the services on the bundled sample: ingest over gRPC, simulated annotators and AI judge,
    then rankings -> dataset -> training -> model -> scorer switch -> evaluation, by themselves."""
    import shutil

    from services.store.db import StoreConfig, create_engine_for
    from system.demo import DemoConfig, run_demo
    from system.leaderboard import leaderboard

    shutil.rmtree(out, ignore_errors=True)
    config = DemoConfig(out=out, trainings=trainings, epochs=epochs, ports_from=ports_from, timeout=timeout)
    run_demo(config, typer.echo)
    typer.echo("\nCheemsBench, every model the loop trained (best first):")
    typer.echo(leaderboard(create_engine_for(StoreConfig(f"sqlite:///{(out / 'cheems.db').resolve()}"))))
    typer.echo(f"\nstopped everything; logs in {out}/logs/")
