"""Reward models: `cheems init-model`, `convert-checkpoint`, `train`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    clear_errors,
)

app = typer.Typer()


@app.command("init-model")
@clear_errors
def init_model_command(
    out: Annotated[Path, typer.Option(help="Directory to write the checkpoint to.")],
    hidden_size: Annotated[int, typer.Option(min=8, help="Hidden size (multiple of 4).")] = 64,
    layers: Annotated[int, typer.Option(min=1)] = 2,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Create the tiny Qwen2-architecture RM with the real Qwen2 vocabulary (offline, seconds)."""
    from trainer.tiny import init_tiny_model

    typer.echo(f"wrote {init_tiny_model(out, hidden_size, layers, seed)}")


@app.command("convert-checkpoint")
@clear_errors
def convert_command(
    source: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="Official CheemsRM checkpoint.")],
    out: Annotated[Path, typer.Option(help="Where to write the sequence-classification checkpoint.")],
) -> None:
    """Convert an official CheemsRM checkpoint (causal LM + v_head) to AutoModelForSequenceClassification."""
    from cheems.model import convert_v_head

    typer.echo(f"wrote {convert_v_head(source, out)}")


@app.command("train")
@clear_errors
def train_command(
    ctx: typer.Context,
    recipe: Annotated[str, typer.Option(help="Recipe name: tiny-cpu, qwen25-paper.")] = "tiny-cpu",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config field: key=value.")] = None,
    nproc: Annotated[
        int, typer.Option(min=1, envvar="PET_NPROC_PER_NODE", help="Processes on this machine: one per GPU.")
    ] = 1,
    nnodes: Annotated[int, typer.Option(min=1, envvar="PET_NNODES", help="Machines (pods) in the job.")] = 1,
    rdzv_endpoint: Annotated[
        str, typer.Option(envvar="PET_RDZV_ENDPOINT", help="host:port of the c10d rendezvous (multi-node).")
    ] = "",
    rdzv_id: Annotated[str, typer.Option(envvar="PET_RDZV_ID", help="Job id shared by every node.")] = "cheems",
) -> None:
    """Train a Bradley-Terry reward model; through torchrun with --nproc > 1 or on several nodes.

    Multi-node (Kubernetes Indexed Job, Kubeflow PyTorchJob): every node runs the same command with
    --nnodes and --rdzv-endpoint; torchrun's c10d rendezvous assigns the ranks. Under Kubeflow Trainer v2
    (TrainJob) the runtime's PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR and PET_MASTER_PORT are read.

    Rank 0 reports the data counts (responses dropped over max_length), progress, and where the
    model went; `cheems -v train` logs debug messages on every rank.
    """
    import os

    from cheems.errors import CheemsError
    from trainer.launch import LaunchConfig, kubeflow_endpoint, launch

    args = ["--recipe", recipe] + [a for kv in set_ or [] for a in ("--set", kv)]
    if ctx.find_root().params.get("verbose"):
        args.append("--verbose")  # the training processes set their own logging (trainer.report)
    try:
        endpoint = rdzv_endpoint or kubeflow_endpoint(os.environ)
        launching = LaunchConfig(nproc, nnodes, endpoint, rdzv_id)
        status = launch(launching, args + hub_model_args(recipe, set_ or []))
    except ValueError as e:
        if isinstance(e, CheemsError):  # e.g. a missing checkpoint: reported by clear_errors
            raise
        raise typer.BadParameter(str(e)) from None  # a bad --set or launch option
    if status:
        raise typer.Exit(status)


def hub_model_args(recipe_name: str, assignments: list[str]) -> list[str]:
    """`--set model=DIR` when the run's model is a Hugging Face Hub id: fetched here, once on each node, before
    any training process starts (so no rank waits on a download at a barrier), and read from the cache by all.
    A model that is neither a directory nor an id fails here, before torchrun."""
    from cheems.hub import HubModel, model_source, resolve_model
    from trainer.recipes import recipe

    model = recipe(recipe_name).with_overrides(assignments).model
    if not model or not isinstance(model_source(model), HubModel):
        return []
    return ["--set", f"model={resolve_model(model)}"]
