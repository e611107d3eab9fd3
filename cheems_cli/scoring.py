"""Scoring with a reward model: `cheems serve`, `score`, `rewards`, `export-triton`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from cheems.precision import DtypeName
from cheems_cli.options import (
    ScorerToken,
    ScorerTokenFile,
    TlsCa,
    account_token,
    as_service,
    clear_errors,
    say,
    secret_option,
    settings_options,
)
from services.scorer.config import ScorerConfig  # light (pydantic only): `serve`'s options are its fields

app = typer.Typer()


@app.command("serve")
@clear_errors
@settings_options(ScorerConfig)
def serve_command(config: ScorerConfig) -> None:
    """Serve a reward model: gRPC cheems.v1.RewardService/Score and HTTP POST /get_reward.

    With --follow, serve the registry's production model by default and follow it (start: --model until one
    is production); calls may name any registered model by id."""
    as_service("scorer")
    from services.scorer.runtime import ScorerServer, serve

    if not config.model and not config.follow:  # Path("") would be the working directory
        raise typer.BadParameter(
            "a checkpoint directory or a Hugging Face Hub id is required (or --follow, to serve the registry's models)",
            param_hint="'--model' (or CHEEMS_SCORER_MODEL)",
        )
    if config.model:  # a Hub id is fetched (or found in the cache) before anything starts
        config = hub_config(config)
    from services.observe.tracing import setup_tracing

    setup_tracing("scorer")  # when OTEL_EXPORTER_OTLP_ENDPOINT is set: before its servers and engines start

    def announce(server: ScorerServer) -> None:
        http = f"{config.host}:{server.http_port}" if config.http_port >= 0 else "off"
        say(f"serving: gRPC {config.host}:{server.grpc_port}  HTTP {http}")  # what scripts and tests wait for

    serve(config, on_serving=announce)


def hub_config(config: ScorerConfig) -> ScorerConfig:
    """`config` serving --model's directory: a Hub id's cached snapshot, reported by the repository's name."""
    from cheems.errors import ModelError
    from cheems.hub import resolve_model, served_name

    try:
        directory = resolve_model(config.model)
    except ModelError as e:  # a path that is no directory, an id that is none: the option's usage error
        raise typer.BadParameter(str(e), param_hint="'--model'") from None
    model_id = config.model_id or served_name(config.model)
    return config.model_copy(update={"model": str(directory), "model_id": model_id})


@app.command("score")
@clear_errors
def score_command(
    prompt: Annotated[str, typer.Option(help="The user prompt.")],
    response: Annotated[list[str], typer.Option(help="A response to score; repeat for several.")],
    token: ScorerToken,
    tls_ca: TlsCa,
    token_file: ScorerTokenFile = None,
    model_url: Annotated[str, typer.Option(help="host:port of the scorer's gRPC endpoint.")] = "127.0.0.1:50051",
    system_prompt: Annotated[str, typer.Option()] = "",
    timeout: Annotated[float, typer.Option(help="Deadline in seconds.")] = 30.0,
) -> None:
    """Score responses with a running scorer (a quick check). Without a scorer token, your account's is sent
    (CHEEMS_TOKEN_FILE, CHEEMS_TOKEN, or a local `cheems up`'s operator)."""
    import grpc

    from services.channels import tls_credentials
    from services.scorer.client import RewardClient

    token = secret_option(token, token_file, "--token-file") or account_token(None, model_url, bool(tls_ca))
    try:
        with RewardClient(model_url, token=token, timeout=timeout, credentials=tls_credentials(tls_ca)) as client:
            reply = client.score_full(prompt, response, system_prompt)
    except grpc.RpcError as e:
        typer.echo(f"error: {e.code().name}: {e.details()}", err=True)
        raise typer.Exit(2) from None
    for i, (text, score) in enumerate(zip(response, reply.scores, strict=True)):
        mark = "*" if i == reply.best_index else " "
        typer.echo(f"{mark} {score:+.4f}  {text[:60]}")


