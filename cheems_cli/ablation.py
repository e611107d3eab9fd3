"""`cheems ablation`: the paper's Table 4, one reward model per dataset recipe, trained and evaluated on CheemsBench.

    cheems ablation --bench data/sample/open.jsonl,data/sample/human.jsonl --db sqlite:///out/demo/cheems.db
    cheems ablation --bench open.jsonl --training-url 127.0.0.1:50057 --recipes human,ai,ai-distant

With `--training-url` (or CHEEMS_TRAINING_URL) the trainings go to that running training service, and `--bench`
names files under its bench root (its CHEEMS_BENCH_ROOT, default <data_dir>/bench: a request names no path);
without, this command starts one in this process against `--db` (local torchrun launcher, no events published),
copies the bench files into <data_dir>/bench and stops it at the end, as `cheems demo` runs its services. A
running service takes your account's token (`--token-file`, CHEEMS_TOKEN, or a local `cheems up`'s operator); the
one started here takes a token of its own, made for this run (its trainings are requested by person:ablation). The
work is `trainer.service.ablation`, the table `trainer.ablation`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cheems_cli.options import (
    AccountTokenFile,
    DatabaseUrl,
    TlsCa,
    account_token,
    clear_errors,
    from_settings,
    key_values,
)

if TYPE_CHECKING:
    from trainer.ablation import AblationConfig, Row, Run

app = typer.Typer()


def split(values: list[str] | None) -> list[str]:
    """Repeated and comma-separated values, in order."""
    return [v.strip() for value in values or [] for v in value.split(",") if v.strip()]


@app.command("ablation")
@clear_errors
def ablation_command(
    bench: Annotated[
        list[str],
        typer.Option(help="CheemsBench files (repeat, or comma-separated); each is a subset named by its stem."),
    ],
    db: DatabaseUrl,
    tls_ca: TlsCa,
    data_dir: Annotated[str, from_settings("data_dir", "In-process service: datasets and trainings go here.")],
    training_url: Annotated[
        str, from_settings("training_url", "host:port of a running training service (empty: one in this process).")
    ],
    recipes: Annotated[
        str, typer.Option(help="Dataset recipes, comma-separated (default: Table 4's six rows).")
    ] = "human,ai,ai-debias,ai-distant,ai-distant-debias,human+ai-distant-debias",
    seeds: Annotated[str, typer.Option(help="Training seeds, comma-separated: every recipe once per seed.")] = "0",
    recipe: Annotated[str, typer.Option(help="Training recipe (default: the service's; in-process tiny-cpu).")] = "",
    model: Annotated[str, typer.Option(help="In-process service: base model directory (default: the recipe's).")] = "",
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="TrainConfig field key=value for every training.")
    ] = None,
    timeout: Annotated[float, typer.Option(min=0, help="Seconds per training before it is cancelled (0: none).")] = 0,
    poll: Annotated[float, typer.Option(min=0.1, help="Seconds between questions about a running training.")] = 2.0,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the rows and every run as JSON here.")] = None,
    chart: Annotated[Path | None, typer.Option(help="Draw the table as grouped bars into this PNG.")] = None,
    token_file: AccountTokenFile = None,
) -> None:
    """Train one RM per dataset recipe through the training service ("human" first: it supervises the distant
    ones), evaluate each on the bench files, and print the paper's Table 4 (a recipe that cannot run says why)."""
    from trainer.ablation import AblationConfig, plan, render, subsets_of, table_rows
    from trainer.service.ablation import run_ablation

    files = split(bench)
    missing = [f for f in files if not training_url and not Path(f).is_file()]
    if missing:
        raise typer.BadParameter(f"not a file: {', '.join(missing)}", param_hint="--bench")
    names = files if training_url else [Path(f).name for f in files]
    overrides = key_values(set_)
    try:
        config = AblationConfig(
            bench=tuple(names),  # names under the training service's bench root (a request names no path)
            recipes=tuple(split([recipes])),
            seeds=tuple(int(s) for s in split([seeds])),
            training_recipe=recipe,
            overrides=overrides,
            poll_seconds=poll,
            timeout=timeout,
        )
    except ValueError as e:  # UnknownDatasetRecipe included: it names the valid ones
        raise typer.BadParameter(str(e)) from None
    token = account_token(token_file, training_url, bool(tls_ca)) if training_url else ""
    if not training_url:
        _copy_into(files, Path(data_dir) / "bench")
    with _training_stub(training_url, db, data_dir, recipe, model, token, tls_ca) as stub:
        runs = run_ablation(stub, config, lambda line: typer.echo(line, err=True))
    rows = table_rows(runs, plan(config.recipes))
    subsets = subsets_of(config.bench)
    typer.echo(f"Table 4 ablation: seeds {','.join(map(str, config.seeds))}; CheemsBench {', '.join(subsets)}")
    typer.echo(render(rows, subsets))
    if json_out:
        _write_json(json_out, config, rows, runs)
        typer.echo(f"wrote {json_out}")
    if chart:
        _write_chart(chart, rows, subsets)
        typer.echo(f"wrote {chart}")


