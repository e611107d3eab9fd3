"""A training run's memory plan, and the refusal of one that cannot fit, before anything loads.

    run = plan_run(config, world_size=32, gpus_per_node=8, budget=80 * GIB)   # `cheems train --plan`
    check_memory(config, world)        # in `trainer.train._train`, before `load_model`: ConfigError if it cannot fit

`memory_check=warn` (TrainConfig) turns the refusal into a WARNING that says what it risks, and the run goes on:
the plan's fixed costs (CUDA context, NCCL buffers, fragmentation) are estimates no GPU has confirmed, so a
person who knows better may try; the run may then die of CUDA out-of-memory after loading, possibly mid-run.

The budget is the GPU's total memory (torch.cuda.mem_get_info) on CUDA, or `gpu_memory` GiB when given; on the CPU
there is none (host memory is not planned) and nothing is refused.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheems.errors import ConfigError
from trainer.config import TrainConfig
from trainer.memory.advice import Batch, fixes
from trainer.memory.count import count_shape
from trainer.memory.estimate import GIB, MemoryPlan, PlanSetup, estimate
from trainer.memory.shapes import model_config

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPlan:
    model: str
    source: str  # where the model's config came from: a config.json, or a known shape
    plan: MemoryPlan
    fixes: list[str]  # changes that would make it fit (empty when it fits or no budget is known)
    batch: Batch
    gpus_per_node: int
    seconds: float


def setup_of(config: TrainConfig, world_size: int, budget: int | None) -> PlanSetup:
    """The plan's view of a TrainConfig (bf16 means bf16 on the GPU; `cpu_offload` once TrainConfig has it)."""
    batch = batch_of(config)
    return PlanSetup(
        world_size=world_size,
        fsdp=config.fsdp,
        bf16=config.bf16,
        checkpointing=config.gradient_checkpointing,
        cpu_offload=bool(getattr(config, "cpu_offload", False)),
        tokens=batch.max_tokens or batch.micro_batch_size * batch.max_length,
        budget=budget,
        row=batch.max_length,
        lora_rank=config.lora_rank,
        lora_targets=tuple(config.lora_targets),
        lora_dropout=config.lora_dropout > 0,
        load_in_4bit=config.load_in_4bit,
    )


def batch_of(config: TrainConfig) -> Batch:
    return Batch(config.micro_batch_size, config.max_length, config.max_tokens)


def plan_run(
    config: TrainConfig,
    world_size: int,
    gpus_per_node: int = 1,
    budget: int | None = None,
    resolved: str | Path | None = None,
) -> RunPlan:
    """Plan `config` on `world_size` GPUs of `budget` bytes from the model's config alone (meta device).

    `resolved`: a local directory a hub resolver found for `config.model` (its config.json wins)."""
    started = time.perf_counter()
    model_cfg, source = model_config(config.model, resolved, config.trust_remote_code)
    shape = count_shape(model_cfg, config.trust_remote_code)
    setup = setup_of(config, world_size, budget)
    plan = estimate(shape, setup)
    advice = fixes(shape, setup, batch_of(config), gpus_per_node)
    seconds = time.perf_counter() - started
    return RunPlan(config.model, source, plan, advice, batch_of(config), gpus_per_node, seconds)


def gpu_budget(device: Any, gpu_memory: float | None = None) -> int | None:
    """Bytes a GPU has: `gpu_memory` GiB when given, the CUDA device's total memory, else None (CPU)."""
    if gpu_memory is not None:
        if not gpu_memory > 0:
            raise ConfigError(f"--gpu-memory must be > 0 GiB, got {gpu_memory}")
        return int(gpu_memory * GIB)
    import torch

    device = torch.device(device)
    if device.type != "cuda":
        return None
    return int(torch.cuda.mem_get_info(device)[1])


def check_memory(
    config: TrainConfig,
    world_size: int,
    device: Any,
    gpu_memory: float | None = None,
    resolved: str | Path | None = None,
    gpus_per_node: int | None = None,
) -> RunPlan | None:
    """Refuse (ConfigError, one line) a run whose plan does not fit the GPU; None when no budget is known.

    A model whose config cannot be found is refused only when the check was asked for (`gpu_memory`); on a GPU
    found by itself the check is skipped with a warning (loading will say what is wrong with the model)."""
    budget = gpu_budget(device, gpu_memory)
    if budget is None:
        return None
    per_node = gpus_per_node or int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # torchrun's processes on this node
    try:
        run = plan_run(config, world_size, per_node, budget, resolved)
    except ConfigError as e:
        if gpu_memory is not None:
            raise
        log.warning("memory plan skipped: %s", e)
        return None
    if not run.plan.fits:
        if config.memory_check != "warn":
            raise ConfigError(refusal(run))
        log.warning(risk(run))
        return run
    log.info("memory plan: %.1f of %.1f GiB a GPU", run.plan.total / GIB, budget / GIB)
    return run


def refusal(run: RunPlan) -> str:
    """One line: what the run needs, what the GPU has, its three largest rows, and the changes that would fit."""
    plan = run.plan
    biggest = sorted(plan.rows, key=lambda r: r.bytes, reverse=True)[:3]
    parts = ", ".join(f"{r.name} {r.bytes / GIB:.1f}" for r in biggest)
    budget = plan.setup.budget or 0
    return (
        f"memory plan: {run.model} needs {plan.total / GIB:.1f} GiB a GPU on {plan.setup.world_size} GPU(s), the GPU "
        f"has {budget / GIB:.1f} GiB ({parts} GiB); to fit: {'; or '.join(run.fixes)} "
        "(`cheems train --plan` prints the table); to run anyway at the risk of CUDA out-of-memory: "
        "--set memory_check=warn"
    )


def risk(run: RunPlan) -> str:
    """One line for `memory_check=warn`: the plan's figure against the GPU's, and what going on risks."""
    plan, budget = run.plan, run.plan.setup.budget or 0
    fixed = plan.row("overhead") + plan.row("fragmentation")
    return (
        f"memory plan: {run.model} needs {plan.total / GIB:.1f} GiB a GPU on {plan.setup.world_size} GPU(s), the "
        f"GPU has {budget / GIB:.1f} GiB ({(plan.total - budget) / GIB:.1f} GiB over); going on because "
        "memory_check=warn: the run may die of CUDA out-of-memory after the model has loaded, possibly mid-run "
        "(a longer batch, an evaluation, a checkpoint), losing the steps since its last checkpoint; "
        f"{fixed / GIB:.1f} GiB of the plan are fixed costs (CUDA context, NCCL buffers, fragmentation) "
        "that no GPU has confirmed"
    )
