"""The trainer at the speed of the device: `trainer.train` as `cheems train` runs it, prefix sharing off and on,
a fixed micro-batch against token budgets, and the bare model's forward + backward on the same batches.

For each shape (RLHF-like: a ~1,000-token system prompt, 8 completions of ~40 tokens; CheemsBench-like: a
~100-token prompt, 5 responses of ~400), `--prompts` prompts are written as a CheemsBench file and trained for
one epoch (world of one: the device this process sees) under each setting. Printed per setting: the steady
seconds a step (the first step, with its warm-up, left out), sequence tokens a second (what the trainer
reports: each response's full length, whether or not its prompt was shared), model FLOP utilisation
(6 x non-embedding parameters x those tokens a second / `--peak-tflops`), start-up to the first step, and
the ratio against the bare model: `forward_rewards` + the loss's backward over the same step's forwards,
unshared, in a loop of its own (no sampler, no optimizer, no logging), measured in the same run.

    python bench/train_bench.py                                  # CPU, the small default model
    python bench/train_bench.py --device cuda --hidden 896 --layers 24 --heads 14 --kv-heads 2 \\
        --intermediate 4864 --prompts 256 --micro-batch 10 --budgets 8192,20480
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from gpu_bench import non_embedding_parameters
from model_options import add_model_options, describe_device, describe_shape, save_random_model, synchronize
from prefix_bench import SHAPES, requests
from train_run import steady

from cheems.forward import forward_rewards
from cheems.model import load_model
from cheems.precision import resolve_dtype
from trainer.config import TrainConfig
from trainer.data import read_groups, tokenize_groups
from trainer.loss import bt_loss
from trainer.tiny import build_tokenizer
from trainer.train import train


def write_bench(path: Path, shape: tuple[int, int, int, int], prompts: int) -> Path:
    """`prompts` ranked prompts of `shape` in the official CheemsBench layout (ranks random, ties allowed)."""
    rng = random.Random(7)
    with path.open("w", encoding="utf-8") as f:
        for n, (system, question, responses) in enumerate(requests(shape, prompts, seed=3)):
            ids = [f"r{i}" for i in range(len(responses))]
            record: dict[str, Any] = {
                "input": f"{n}. {question}",
                "responses": [{"id": i, "content": t} for i, t in zip(ids, responses, strict=True)],
                "rank": {i: rng.randint(1, 3) for i in ids},
                "category": ["bench"],
            }
            if system:
                record["sys_prompt"] = system
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def settings(micro_batch: int, budgets: Sequence[int]) -> list[tuple[str, dict[str, Any]]]:
    """(label, TrainConfig changes): sharing off and on at the fixed micro-batch, then sharing on per budget."""
    out: list[tuple[str, dict[str, Any]]] = [
        (f"micro batch {micro_batch}, sharing off", {"prefix_sharing": False}),
        (f"micro batch {micro_batch}, sharing on", {"prefix_sharing": True}),
    ]
    for tokens in budgets:
        out.append((f"max_tokens {tokens}, sharing on", {"prefix_sharing": True, "max_tokens": tokens}))
    return out


def run_trainer(
    model_dir: Path, data: Path, out: Path, args: argparse.Namespace, changes: dict[str, Any]
) -> list[dict[str, Any]]:
    """One epoch of `trainer.train`; its metrics records."""
    budget = changes.get("max_tokens", 0)
    config = TrainConfig(
        model=str(model_dir), train_files=[str(data)], out_dir=str(out), max_length=args.max_length,
        micro_batch_size=args.budget_cap if budget else args.micro_batch,
        grad_accum_steps=1 if budget else args.step // args.micro_batch, global_batch_size=args.step,
        epochs=1, lr=1e-5, bf16=args.dtype != "float32", progress=False, log_every=args.log_every, seed=0,
        prefix_sharing=changes["prefix_sharing"], max_tokens=budget,
    )  # fmt: skip
    train(config)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def bare(model: Any, batches: list[list[list[int]]], device: str, dtype: torch.dtype, rounds: int = 1) -> float:
    """Sequence tokens a second of the bare model: forward + backward of each batch, unshared, no optimizer."""
    autocast = torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype != torch.float32)
    times = []
    for _ in range(rounds):
        synchronize(device)
        start = time.perf_counter()
        for sequences in batches:
            with autocast:
                rewards = forward_rewards(model, sequences, device)
            pairs = [(i, i + 1) for i in range(0, len(sequences) - 1, 2)]
            bt_loss(rewards, pairs).loss.backward()
        synchronize(device)
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return sum(len(s) for b in batches for s in b) / statistics.median(times)


def sample_forwards(data: Path, tokenizer: Any, args: argparse.Namespace, count: int) -> list[list[list[int]]]:
    """The bare model's batches: `count` batches of `--micro-batch` sequences, the trainer's own, in file order."""
    dataset = tokenize_groups(read_groups(data), tokenizer, args.max_length)
    sequences = [list(e.input_ids) for e in dataset.examples]
    size = args.micro_batch
    return [sequences[i : i + size] for i in range(0, min(len(sequences), count * size), size)]


def mfu(parameters: int, tokens_per_second: float, args: argparse.Namespace) -> float:
    """Training FLOPs (6 per parameter per token: forward and backward) a second, as a share of the peak."""
    return 6 * parameters * tokens_per_second / (args.peak_tflops * 1e12)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    tokenizer = build_tokenizer()
    dtype = resolve_dtype(args.dtype, args.device)
    if torch.device(args.device).type == "cuda" and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: this torch sees no CUDA device")
    print(f"{describe_device(args.device)}; dtype {dtype} (the trainer autocasts to bf16 on CUDA when it may)")
    print(f"model: {describe_shape(args)}; {args.prompts} prompts a shape, one epoch a setting")
    with tempfile.TemporaryDirectory() as root:
        model_dir = save_random_model(args, tokenizer, Path(root) / "rm")
        model, _ = load_model(model_dir)
        model = model.to(args.device).train()
        parameters = non_embedding_parameters(model)
        for name in args.shapes:
            data = write_bench(Path(root) / f"{name}.jsonl", SHAPES[name], args.prompts)
            reference = bare(model, sample_forwards(data, tokenizer, args, 4), args.device, dtype, rounds=3)
            print(
                f"\n{name}: {args.step} responses a step; the bare model's forward + backward, {args.micro_batch} "
                f"sequences a batch, unshared: {reference:,.0f} tokens/s ({mfu(parameters, reference, args):.1%} MFU)"
            )
            heads = ("s/step", 8), ("tokens/s", 10), ("MFU", 6), ("start-up", 9), ("vs off", 7), ("vs bare", 8)
            print(f"  {'setting':<34} " + " ".join(f"{h:>{w}}" for h, w in heads))
            base_rate = None
            for n, (label, changes) in enumerate(settings(args.micro_batch, args.budgets)):
                records = run_trainer(model_dir, data, Path(root) / f"{name}-{n}", args, changes)
                per_step, rate = steady(records)
                base_rate = base_rate or rate
                startup = records[0].get("startup", {}).get("total", float("nan"))
                print(
                    f"  {label:<34} {per_step:>8.3f} {rate:>10,.0f} {mfu(parameters, rate, args):>6.1%} "
                    f"{startup:>8.1f}s {rate / base_rate:>6.2f}x {rate / reference:>7.2f}x"
                )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(parser)
    parser.add_argument("--prompts", type=int, default=16, help="prompts a shape (default 16)")
    parser.add_argument("--micro-batch", type=int, default=10, help="responses a forward without a budget (default 10)")
    parser.add_argument("--step", type=int, default=40, help="responses an optimizer step, every setting (default 40)")
    parser.add_argument(
        "--budgets", type=lambda v: [int(x) for x in v.split(",") if x], default=[4096, 8192],
        help="max_tokens settings, comma-separated (default 4096,8192)",
    )  # fmt: skip
    parser.add_argument("--budget-cap", type=int, default=64, help="micro_batch_size under a budget (default 64)")
    parser.add_argument("--max-length", type=int, default=1536, help="the trainer's max_length (default 1536)")
    parser.add_argument("--log-every", type=int, default=4, help="steps between the trainer's reads (default 4)")
    parser.add_argument("--peak-tflops", type=float, default=790.0, help="the card's dense bf16 peak (default 790)")
    parser.add_argument("--shapes", type=lambda v: v.split(","), default=list(SHAPES), help="default both")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.shapes) - set(SHAPES)):
        parser.error(f"unknown shape {', '.join(unknown)}: choose from {', '.join(SHAPES)}")
    if args.step % args.micro_batch:
        parser.error(f"--step {args.step} must be a multiple of --micro-batch {args.micro_batch}")
    if any(b < args.max_length for b in args.budgets):
        parser.error(f"every budget must be at least --max-length {args.max_length}")
    return args


if __name__ == "__main__":
    main()