@app.command("rewards")
@clear_errors
def rewards_command(
    bench: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, help="CheemsBench files.")],
    out: Annotated[Path, typer.Option(help="Rewards jsonl to write.")],
    token: ScorerToken,
    token_file: ScorerTokenFile = None,
    model: Annotated[
        str,
        typer.Option(
            help="Checkpoint directory or Hugging Face Hub id, org/name or org/name@revision (scored in-process)."
        ),
    ] = "",
    model_url: Annotated[str, typer.Option(help="host:port of a running scorer instead.")] = "",
    device: Annotated[
        str, typer.Option(help="--model: auto (cuda when there is a GPU, else cpu), cpu, cuda, cuda:1 ...")
    ] = "auto",
    dtype: Annotated[
        DtypeName,
        typer.Option(help="--model: auto = bfloat16 on CUDA (float16 on older cards), float32 on the CPU."),
    ] = "auto",
    max_batch_tokens: Annotated[
        int, typer.Option(min=1, help="--model: tokens per forward, padding counted (many prompts a forward).")
    ] = 32768,
    max_length: Annotated[
        int, typer.Option(min=1, help="--model: tokens per (prompt, response); longer ones lose their beginning.")
    ] = 2048,
    in_flight: Annotated[int, typer.Option(min=1, help="--model-url: ScoreBatch calls at once (64 prompts each).")] = 4,
) -> None:
    """Score every response of bench files: the rewards file `cheems eval` and distant supervision read.

    In-process (--model), prompts are scored many to a forward, sorted by length, on --device in --dtype."""
    from cheems.hub import resolve_model
    from services.scorer.offline.bench_rewards import write_bench_rewards
    from services.scorer.offline.jobs import OfflineScoring

    if bool(model) == bool(model_url):
        raise typer.BadParameter("give exactly one of --model and --model-url")
    token = secret_option(token, token_file, "--token-file") or (account_token(None, model_url) if model_url else "")
    scoring = OfflineScoring(device, dtype, max_length=max_length, max_batch_tokens=max_batch_tokens)
    if model:
        scoring.execution()  # a device or dtype that cannot run is refused before a model is fetched or files read
    model = str(resolve_model(model)) if model else ""
    written = write_bench_rewards(bench, out, model, model_url, token, scoring, in_flight)
    typer.echo(f"wrote {written} rewards to {out}")


@app.command("export-triton")
@clear_errors
def export_triton_command(
    model: Annotated[
        str, typer.Option(help="Checkpoint directory or Hugging Face Hub id, org/name or org/name@revision.")
    ],
    out: Annotated[Path, typer.Option(help="Model repository directory to write.")],
    name: Annotated[str, typer.Option()] = "cheems_rm",
    max_batch_size: Annotated[int, typer.Option(min=1, help="Responses per forward (Triton's batch).")] = 64,
    device: Annotated[str, typer.Option(help="cpu, or cuda for KIND_GPU instances.")] = "cpu",
    prefix_sharing: Annotated[
        Literal["on", "off"], typer.Option(help="on: pack one prompt's responses, as `serve --prefix-sharing`.")
    ] = "on",
    dtype: Annotated[
        DtypeName,
        typer.Option(help="auto: bfloat16 for cuda (Ampere and later; float16 for older cards), float32 for cpu."),
    ] = "auto",
    max_batch_tokens: Annotated[int, typer.Option(min=1, help="Tokens per forward, padding counted.")] = 32768,
    queue_delay_us: Annotated[
        int, typer.Option(min=0, help="Microseconds Triton's dynamic batcher waits to fill a batch.")
    ] = 2000,
) -> None:
    """Export a checkpoint as a Triton model repository (Python backend) for the official Triton image."""
    from cheems.hub import resolve_model
    from services.scorer.triton.repository import export_triton_repository

    target = export_triton_repository(
        resolve_model(model),
        out,
        name,
        max_batch_size,
        queue_delay_us,
        device,
        prefix_sharing == "on",
        dtype,
        max_batch_tokens,
    )
    typer.echo(f"wrote {target}")
