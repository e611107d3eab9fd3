"""Packed rows against unpacked ones per attention kernel: the measurements behind `cheems.packing.KERNELS`.

For each attention implementation and shape, one forward over a prompt's sequences unpacked (each alone,
right-padded in one batch; under FlexAttention end to end) and one over them packed (one row, with the
kernel's mask), medians of alternating rounds; printed as unshared time / shared time next to the ratio the
cost model (`Cost.of` with the kernel's line of `KERNELS`) predicts. A predicted ratio above 1 where the
measured one is below 1 is a plan that packs where it should not: the line to fix.

  RLHF-like         a 1,000-token prompt, 8 completions of 40 tokens
  CheemsBench-like  a 150-token prompt, 5 responses of 400 tokens

    python bench/attention_bench.py [--device cpu] [--attention sdpa eager flex_attention] [--train]
                                    [--rounds 5] [--hidden 256] [--layers 4] [--heads 4] [--kv-heads 2] ...

`--train` times forward + backward instead (FlexAttention trains on CUDA only). bf16 on CUDA: `--dtype auto`.
"""

from __future__ import annotations

import argparse
import functools
import random
from collections.abc import Sequence
from typing import Any

import torch
from model_options import add_model_options, describe_device, describe_shape, random_model, synchronize
from prefix_bench import alternate  # bench/ is on the path when a benchmark runs as a script

from cheems.forward import forward_rewards, packed_rewards
from cheems.packing import Cost, Row
from cheems.precision import resolve_dtype
from trainer.tiny import build_tokenizer

SHAPES = {"RLHF-like": (1000, 8, 40), "CheemsBench-like": (150, 5, 400)}  # prompt, responses, response tokens


def sequences_of(prompt: int, n: int, response: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(100, 30000) for _ in range(prompt)]
    return [shared + [rng.randrange(100, 30000) for _ in range(response)] for _ in range(n)]


def run(model: Any, sequences: list[list[int]], prefix: int, device: str, train: bool, dtype: torch.dtype) -> None:
    """One forward (and backward with `train`): packed in one row when `prefix` > 0, else each sequence alone."""
    autocast = torch.autocast(torch.device(device).type, dtype=dtype, enabled=dtype != torch.float32)
    with torch.set_grad_enabled(train), autocast:
        if prefix:
            rewards = packed_rewards(model, sequences, [Row(prefix, tuple(range(len(sequences))))], device)
        else:
            rewards = forward_rewards(model, sequences, device)
        if train:
            rewards.sum().backward()


def predicted(cost: Cost, sequences: list[list[int]], prefix: int) -> float:
    apart = sum(cost.alone(len(s)) for s in sequences)
    return apart / cost.packed(prefix, [len(s) - prefix for s in sequences])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attention", nargs="+", default=["sdpa", "eager", "flex_attention"])
    parser.add_argument("--train", action="store_true", help="forward + backward (default: forward, no_grad)")
    parser.add_argument("--rounds", type=int, default=5)
    add_model_options(parser)
    args = parser.parse_args(argv)
    dtype = resolve_dtype(args.dtype, args.device)
    tokenizer = build_tokenizer()
    print(f"{describe_device(args.device)}; {describe_shape(args)}; {'forward+backward' if args.train else 'forward'}")
    for attention in args.attention:
        model = random_model(args, tokenizer).to(args.device).train(args.train)
        model.set_attn_implementation(attention)
        for name, (prompt, n, response) in SHAPES.items():
            sequences = sequences_of(prompt, n, response)
            runs = {
                mode: functools.partial(run, model, sequences, prefix, args.device, args.train, dtype)
                for mode, prefix in (("unshared", 0), ("shared", prompt))
            }
            t = alternate(runs, args.rounds, functools.partial(synchronize, args.device), warm_ups=2)
            cost = Cost.of(model.config, attention, args.device)
            print(
                f"  {attention:<15} {name:<17} unshared {t['unshared'] * 1e3:7.1f} ms, shared {t['shared'] * 1e3:7.1f}"
                f" ms: measured {t['unshared'] / t['shared']:.2f}x, predicted {predicted(cost, sequences, prompt):.2f}x"
            )


if __name__ == "__main__":
    main()
