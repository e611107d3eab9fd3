"""A memory plan as `cheems train --plan` prints it (a table of each GPU's rows) and as JSON (`--json`)."""

from __future__ import annotations

from typing import Any

from trainer.memory.check import RunPlan
from trainer.memory.estimate import GIB
from trainer.memory.lora import lora_counts


def _gib(value: int) -> str:
    if 0 < value < GIB // 10:
        return f"{value / 2**20:8.1f} MiB"
    return f"{value / GIB:8.1f} GiB"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.1f}M"


def describe_setup(run: RunPlan) -> str:
    setup, batch = run.plan.setup, run.batch
    nodes = -(-setup.world_size // run.gpus_per_node)
    gpus = "1 GPU" if setup.world_size == 1 else f"{setup.world_size} GPUs"
    if nodes > 1 or run.gpus_per_node > 1:
        gpus += f" ({nodes} node{'s' * (nodes > 1)} x {run.gpus_per_node})"
    tokens = (
        f"max_tokens {batch.max_tokens}"
        if batch.max_tokens
        else f"micro_batch_size {batch.micro_batch_size} x max_length {batch.max_length}"
    )
    checkpointing = "activation checkpointing" if setup.checkpointing else "no activation checkpointing"
    flags = [setup.mode, "bf16" if setup.bf16 else "fp32", checkpointing]
    if setup.cpu_offload:
        flags.append("cpu_offload")
    if setup.adapters:
        adapters = lora_counts(run.plan.shape, setup.lora_rank, setup.lora_targets)
        flags.append(
            f"{setup.adapters} r={setup.lora_rank} on {adapters.per_layer} linears a layer "
            f"({_count(adapters.trainable)} trainable: adapters + head)"
        )
    return f"{gpus}, {', '.join(flags)}; {setup.tokens:,} tokens a forward ({tokens})"


def format_plan(run: RunPlan) -> str:
    plan, shape = run.plan, run.plan.shape
    lines = [
        f"memory plan for {run.model} ({run.source}): {_count(shape.parameters)} parameters, {shape.layers} layers",
        describe_setup(run),
        "",
        f"{'':<20}{'per GPU':>12}",
    ]
    lines += [f"{row.name:<20}{_gib(row.bytes)}  {row.note}" for row in plan.rows]
    lines.append(f"{'total':<20}{_gib(plan.total)}")
    budget = plan.setup.budget
    if budget is None:
        lines.append(f"{'per GPU budget':<20}{'unknown':>12}  (pass --gpu-memory GIB)")
    elif plan.fits:
        lines.append(f"{'per GPU budget':<20}{_gib(budget)}  fits, {(budget - plan.total) / GIB:.1f} GiB to spare")
    else:
        lines.append(f"{'per GPU budget':<20}{_gib(budget)}  does NOT fit: {(plan.total - budget) / GIB:.1f} GiB over")
        lines.append(f"why: {why(run)}")
        lines.append("to fit, any one of:" if len(run.fixes) > 1 else "to fit:")
        lines += [f"  - {fix}" for fix in run.fixes]
    lines.append(f"planned in {run.seconds:.1f} s from the config on the meta device (no weights loaded)")
    return "\n".join(lines)


def plan_json(run: RunPlan) -> dict[str, Any]:
    plan = run.plan
    return {
        "model": run.model,
        "source": run.source,
        "parameters": plan.shape.parameters,
        "trainable": trainable(run),
        "setup": {**vars(plan.setup), "mode": plan.setup.mode, "gpus_per_node": run.gpus_per_node},
        "rows": [{"name": r.name, "bytes": r.bytes, "note": r.note} for r in plan.rows],
        "total_bytes": plan.total,
        "budget_bytes": plan.setup.budget,
        "fits": plan.fits,
        "fixes": run.fixes,
        "seconds": round(run.seconds, 3),
    }


def why(run: RunPlan) -> str:
    """The share of the training states (what more GPUs or offload change) and of the rest."""
    plan = run.plan
    states = sum(plan.row(name) for name in ("parameters", "gradients", "optimizer"))
    how = f"sharded {plan.setup.world_size} ways" if plan.setup.mode == "FSDP" else "a whole copy on each GPU"
    if plan.setup.cpu_offload and plan.setup.mode == "FSDP":
        how = "in host memory"
    activations = plan.row("activations")
    base = plan.row("frozen base") if plan.setup.adapters else 0
    rest = plan.total - states - activations - base
    frozen = f"the frozen base {base / GIB:.1f} GiB, " if base else ""
    return (
        f"{frozen}parameters, gradients and AdamW state take {states / GIB:.1f} GiB a GPU ({how}); "
        f"activations {activations / GIB:.1f} GiB, the rest {rest / GIB:.1f} GiB"
    )


def trainable(run: RunPlan) -> int:
    """Trainable parameter elements: every one in full fine-tuning, the adapters and the head's copy with LoRA."""
    setup, shape = run.plan.setup, run.plan.shape
    return lora_counts(shape, setup.lora_rank, setup.lora_targets).trainable if setup.lora_rank else shape.parameters
