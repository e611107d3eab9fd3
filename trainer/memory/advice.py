"""What would make a plan that does not fit fit: each change tried alone on the same arithmetic (`estimate`).

More GPUs (FSDP sharding over more of them, in whole nodes), activation checkpointing, cpu_offload (with the host
memory it then needs on each node), a smaller micro batch or token budget, and for LoRA on one process or DDP an
NF4 base (QLoRA, which never shards: no FSDP advice for it). Pure: no torch, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trainer.memory.count import ModelShape
from trainer.memory.estimate import GIB, PlanSetup, estimate

MAX_GPUS = 16384


@dataclass(frozen=True)
class Batch:
    """How the tokens per forward are set: micro_batch_size x max_length, or max_tokens when nonzero."""

    micro_batch_size: int
    max_length: int
    max_tokens: int = 0


def fixes(shape: ModelShape, setup: PlanSetup, batch: Batch, gpus_per_node: int = 1) -> list[str]:
    """One line per change that alone makes the plan fit; a line saying so when none does."""
    if setup.budget is None or estimate(shape, setup).fits:
        return []
    found = [
        line
        for line in (
            _more_gpus(shape, setup, gpus_per_node),
            _checkpointing(shape, setup),
            _offload(shape, setup, gpus_per_node),
            _smaller_batch(shape, setup, batch),
            _quantised(shape, setup),
        )
        if line
    ]
    if found:
        return found
    everything = setup.but(checkpointing=True, tokens=batch.max_length)
    if not setup.load_in_4bit:
        everything = everything.but(fsdp=True, cpu_offload=True)
    if setup.world_size > 1 and not setup.load_in_4bit and estimate(shape, everything).fits:
        return [
            "no one change fits; together they do: --set fsdp=true --set gradient_checkpointing=true "
            "--set cpu_offload=true --set micro_batch_size=1 --set max_tokens=0"
        ]
    least = estimate(shape, everything)
    if least.row("overhead") >= setup.budget:
        return [f"nothing: the fixed overhead alone ({least.row('overhead') / GIB:.1f} GiB) fills the GPU's budget"]
    how = "checkpointing" if setup.load_in_4bit else "checkpointing and offload"
    return [f"nothing fits this GPU: even one sequence with {how} needs more (lower max_length)"]


def _fits(shape: ModelShape, setup: PlanSetup) -> bool:
    return bool(estimate(shape, setup).fits)


def _more_gpus(shape: ModelShape, setup: PlanSetup, per_node: int) -> str:
    if setup.load_in_4bit:
        return ""  # QLoRA does not shard (FSDP over NF4 weights is refused)
    sharded = setup.but(fsdp=True)
    need = _first(range(setup.world_size + 1, MAX_GPUS + 1), lambda w: _fits(shape, sharded.but(world_size=w)))
    if not need:
        return ""
    nodes = -(-need // per_node)
    where = f" ({nodes} nodes of {per_node}: --nnodes {nodes})" if per_node > 1 else ""
    switch = "" if setup.fsdp else " with --set fsdp=true"
    return f"at least {need} GPUs{where}{switch}: FSDP shards the states over every GPU"


def _checkpointing(shape: ModelShape, setup: PlanSetup) -> str:
    if setup.checkpointing or not _fits(shape, setup.but(checkpointing=True)):
        return ""
    return "activation checkpointing: --set gradient_checkpointing=true"


def _offload(shape: ModelShape, setup: PlanSetup, per_node: int) -> str:
    if setup.world_size == 1 or setup.cpu_offload or setup.load_in_4bit:
        return ""
    offloaded = setup.but(fsdp=True, cpu_offload=True)
    if not _fits(shape, offloaded):
        return ""
    states = estimate(shape, setup.but(fsdp=True))
    host = sum(states.row(name) for name in ("parameters", "gradients", "optimizer")) * min(per_node, setup.world_size)
    switch = "" if setup.fsdp else "fsdp=true "
    return f"cpu_offload: --set {switch}cpu_offload=true (then about {host / GIB:,.0f} GiB of host memory a node)"


def _quantised(shape: ModelShape, setup: PlanSetup) -> str:
    if not setup.lora_rank or setup.load_in_4bit or setup.mode == "FSDP":
        return ""
    if not _fits(shape, setup.but(load_in_4bit=True)):
        return ""
    return "QLoRA, the frozen base in NF4: --set load_in_4bit=true (CUDA only, not with FSDP)"


def _smaller_batch(shape: ModelShape, setup: PlanSetup, batch: Batch) -> str:
    if batch.max_tokens:
        candidates = range(setup.tokens - 1, batch.max_length - 1, -1)
        tokens = _first(candidates, lambda t: _fits(shape, setup.but(tokens=t)))
        return f"a smaller token budget: --set max_tokens={tokens}" if tokens else ""
    sizes = range(batch.micro_batch_size - 1, 0, -1)
    micro = _first(sizes, lambda m: _fits(shape, setup.but(tokens=m * batch.max_length)))
    return f"a smaller micro batch: --set micro_batch_size={micro}" if micro else ""


def _first(values: range, ok: Callable[[int], bool]) -> int:
    """The first value of `values` that is ok, by bisection (ok is monotone: false..., then true...); 0 if none."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(values[mid]):
            hi = mid
        else:
            lo = mid + 1
    return values[lo] if lo < len(values) else 0
