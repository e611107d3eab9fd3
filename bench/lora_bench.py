"""LoRA against full fine-tuning on CheemsBench (issue 44): the same data, model and seed, each run in a process of its
own, evaluated on the held-out bench; Overall, accuracy and exact match, peak memory and seconds a step for both,
and the LoRA run's ratios against the full run's, measured in the same run.

Both start from the same checkpoint (the tiny Qwen2 RM of `cheems init-model`, random weights, built here unless
`--model` names one), train on `--train` (default the bundled sample's open subset) with the `tiny-cpu` recipe's
settings and are evaluated on `--eval` (default the sample's human subset, held out). The full run takes the
recipe's learning rate, the LoRA run the trainer's default for adapters (`lr=0`: `trainer.config.LORA_LR`) unless
`--lora-lr` is given. Each run trains in `bench/train_run.py` (a process's peak is that run's alone: on the CPU the
peak resident set, on CUDA the caching allocator's peak reserved bytes).

    python bench/lora_bench.py [--rank 16] [--epochs 20] [--lora-lr LR] [--full-lr LR] [--train F] [--eval F]
        [--model DIR] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from train_run import in_child

from trainer.recipes import tiny_cpu

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 3600.0  # seconds a run may take


def run_config(args: argparse.Namespace, model: Path, out: Path, lora: bool) -> dict[str, Any]:
    """TrainConfig's fields of one side: the recipe's, on the given data, evaluated at the end only."""
    recipe = tiny_cpu()
    lr = (args.lora_lr if lora else args.full_lr) or (0.0 if lora else recipe.lr)
    return {
        "model": str(model),
        "train_files": [str(args.train)],
        "eval_files": [str(args.eval)],
        "out_dir": str(out),
        "max_length": recipe.max_length,
        "micro_batch_size": recipe.micro_batch_size,
        "grad_accum_steps": recipe.grad_accum_steps,
        "epochs": args.epochs or recipe.epochs,
        "lr": lr,
        "warmup_ratio": recipe.warmup_ratio,
        "reg_coef": recipe.reg_coef,
        "bf16": True,
        "seed": args.seed,
        "lora_rank": args.rank if lora else 0,
        "progress": False,
        "report_to": [],
        "token_cache": "off",
    }


def row(name: str, figures: dict[str, Any], base: dict[str, Any] | None) -> list[str]:
    """A table row: Overall, each subset's Acc. and Exact., peak memory and s/step (with ratios against `base`)."""
    cells = [name, f"{figures['overall']:.4f}"]
    for subset in figures["subsets"].values():
        cells += [f"{subset['accuracy']:.4f}", f"{subset['exact_match']:.4f}"]
    memory, seconds = figures["peak_bytes"], figures["seconds_per_step"]
    if base is None:
        return [*cells, f"{memory / 2**20:,.0f} MiB", f"{seconds:.3f} s"]
    return [
        *cells,
        f"{memory / 2**20:,.0f} MiB ({memory / base['peak_bytes']:.2f}x)",
        f"{seconds:.3f} s ({seconds / base['seconds_per_step']:.2f}x)",
    ]


def table(results: dict[str, dict[str, Any]], rank: int) -> str:
    full, lora = results["full"], results["lora"]
    subsets = list(full["subsets"])
    head = ["run", "Overall", *[f"{s} {m}" for s in subsets for m in ("Acc.", "Exact.")], "peak memory", "s/step"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines.append("| " + " | ".join(row(f"full fine-tuning (lr {full['lr']:g})", full, None)) + " |")
    lines.append("| " + " | ".join(row(f"LoRA r{rank} (lr {lora['lr']:g})", lora, full)) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lora-bench-") as tmp:
        folder = args.keep or Path(tmp)
        model = args.model or build_model(folder / "model")
        results = {}
        for name in ("full", "lora"):
            config = run_config(args, model, folder / name, name == "lora")
            print(f"{name}: training ({config['epochs']:g} epochs, lr {config['lr'] or 'the adapters default'})")
            figures = in_child(config, folder / f"{name}-run", TIMEOUT)
            results[name] = {**figures, "lr": config["lr"] or lora_default()}
    print(f"\nmodel: {model}; train {args.train}, evaluated on {args.eval}; seed {args.seed}\n")
    print(table(results, args.rank))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, **results}, indent=2))


def lora_default() -> float:
    from trainer.config import LORA_LR

    return LORA_LR


def build_model(out: Path) -> Path:
    from trainer.tiny import init_tiny_model

    return init_tiny_model(out)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (default 16)")
    parser.add_argument("--epochs", type=float, default=0.0, help="default: the tiny-cpu recipe's (20)")
    parser.add_argument("--lora-lr", type=float, default=0.0, help="default: the trainer's default for adapters")
    parser.add_argument("--full-lr", type=float, default=0.0, help="default: the tiny-cpu recipe's")
    parser.add_argument("--seed", type=int, default=0, help="both runs' seed (default 0)")
    parser.add_argument("--train", type=Path, default=ROOT / "data/sample/open.jsonl")
    parser.add_argument("--eval", type=Path, default=ROOT / "data/sample/human.jsonl", help="held-out CheemsBench")
    parser.add_argument("--model", type=Path, help="a checkpoint directory (default: the tiny RM, built)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    args = parser.parse_args(argv)
    if args.rank < 1:
        parser.error(f"--rank must be >= 1, got {args.rank}")
    return args


if __name__ == "__main__":
    main()
