"""Scoring with a reward model: `cheems serve`, `score`, `rewards`, `export-triton`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    ListenHost,
    ScorerToken,
    clear_errors,
)

app = typer.Typer()


@app.command("serve")
@clear_errors
def serve_command(
    model: Annotated[Path, typer.Option(exists=True, file_okay=False, help="Checkpoint directory.")],
    grpc_port: Annotated[int, typer.Option(help="gRPC port (0 = any free port).")] = 50051,
    http_port: Annotated[int, typer.Option(help="HTTP port (0 = any free port, -1 = none).")] = 8000,
    backend: Annotated[str, typer.Option(help="triton (PyTriton, or --triton-url) or torch (in-process).")] = "triton",
    triton_url: Annotated[str, typer.Option(help="host:port of an external Triton gRPC endpoint.")] = "",
    host: ListenHost = "127.0.0.1",
    max_responses: Annotated[int, typer.Option(min=1)] = 64,
    max_length: Annotated[int, typer.Option(min=1)] = 2048,
    truncation: Annotated[str, typer.Option(help="error | left | right for over-length inputs.")] = "error",
    max_batch_size: Annotated[int, typer.Option(min=1, help="Triton dynamic batch, in responses.")] = 64,
    token: Annotated[str, typer.Option(envvar="CHEEMS_SCORER_TOKEN", help="Require this bearer token.")] = "",
    tls_cert: Annotated[str, typer.Option(help="PEM certificate (with --tls-key) for TLS on gRPC.")] = "",
    tls_key: Annotated[str, typer.Option()] = "",
    device: Annotated[str, typer.Option()] = "cpu",
    max_batch_items: Annotated[int, typer.Option(min=1, help="Items per ScoreBatch call.")] = 128,
    max_queries: Annotated[int, typer.Option(min=1, help="Queries per HTTP /get_reward call.")] = 4096,
    max_message_bytes: Annotated[
        int, typer.Option(min=1024, help="Largest request in bytes (gRPC message and HTTP body).")
    ] = 64 * 1024 * 1024,
    max_call_seconds: Annotated[
        float, typer.Option(help="Limit per call; calls without a deadline (grpcurl, Go stubs) get this one.")
    ] = 300.0,
    triton_restarts: Annotated[
        int, typer.Option(min=0, help="Restarts of a crashed Triton before giving up (exit 1, liveness fails).")
    ] = 3,
    drain_seconds: Annotated[float, typer.Option(help="Grace for in-flight calls on SIGTERM.")] = 10.0,
) -> None:
    """Serve a reward model: gRPC cheems.v1.RewardService/Score and HTTP POST /get_reward."""
    from services.scorer.config import ScorerConfig
    from services.scorer.runtime import serve

    try:
        config = ScorerConfig(
            model=str(model),
            grpc_port=grpc_port,
            http_port=http_port,
            backend=backend,
            triton_url=triton_url,
            host=host,
            max_responses=max_responses,
            max_length=max_length,
            truncation=truncation,
            max_batch_size=max_batch_size,
            auth_token=token,
            tls_cert=tls_cert,
            tls_key=tls_key,
            device=device,
            max_batch_items=max_batch_items,
            max_queries=max_queries,
            max_message_bytes=max_message_bytes,
            max_call_seconds=max_call_seconds,
            triton_restarts=triton_restarts,
            drain_seconds=drain_seconds,
        )
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    serve(config)


@app.command("score")
@clear_errors
def score_command(
    prompt: Annotated[str, typer.Option(help="The user prompt.")],
    response: Annotated[list[str], typer.Option(help="A response to score; repeat for several.")],
    token: ScorerToken,
    model_url: Annotated[str, typer.Option(help="host:port of the scorer's gRPC endpoint.")] = "localhost:50051",
    system_prompt: Annotated[str, typer.Option()] = "",
    timeout: Annotated[float, typer.Option(help="Deadline in seconds.")] = 30.0,
) -> None:
    """Score responses with a running scorer (a quick check)."""
    import grpc

    from services.scorer.client import RewardClient

    try:
        with RewardClient(model_url, token=token, timeout=timeout) as client:
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
    model: Annotated[str, typer.Option(help="Checkpoint directory (scored in-process).")] = "",
    model_url: Annotated[str, typer.Option(help="host:port of a running scorer instead.")] = "",
) -> None:
    """Score every response of bench files: the rewards file `cheems eval` and distant supervision read."""
    from services.scorer.bench_rewards import write_bench_rewards

    if bool(model) == bool(model_url):
        raise typer.BadParameter("give exactly one of --model and --model-url")
    typer.echo(f"wrote {write_bench_rewards(bench, out, model, model_url, token)} rewards to {out}")


@app.command("export-triton")
@clear_errors
def export_triton_command(
    model: Annotated[Path, typer.Option(exists=True, file_okay=False, help="Checkpoint directory.")],
    out: Annotated[Path, typer.Option(help="Model repository directory to write.")],
    name: Annotated[str, typer.Option()] = "cheems_rm",
    max_batch_size: Annotated[int, typer.Option(min=1)] = 64,
    device: Annotated[str, typer.Option(help="cpu, or cuda for KIND_GPU instances.")] = "cpu",
) -> None:
    """Export a checkpoint as a Triton model repository (Python backend) for the official Triton image."""
    from services.scorer.model_repository import export_triton_repository

    typer.echo(f"wrote {export_triton_repository(model, out, name, max_batch_size, device=device)}")
