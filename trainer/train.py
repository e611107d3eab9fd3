"""Train a Bradley-Terry reward model; the entry point torchrun and `cheems train` run.

    torchrun --nproc_per_node=2 -m trainer.train --recipe tiny-cpu --set epochs=2
    python -m trainer.train --recipe tiny-cpu            # one process

Each optimizer step runs `grad_accum_steps` forwards; each forward takes one sampler batch of
micro_batch_size x world_size responses, split across ranks, and the loss sees every pair of that
batch (rewards gathered across ranks). Writes OUT/metrics.jsonl, checkpoints, and OUT/model.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from cheems.errors import ConfigError
from cheems.forward import attention_of, can_share, cost_of, forward_rewards, shared_rewards
from cheems.hub import resolve_model
from cheems.model import load_model
from cheems.packing import plan_rows
from evaluator.evaluate import EvalOptions
from evaluator.metrics import EvalResult
from evaluator.report import to_json
from trainer.adapters import qlora
from trainer.adapters.export import export_lora
from trainer.adapters.lora import attach
from trainer.config import TrainConfig
from trainer.data import Dataset, LengthPolicy, LengthStats, PromptGroup, read_groups, tokenize_groups
from trainer.data.cache import CacheSpec, cached_dataset, default_root, files_digest
from trainer.distributed import World, gather_with_grad, rank_from_env, setup, teardown
from trainer.evaluation import evaluate_model
from trainer.loss import LossParts, bt_loss
from trainer.memory.check import check_memory
from trainer.meter import Meter
from trainer.microbatch import Budget, Forward, Measure, layout_tokens, shared_prefixes, split_step
from trainer.recipes import recipe
from trainer.report import Progress, Startup, configure_logging, describe_data, report_data, report_eval, summary
from trainer.sampler import SamplerConfig, epoch_batches, pairs_in_batch
from trainer.steplog import StepLog, Totals
from trainer.tracking.session import KEY, check_installed, start_tracking
from trainer.weights import checkpoint
from trainer.weights.export import export_model
from trainer.weights.sharding import load_sharded, loading, prepare

log = logging.getLogger(__name__)


@dataclass
class TrainResult:
    steps: int
    loss: float
    eval: EvalResult | None
    model_dir: Path | None
    stats: LengthStats


@dataclass
class Plan:
    sampler_batch: int  # responses a sampler batch holds across ranks: one forward, or a whole step under a budget
    total_steps: int  # optimizer steps of the whole run
    budget: Budget | None = None  # with max_tokens: each step's batch is cut into forwards that fit it

    @property
    def signature(self) -> dict[str, Any]:
        """What a checkpoint's batch position means; a resume must see the same (`check_resume`)."""
        return {"sampler_batch": self.sampler_batch, "per_step": "forwards" if self.budget is None else "step"}


