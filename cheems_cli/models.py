"""Reward models: `cheems init-model`, `convert-checkpoint`, `train`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cheems_cli.options import (
    clear_errors,
    say,
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

    say(f"wrote {init_tiny_model(out, hidden_size, layers, seed)}")  # a line of `cheems up`'s base-model log


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
    recipe: Annotated[
        str, typer.Option(help="Recipe name: tiny-cpu, qwen25-paper, qwen25-paper-lora, qwen25-paper-qlora.")
    ] = "tiny-cpu",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a config field: key=value.")] = None,
    nproc: Annotated[
        int, typer.Option(min=1, envvar="PET_NPROC_PER_NODE", help="Processes on this machine: one per GPU.")
    ] = 1,
    nnodes: Annotated[int, typer.Option(min=1, envvar="PET_NNODES", help="Machines (pods) in the job.")] = 1,
    rdzv_endpoint: Annotated[
        str, typer.Option(envvar="PET_RDZV_ENDPOINT", help="host:port of the c10d rendezvous (multi-node).")
    ] = "",
    rdzv_id: Annotated[str, typer.Option(envvar="PET_RDZV_ID", help="Job id shared by every node.")] = "cheems",
    plan: Annotated[
        bool, typer.Option("--plan", help="Print each GPU's memory estimate and exit: 0 when it fits, 1 when not.")
    ] = False,
    gpu_memory: Annotated[
        float | None,
        typer.Option(help="GiB each GPU has (default: the GPU's own; none on CPU): --plan's budget, else a check."),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="With --plan: also write the plan as JSON here.")
    ] = None,
) -> None:
    """Train a Bradley-Terry reward model; through torchrun with --nproc > 1 or on several nodes.

    Multi-node (Kubernetes Indexed Job, Kubeflow PyTorchJob): every node runs the same command with
    --nnodes and --rdzv-endpoint; torchrun's c10d rendezvous assigns the ranks. Under Kubeflow Trainer v2
    (TrainJob) the runtime's PET_NNODES, PET_NPROC_PER_NODE, PET_MASTER_ADDR and PET_MASTER_PORT are read.

    Rank 0 reports the data counts (responses dropped over max_length), progress, and where the
    model went; `cheems -v train` logs debug messages on every rank.

    `--plan` prints each GPU's memory (parameters, gradients, optimizer, activations, overhead) for --nnodes x
    --nproc GPUs of --gpu-memory GiB from the model's config alone, and what would make it fit. A run refuses a
    plan that cannot fit before loading anything: on CUDA always, on CPU when --gpu-memory is given.
    """
    import os

    from cheems.errors import CheemsError
    from trainer.launch import LaunchConfig, kubeflow_endpoint, launch

    args = ["--recipe", recipe] + [a for kv in set_ or [] for a in ("--set", kv)]
    if ctx.find_root().params.get("verbose"):
        args.append("--verbose")  # the training processes set their own logging (trainer.report)
    if plan or gpu_memory is not None:
        _memory_plan(recipe, set_ or [], nnodes, nproc, gpu_memory, json_out if plan else None, check=not plan)
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


def _memory_plan(
    recipe_name: str,
    sets: list[str],
    nnodes: int,
    nproc: int,
    gpu_memory: float | None,
    json_out: Path | None,
    check: bool,
) -> None:
    """`--plan`: print the plan and exit 0 (fits, or no budget known) or 1; `check`: refuse a run that cannot fit."""
    import json

    import torch

    from trainer.memory.check import check_memory, gpu_budget, plan_run
    from trainer.memory.report import format_plan, plan_json
    from trainer.recipes import recipe

    try:
        config = recipe(recipe_name).with_overrides(sets)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if check:
        check_memory(config, nnodes * nproc, device, gpu_memory, gpus_per_node=nproc)  # ConfigError: exit 2
        return
    run = plan_run(config, nnodes * nproc, nproc, gpu_budget(device, gpu_memory))
    typer.echo(format_plan(run))
    if json_out:
        json_out.write_text(json.dumps(plan_json(run), indent=2) + "\n", encoding="utf-8")
    raise typer.Exit(1 if run.plan.fits is False else 0)


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
