"""Part c: the FSDP2 path in bf16, each rank under torchrun: load, step, and the memory the plan calls fixed.

Every rank (`--nproc` 1, or 2 on a host with two GPUs) joins a process group (NCCL on CUDA, gloo on the CPU; a
world of one too, so that `fully_shard` runs even on one card), then loads the report's model the way the trainer
does under FSDP (`trainer.weights.sharding.load_sharded`: built on the meta device, sharded per decoder layer with
bf16 parameters and float32 reduction, each rank reading only its rows), timed, and takes optimizer steps
(forward under autocast, the Bradley-Terry loss, backward, fused AdamW) with activation checkpointing, as the paper's
recipe trains. The steps after the first are timed (median).

On CUDA it also measures what the memory plan (`trainer.memory.estimate`) only estimates: the CUDA context (the
device's used memory outside torch's allocator once CUDA is up), what NCCL adds outside it after its first
collective, and the allocator's fragmentation (peak reserved over peak allocated); and the plan's total for this
run against the card's measured peak (reserved + outside).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from gpu_parts.rows import Cell, gib, missing
from gpu_parts.setting import Setting

# (responses a forward a rank, tokens a response, timed steps)
SIZES = {"cuda": (8, 1024, 5), "cpu": (2, 64, 2)}


def outside(device: Any) -> int:
    """Bytes of the card in use but not held by torch's caching allocator (context, NCCL, other processes)."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return total - free - torch.cuda.memory_reserved(device)


def join(setting: Setting) -> tuple[Any, dict[str, int]]:
    """(this rank's World in a process group, even of one; the bytes outside the allocator before and after it)."""
    import torch
    import torch.distributed as dist

    from trainer.distributed import World, setup

    world = setup()  # a group only when WORLD_SIZE > 1
    costs: dict[str, int] = {}
    if setting.cuda:
        torch.zeros(1, device=world.device)
        costs["context"] = outside(world.device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if setting.cuda else "gloo")
    probe = torch.ones(1, device=world.device)
    dist.all_reduce(probe)  # NCCL makes its communicator (and its buffers) at the first collective
    if setting.cuda:
        torch.cuda.synchronize(world.device)
        costs["nccl"] = outside(world.device) - costs["context"]
    return World(world.rank, dist.get_world_size(), world.local_rank, world.device), costs


def rank_figures(setting: Setting) -> tuple[Any, dict[str, Any]]:
    """(this rank's World, its load seconds, step seconds and memory)."""
    import torch

    from cheems.forward import forward_rewards
    from trainer.config import TrainConfig
    from trainer.loss import bt_loss
    from trainer.weights.sharding import load_sharded

    world, costs = join(setting)
    micro, length, steps = SIZES[setting.device]
    config = TrainConfig(model=setting.model, fsdp=True, bf16=True, gradient_checkpointing=True, progress=False,
                         micro_batch_size=micro, max_length=length)  # fmt: skip
    started = time.perf_counter()
    model, _ = load_sharded(config, world)
    if setting.cuda:
        torch.cuda.synchronize(world.device)
    load = time.perf_counter() - started
    loaded = int(torch.cuda.max_memory_reserved(world.device)) if setting.cuda else 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=setting.cuda)
    generator = torch.Generator().manual_seed(world.rank)
    sequences = torch.randint(0, model.config.vocab_size, (micro, length), generator=generator).tolist()
    pairs = [(i, i + 1) for i in range(0, micro - 1, 2)]
    times = []
    for _ in range(steps + 1):  # the first: warm-up
        started = time.perf_counter()
        with torch.autocast(world.device.type, dtype=torch.bfloat16, enabled=setting.cuda):
            rewards = forward_rewards(model, sequences, world.device)
        bt_loss(rewards.float(), pairs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if setting.cuda:
            torch.cuda.synchronize(world.device)
        times.append(time.perf_counter() - started)
    out = {"load_s": load, "step_s": statistics.median(times[1:]), "tokens": micro * length, **costs}
    if setting.cuda:
        out |= {
            "loaded_reserved": loaded,
            "peak_reserved": int(torch.cuda.max_memory_reserved(world.device)),
            "peak_allocated": int(torch.cuda.max_memory_allocated(world.device)),
            "outside": outside(world.device),
        }
    return world, {**out, "planned": planned(config, world.size)}


def planned(config: Any, world_size: int) -> int | None:
    """The memory plan's total a GPU for this run (None where it cannot make one)."""
    try:
        from trainer.memory.check import plan_run

        return int(plan_run(config, world_size).plan.total)
    except Exception:  # the plan's figure is a comparison, not the part's measurement
        return None


def measure(setting: Setting) -> dict[str, Cell] | None:
    """Run on every rank; rank 0's cells (None on the others)."""
    import torch.distributed as dist

    from trainer.distributed import gather_objects

    world, mine = rank_figures(setting)
    ranks = gather_objects(mine, world)
    dist.destroy_process_group()
    return cells(setting, ranks) if world.is_main else None


def cells(setting: Setting, ranks: list[dict[str, Any]]) -> dict[str, Cell]:
    """The rows from every rank's figures: the slowest rank's times, the largest rank's memory."""
    world, dtype = len(ranks), "bf16 parameters" if setting.cuda else "float32 (the CPU)"
    load, step = max(r["load_s"] for r in ranks), max(r["step_s"] for r in ranks)
    tokens = ranks[0]["tokens"]
    figures = {"ranks": ranks}
    if not setting.cuda:
        where = f"world of {world}, gloo, {dtype}"
        return {
            "fsdp_load": Cell(f"{load:.2f} s ({where})", figures),
            "fsdp_step": Cell(f"{step:.3f} s a step of {tokens:,} tokens a rank ({where})", figures),
            "fixed_costs": missing("CUDA only (the CPU has no CUDA context, NCCL or caching allocator)"),
        }
    peak = max(r["peak_reserved"] + r["outside"] for r in ranks)
    plan = max((r["planned"] or 0) for r in ranks)
    where = f"world of {world}, NCCL, {dtype}"
    context, nccl = max(r["context"] for r in ranks), max(r["nccl"] for r in ranks)
    fragmentation = max(r["peak_reserved"] / r["peak_allocated"] - 1 for r in ranks if r["peak_allocated"])
    return {
        "fsdp_load": Cell(f"{load:.2f} s, {gib(max(r['loaded_reserved'] for r in ranks))} reserved ({where})", figures),
        "fsdp_step": Cell(
            f"{step:.3f} s a step of {tokens:,} tokens a rank, peak {gib(peak)} on the card"
            + (f" (the plan: {gib(plan)})" if plan else "")
            + f" ({where})",
            figures,
        ),
        "fixed_costs": Cell(
            f"context {gib(context)} (plan 1.00), NCCL {gib(nccl)} (plan 1.00 when W > 1), "
            f"fragmentation {fragmentation:.1%} (plan 10%)",
            figures,
        ),
    }