def cosine_with_warmup(total: int, warmup: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def make_plan(config: TrainConfig, data: Dataset, world: World) -> Plan:
    if config.max_tokens:
        size = config.step_responses(world.size)
        steps_per_epoch = -(-len(data.examples) // size)
        budget = Budget(config.micro_batch_size, config.max_tokens)
        return Plan(size, max(1, math.ceil(steps_per_epoch * config.epochs)), budget)
    size = config.forward_batch(world.size)
    batches = -(-len(data.examples) // size)  # every batch is full but the last
    steps_per_epoch = -(-batches // config.grad_accum_steps)
    return Plan(size, max(1, math.ceil(steps_per_epoch * config.epochs)))


def check_resume(saved: dict[str, Any], plan: Plan, where: Path) -> None:
    """Refuse a checkpoint whose batch position counts other batches (a token budget's size may change freely:
    its position counts steps of the same responses)."""
    signature = saved.get("batching")
    if signature is not None and signature != plan.signature:
        raise ConfigError(
            f"{where} was saved with {signature['sampler_batch']} responses a batch ({signature['per_step']} "
            f"a position), this run has {plan.sampler_batch} ({plan.signature['per_step']}): resume with the same "
            "micro_batch_size, grad_accum_steps, global_batch_size and world size (max_tokens on or off), "
            "or train into a new out_dir"
        )


def load_data(config: TrainConfig, tokenizer: Any, world: World | None = None) -> Dataset:
    """The run's token arrays: from the token cache (built by the first process of the node that asks, mapped by
    every other rank and later run), or tokenized in memory when `token_cache` is "off"."""
    layout = config.train_format or None
    policy = LengthPolicy(config.length_policy)
    show = config.progress and sys.stderr.isatty() and (world is None or world.local_rank == 0)

    def read() -> list[PromptGroup]:
        return [g for path in config.train_files for g in read_groups(path, layout)]

    if config.token_cache == "off":
        data = tokenize_groups(read(), tokenizer, config.max_length, policy, progress=show)
    else:
        root = Path(config.token_cache).expanduser() if config.token_cache else default_root()
        spec = CacheSpec(tuple(config.train_files), layout, config.max_length, policy)
        data = cached_dataset(root, spec, tokenizer, read, show)
    if not data.examples:
        counts = describe_data(data, config.max_length)
        raise ValueError(f"no trainable prompt with a preference pair in {config.train_files}: {counts}")
    return data


def load_for_training(config: TrainConfig, world: World) -> tuple[Any, Any, Any]:
    """(the model the loop runs: DDP-wrapped, FSDP-sharded or plain; the transformers model inside; its tokenizer).
    Under FSDP each rank builds the model on the meta device and reads only its shards (`trainer.weights.sharding`);
    otherwise every rank loads the whole model (QLoRA: its base in 4-bit) and moves it to its device; then
    adapters (lora_rank: `trainer.adapters.lora`)."""
    if sharded(config, world):
        base, tokenizer = load_sharded(config, world)
        return base, base, tokenizer
    if config.load_in_4bit:
        base, tokenizer = qlora.load_quantized(config, world)
    else:
        base, tokenizer = load_model(config.model, **loading(config, world))
        base.to(world.device)
    if config.adapters:
        attach(base, config)
    return wrap(base, config, world), base, tokenizer


def sharded(config: TrainConfig, world: World) -> bool:
    """FSDP: parameters, checkpoints and the export sharded across ranks (fsdp=True under torchrun)."""
    return config.fsdp and world.distributed


def wrap(base: Any, config: TrainConfig, world: World) -> Any:
    """A whole model made ready to train: checkpointing and compilation, then DDP across ranks."""
    prepare(base, config)
    if not world.distributed:
        return base
    return DistributedDataParallel(base, device_ids=[world.local_rank] if world.device.type == "cuda" else None)


def make_optimizer(model: Any, config: TrainConfig, world: World) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (with adapters: theirs and the head's); fused (one kernel for every
    parameter) on CUDA."""
    fused = world.device.type == "cuda" and not config.cpu_offload  # offloaded: the step runs on the CPU
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay, fused=fused)


def sync_gradients(model: Any, sync: bool) -> contextlib.AbstractContextManager[Any]:
    """Skip the gradient all-reduce on all but the last accumulation forward."""
    if isinstance(model, DistributedDataParallel) and not sync:
        return model.no_sync()
    if hasattr(model, "set_requires_gradient_sync"):  # FSDP2
        model.set_requires_gradient_sync(sync)
    return contextlib.nullcontext()


def forward_loss(
    model: Any, data: Dataset, forward: Forward, group_of: list[int], config: TrainConfig, world: World
) -> tuple[LossParts, torch.Tensor, int]:
    """Loss parts of one forward (every rank's slot), a zero that keeps this rank's forward in the graph, and
    this rank's tokens."""
    local = forward.slots[world.rank]
    everything = forward.ids
    todo = local or everything[:1]  # a rank with no share still runs the forward (DDP/FSDP need it)
    sequences = [data.examples.tokens(x) for x in todo]
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=config.bf16 and world.device.type == "cuda")
    with autocast:
        out = (shared_rewards if config.prefix_sharing else forward_rewards)(model, sequences, world.device)
    gathered = gather_with_grad(out[: len(local)], forward.counts, world)
    parts = bt_loss(gathered, pairs_in_batch(everything, data.pairs, group_of), config.reg_coef, config.margin)
    return parts, out.sum() * 0.0, sum(len(s) for s in sequences) if local else 0


def budget_measure(model: Any, data: Dataset, group_of: list[int], share: bool, world: World) -> Measure:
    """Tokens a forward of some examples computes, as `shared_rewards`/`forward_rewards` will lay them out: a prompt
    in one packed row where the planner packs its responses (decided once per prompt, priced for the model's
    attention kernel on this device), rows padded to the longest except under FlexAttention (end to end)."""
    examples = data.examples
    packs = None
    if share and can_share(model):
        cost = cost_of(model, world.device)
        packs = [any(len(r.members) > 1 for r in plan_rows([examples.tokens(x) for x in g], cost)) for g in data.groups]
    lengths = examples.lengths.tolist()
    prefixes = shared_prefixes(examples.sequences, data.groups)
    return layout_tokens(lengths, group_of, prefixes, packs, padded=attention_of(model) != "flex_attention")


def steps_from(
    data: Dataset,
    group_of: list[int],
    plan: Plan,
    config: TrainConfig,
    world: World,
    model: Any,
    position: dict[str, Any],
) -> Iterator[tuple[int, int, list[Forward]]]:
    """(epoch, next batch index, the step's forwards) from a checkpoint's `position` on, epoch after epoch."""
    epoch, start = position["epoch"], position["batch"]
    sampler = SamplerConfig(plan.sampler_batch, config.seed)
    per_step = 1 if plan.budget else config.grad_accum_steps
    if plan.budget is not None:
        measure = budget_measure(model, data, group_of, config.prefix_sharing, world)
    while True:
        batches = epoch_batches(data.groups, data.pairs, sampler, epoch)
        for i in range(start, len(batches), per_step):
            if plan.budget is not None:
                forwards = split_step(batches[i], group_of, world.size, plan.budget, measure)
            else:
                forwards = [Forward.even(b, world.size) for b in batches[i : i + per_step]]
            yield epoch, i + per_step, forwards
        epoch, start = epoch + 1, 0


def train(config: TrainConfig) -> TrainResult:
    world = setup()
    try:
        return _train(config, world)
    finally:
        teardown()


def _train(config: TrainConfig, world: World) -> TrainResult:
    startup = Startup()
    qlora.check(config, world.device)  # QLoRA where it cannot run is refused before anything loads
    torch.manual_seed(config.seed)
    memory = check_memory(config, world.size, world.device)  # a run that cannot fit the GPU is refused before loading
    check_installed(config.report_to)  # and one whose report_to names a package not installed here
    # a Hub id becomes its snapshot's directory (`cheems train` resolved it already, once per node)
    config = dataclasses.replace(config, model=str(resolve_model(config.model)))
    model, base, tokenizer = load_for_training(config, world)
    startup.mark("model")
    data = load_data(config, tokenizer, world)
    startup.mark("data")
    plan = make_plan(config, data, world)
    optimizer = make_optimizer(model, config, world)
    warmup = int(plan.total_steps * config.warmup_ratio)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine_with_warmup(plan.total_steps, warmup))
    out = Path(config.out_dir)
    position: dict[str, Any] = {"step": 0, "epoch": 0, "batch": 0}
    if config.resume and (last := checkpoint.latest(out)) is not None:
        position = checkpoint.load(last, model, optimizer, scheduler, sharded(config, world))
        check_resume(position, plan, last)
        log.info("resumed from %s", last)
    if world.is_main:
        out.mkdir(parents=True, exist_ok=True)
        report_data(data, config.max_length)
    metrics_log = out / "metrics.jsonl"
    step, loss_value, result, interrupted = position["step"], float("nan"), None, False
    group_of = data.group_of
    stream = steps_from(data, group_of, plan, config, world, base, position)
    steps = StepLog(meter=Meter.for_run(base, world.device, config.bf16, memory.plan.total if memory else None))
    progress = Progress(plan.total_steps, step, world.is_main and config.progress, config.log_every)
    with progress, start_tracking(config, world, step) as tracking:  # rank 0 reports the records it writes
        while step < plan.total_steps and not interrupted:
            epoch, next_batch, forwards = next(stream)
            totals = Totals()
            for k, forward in enumerate(forwards):
                with sync_gradients(model, sync=k == len(forwards) - 1):
                    parts, keep_graph, tokens = forward_loss(model, data, forward, group_of, config, world)
                    ((parts.loss + keep_graph) / len(forwards)).backward()
                totals.add(parts, 1 / len(forwards), tokens, len(forward.ids))
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            lr = float(scheduler.get_last_lr()[0])
            optimizer.zero_grad(set_to_none=True)
            step += 1
            # total_steps: the training service reports progress as step/total_steps
            steps.add(totals.record(step=step, total_steps=plan.total_steps, epoch=epoch, lr=lr, grad_norm=grad_norm))
            done = step == plan.total_steps
            evaluate = bool(config.eval_files) and (done or bool(config.eval_every and step % config.eval_every == 0))
            interrupted = bool(config.stop_after) and step >= config.stop_after and not done
            save = done or interrupted or bool(config.save_every and step % config.save_every == 0)
            if not (evaluate or save or progress.due(step) or startup.first_step is None):
                progress.update(step, epoch, None, lr)
                continue
            records = steps.flush()  # the one wait for the device since the last flush
            if startup.first_step is None:
                startup.mark("first_step")
                records[0]["startup"] = startup.seconds()
                records[0][KEY] = tracking.ids  # the training service keeps them with the training
            loss_value = float(records[-1]["loss"])
            progress.update(step, epoch, loss_value, lr)
            if evaluate:
                options = EvalOptions(ece_bins=config.eval_ece_bins)
                result = evaluate_model(
                    base, tokenizer, config.eval_files, world, config.max_length, options, config.prefix_sharing
                )
                records[-1]["eval"] = to_json(result)
                if world.is_main:
                    report_eval(step, result)
            if world.is_main:
                with metrics_log.open("a", encoding="utf-8") as f:
                    f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
                tracking.log(records)
            if save:
                position = {"step": step, "epoch": epoch, "batch": next_batch, "batching": plan.signature}
                saved = (model, base, tokenizer, optimizer, scheduler, position, world, sharded(config, world))
                checkpoint.save(checkpoint.checkpoint_dir(out, step), *saved)
    model_dir = None if interrupted else export_final(config, base, tokenizer, data, result, step, world, tracking.ids)
    if world.is_main:
        overall = result.overall if result else None
        resume = checkpoint.checkpoint_dir(out, step)
        closing = summary(describe_data(data, config.max_length), step, loss_value, overall, model_dir, resume)
        log.info("%s\n  %s", closing, startup.describe())
    return TrainResult(step, loss_value, result, model_dir, data.stats)


def export_final(
    config: TrainConfig,
    base: Any,
    tokenizer: Any,
    data: Dataset,
    result: EvalResult | None,
    steps: int,
    world: World,
    tracking: dict[str, str] | None = None,
) -> Path | None:
    """OUT/model: the self-describing HF sequence-classification directory with training metadata, in
    safetensors shards of at most `export_shard_bytes` gathered tensor by tensor (`trainer.weights.export`)."""
    metadata = None
    if world.is_main:
        metadata = {
            "data_sha256": files_digest(config.train_files),
            "config": config.to_dict(),
            "learning_rate": config.learning_rate,  # lr as the run resolved it (0 = the mode's default)
            "steps": steps,
            "length_stats": vars(data.stats),
            "final_eval": to_json(result) if result else None,
            "tracking": tracking or {},  # the runs that reported its training (trainer.tracking)
        }
    out = Path(config.out_dir)
    if config.adapters:  # the adapters merged in, and the adapter itself in OUT/adapter (trainer.adapters.export)
        return export_lora(base, tokenizer, out, metadata, world, config.export_shard_bytes, config.model)
    return export_model(base, tokenizer, out / "model", metadata, world, config.export_shard_bytes)


def parse_args(argv: list[str] | None = None) -> tuple[TrainConfig, bool]:
    """The run's config and whether to log debug messages (`cheems -v train` passes --verbose)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="tiny-cpu")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--verbose", "-v", action="store_true", help="log debug messages on every rank")
    args = parser.parse_args(argv)
    return recipe(args.recipe).with_overrides(args.overrides), args.verbose


def main(argv: list[str] | None = None) -> None:
    """A training process, in `cheems train` or under torchrun: rank 0 narrates, the others only warn."""
    config, verbose = parse_args(argv)
    configure_logging(rank_from_env() if "RANK" in os.environ else None, verbose)  # torchrun's rank, shown
    train(config)


if __name__ == "__main__":
    # torchrun runs this file as `__main__`; run the imported module instead, so that there is one
    # copy of it and its log lines are named trainer.train in both launch paths.
    from trainer.train import main as run

    run()