def _copy_into(paths: list[str], root: Path) -> None:
    """The in-process service's bench root gets a copy of each file (unless the file is that copy)."""
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    for file in map(Path, paths):
        if not (root / file.name).exists() or not (root / file.name).samefile(file):
            shutil.copyfile(file, root / file.name)


@contextmanager
def _training_stub(
    url: str, db: str, data_dir: str, recipe: str, model: str, token: str, tls_ca: str
) -> Iterator[object]:
    """A TrainingService stub: to `url` (with `token`), or to a service started here (and stopped, its trainings
    cancelled) that takes a token of its own."""
    import secrets

    from cheems.roles import OPERATOR, Caller
    from cheems.v1 import training_pb2_grpc
    from services.access import static_token
    from services.channels import open_channel, tls_credentials

    if url:
        with open_channel(url, tls_credentials(tls_ca), token=token) as channel:
            yield training_pb2_grpc.TrainingServiceStub(channel)
        return
    from services.hosting import HostConfig
    from services.store.db import StoreConfig, create_engine_for
    from services.store.migrate import upgrade
    from trainer.service.config import TrainingConfig
    from trainer.service.launchers.local import LocalLauncher
    from trainer.service.server import host
    from trainer.service.trainings import TrainingService

    upgrade(db)
    config = TrainingConfig(data_dir=data_dir, recipe=recipe or "tiny-cpu", model=model, port=0, poll_seconds=0.5)
    service = TrainingService(create_engine_for(StoreConfig(db)), config, LocalLauncher())
    own = secrets.token_urlsafe(32)
    grpc_host = host(service, HostConfig(port=0), static_token(own, Caller("ablation", OPERATOR))).start()
    before = {t.id for t in service.active()}  # another service's, on the same store: not ours to cancel
    try:
        with open_channel(f"127.0.0.1:{grpc_host.port}", token=own) as channel:
            yield training_pb2_grpc.TrainingServiceStub(channel)
    finally:
        for training in service.active():  # interrupted: nothing of ours trains on unwatched
            if training.id not in before:
                service.cancel_training(training.id)
        service.close()
        grpc_host.stop(0)
        service.engine.dispose()


def _write_json(path: Path, config: AblationConfig, rows: list[Row], runs: list[Run]) -> None:
    from trainer.ablation import to_json

    path.parent.mkdir(parents=True, exist_ok=True)
    data = to_json(config, rows, runs)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def _write_chart(path: Path, rows: list[Row], subsets: list[str]) -> None:
    from evaluator.chart import plot_comparison
    from trainer.ablation import chart_series

    path.parent.mkdir(parents=True, exist_ok=True)
    title = "Table 4: one reward model per dataset recipe (CheemsBench)"
    plot_comparison([r.recipe for r in rows], chart_series(rows, subsets), title, path)
