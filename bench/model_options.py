"""The benchmarks' reward model: its shape, device and dtype options, and the random-weight RM made from them.

A Qwen2-architecture RM over the real Qwen2 vocabulary with random weights (`trainer.tiny`), saved with
`cheems.model.save_model` so that the scorer loads it as it would a trained one. The defaults (hidden 256,
4 layers, 4 heads sharing 2 KV heads, intermediate 2 x hidden, float32 on the CPU) keep compute dominant and
runs short on two cores; on a GPU give Qwen2.5-0.5B's shape:

    python bench/scorer_bench.py --device cuda --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864

`--dtype auto` resolves as the scorer does (`cheems.precision`): bfloat16 on a CUDA device that has it,
float32 on the CPU.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path
from typing import Any

import torch
import transformers

from cheems.model import load_model, save_model
from cheems.precision import DTYPES, dtype_name, resolve_dtype
from trainer.tiny import build_model


def add_model_options(parser: argparse.ArgumentParser, dtype: bool = True) -> None:
    """--device, --dtype (unless `dtype` is False: a benchmark comparing several takes its own option) and the
    shape: --hidden --layers --heads --kv-heads --intermediate."""
    parser.add_argument("--device", default="cpu", help="torch device: cpu, cuda, cuda:1 ... (default cpu)")
    if dtype:
        parser.add_argument(
            "--dtype", default="auto", choices=DTYPES, help="auto = bfloat16 on CUDA, float32 on the CPU (default)"
        )
    parser.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--kv-heads", type=int, default=2, help="key/value heads (default 2)")
    parser.add_argument("--intermediate", type=int, default=None, help="MLP size (default 2 x hidden)")


def shape_of(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `trainer.tiny.build_model` the options give."""
    return {
        "hidden_size": args.hidden,
        "layers": args.layers,
        "heads": args.heads,
        "kv_heads": args.kv_heads,
        "intermediate": args.intermediate,
    }


def describe_shape(args: argparse.Namespace) -> str:
    intermediate = args.intermediate or 2 * args.hidden
    return (
        f"Qwen2 hidden {args.hidden}, {args.layers} layers, {args.heads} heads ({args.kv_heads} KV), "
        f"intermediate {intermediate}"
    )


def random_model(args: argparse.Namespace, tokenizer: Any, seed: int = 0) -> Any:
    """The RM of the options' shape, random weights, float32 on the CPU."""
    return build_model(tokenizer, seed=seed, **shape_of(args))


def save_random_model(args: argparse.Namespace, tokenizer: Any, out: Path) -> Path:
    """The RM of the options' shape saved as a checkpoint directory (what `cheems serve --model` takes)."""
    return save_model(random_model(args, tokenizer), tokenizer, out)


def load_on(directory: Path, dtype: str, device: str) -> tuple[Any, Any]:
    """(model in eval mode on `device` in `dtype` resolved as the scorer resolves it, tokenizer)."""
    model, tokenizer = load_model(directory, dtype=resolve_dtype(dtype, device))
    return model.to(device).eval(), tokenizer


def synchronize(device: str) -> None:
    """Wait for the device's queued work (a CUDA clock read before it measures the launch, not the run)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def describe_device(device: str) -> str:
    """The card's name (or the CPU's threads) and the software measured, for a benchmark's header."""
    if torch.device(device).type == "cuda":
        where = f"{torch.cuda.get_device_name(device)} ({device}, CUDA {torch.version.cuda})"
    else:
        where = f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"
    return (
        f"{where}; torch {torch.__version__}, transformers {transformers.__version__}, Python "
        f"{platform.python_version()}; float32 matmul precision {torch.get_float32_matmul_precision()}"
    )


def describe_dtype(name: str, device: str) -> str:
    """The name, and what it resolves to where that differs: "auto (bfloat16)"."""
    resolved = dtype_name(resolve_dtype(name, device))
    return name if name == resolved else f"{name} ({resolved})"
