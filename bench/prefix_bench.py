"""Prefix sharing: each prompt computed once, against every response carrying its own copy.

Two shapes (tokens counted with the real Qwen2 vocabulary and our chat template):
  RLHF-like        a ~1,000-token system prompt + question, 8 completions of ~40 tokens
  CheemsBench-like a ~100-token prompt, 5 responses of ~400 tokens
on a Qwen2-architecture RM sized so compute dominates on CPU (hidden 256, 4 layers by default; device, dtype
and shape are options: `bench/model_options.py`).

Sections, each printing the ratio unshared time / shared time (medians of alternating rounds, both
measured in this run):
  score  the scorer end to end: gRPC Score calls (one at a time) to a `cheems serve`-equivalent
         server on the torch backend, `--prefix-sharing off` vs `on`
  train  one training step (forward, Bradley-Terry loss with the Gaussian prior, backward, AdamW step)
         over a batch of 2 prompts with all their responses, `prefix_sharing` off vs on; float32 weights,
         a lower `--dtype` by autocast, as the trainer does on a GPU

    python bench/prefix_bench.py [score] [train] [--rounds 7] [--device cpu] [--dtype auto] [--hidden 256]
                                 [--layers 4] [--heads 4] [--kv-heads 2] [--intermediate 512]
    python bench/prefix_bench.py --device cuda --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from model_options import add_model_options, describe_device, describe_dtype, describe_shape, random_model, synchronize
from scorer_bench import text  # bench/ is on the path when a benchmark runs as a script

from cheems.chat import Conversation, encode_many
from cheems.forward import forward_rewards, shared_rewards
from cheems.model import save_model
from cheems.precision import resolve_dtype
from trainer.loss import bt_loss
from trainer.tiny import build_tokenizer

SHAPES = {  # name: (system prompt chars, question chars, responses, response chars)
    "RLHF-like": (1040, 40, 8, 40),
    "CheemsBench-like": (0, 100, 5, 400),
}


def requests(shape: tuple[int, int, int, int], count: int, seed: int = 0) -> list[tuple[str, str, list[str]]]:
    """(system prompt, question, responses) per request; about one token per character."""
    system, question, n, response = shape
    rng = random.Random(seed)
    return [
        (
            text(rng, system),
            text(rng, question),
            [text(rng, rng.randint(response * 9 // 10, response * 11 // 10)) for _ in range(n)],
        )
        for _ in range(count)
    ]


def token_counts(tokenizer: Any, request: tuple[str, str, list[str]]) -> tuple[int, int]:
    """(tokens of the rendered prompt shared by all responses, mean tokens of a whole sequence)."""
    system, question, responses = request
    ids = [e.input_ids for e in encode_many(tokenizer, [Conversation(question, r, system or None) for r in responses])]
    common = min(next((k for k, (a, b) in enumerate(zip(ids[0], s, strict=False)) if a != b), len(s)) for s in ids[1:])
    return common, round(statistics.mean(len(s) for s in ids))


def alternate(
    runs: Mapping[str, Callable[[], object]], rounds: int, sync: Callable[[], object] = lambda: None, warm_ups: int = 1
) -> dict[str, float]:
    """Median seconds of each callable, measured in alternating rounds after `warm_ups` calls each; `sync` runs
    before each clock read (a CUDA device's synchronize: the clock then measures the work, not its launch)."""
    for call in runs.values():
        for _ in range(warm_ups):
            call()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, call in runs.items():
            sync()
            started = time.perf_counter()
            call()
            sync()
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def score_section(args: argparse.Namespace, model_dir: Path, tokenizer: Any) -> None:
    from services.scorer.client import RewardClient
    from services.scorer.config import ScorerConfig
    from services.scorer.runtime import ScorerServer

    print(f"score: gRPC Score calls, one at a time, torch backend on {args.device}, dtype {args.dtype}")
    for name, shape in SHAPES.items():
        work = requests(shape, 4)
        prefix, length = token_counts(tokenizer, work[0])
        calls: dict[str, Callable[[], object]] = {}
        servers: list[Any] = []
        clients: list[Any] = []
        for mode in ("off", "on"):
            config = ScorerConfig(
                model=str(model_dir), backend="torch", host="127.0.0.1", grpc_port=0, http_port=-1,
                prefix_sharing=mode == "on", device=args.device, dtype=args.dtype,
            )  # fmt: skip
            server = ScorerServer(config)
            server.start()
            servers.append(server)
            client = RewardClient(f"127.0.0.1:{server.grpc_port}", timeout=600)
            clients.append(client)

            calls[mode] = functools.partial(score_all, client, work)
        try:
            t = alternate(calls, args.rounds)
        finally:
            for client in clients:  # first: a server stopping under an open channel logs a GOAWAY
                client.close()
            for server in servers:
                server.stop()
        per = {mode: seconds / len(work) * 1e3 for mode, seconds in t.items()}
        print(
            f"  {name:<17} shared prompt {prefix} tokens, sequences ~{length}: unshared {per['off']:.0f} ms/call, "
            f"shared {per['on']:.0f} ms/call, ratio {t['off'] / t['on']:.2f}x"
        )


def score_all(client: Any, work: list[tuple[str, str, list[str]]]) -> None:
    for system, question, responses in work:
        client.score(question, responses, system_prompt=system)


def train_step(
    model: Any,
    optimizer: Any,
    rewards_of: Callable[..., torch.Tensor],
    sequences: list[list[int]],
    pairs: list[Any],
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> None:
    """One optimizer step; the forward under autocast to `dtype` unless it is float32 (the weights stay float32)."""
    optimizer.zero_grad()
    autocast = (
        torch.autocast(torch.device(device).type, dtype=dtype) if dtype != torch.float32 else contextlib.nullcontext()
    )
    with autocast:
        rewards = rewards_of(model, sequences, device)
    bt_loss(rewards, pairs, 0.1).loss.backward()
    optimizer.step()


def train_section(args: argparse.Namespace, model: Any, tokenizer: Any) -> None:
    dtype = resolve_dtype(args.dtype, args.device)
    print(f"train: one optimizer step over 2 prompts and all their responses on {args.device}, dtype {args.dtype}")
    for name, shape in SHAPES.items():
        work = requests(shape, 2, seed=1)
        sequences: list[list[int]] = []
        pairs: list[tuple[int, int]] = []
        for system, question, responses in work:
            first = len(sequences)
            encoded = encode_many(tokenizer, [Conversation(question, r, system or None) for r in responses])
            sequences += [e.input_ids for e in encoded]
            pairs += [(first + i, first + j) for i in range(len(responses)) for j in range(i + 1, len(responses))]
        prefix, length = token_counts(tokenizer, work[0])
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)

        runs = {
            mode: functools.partial(train_step, model, optimizer, rewards_of, sequences, pairs, args.device, dtype)
            for mode, rewards_of in (("off", forward_rewards), ("on", shared_rewards))
        }
        t = alternate(runs, args.rounds, functools.partial(synchronize, args.device))
        print(
            f"  {name:<17} shared prompt {prefix} tokens, sequences ~{length}: unshared {t['off'] * 1e3:.0f} ms/step, "
            f"shared {t['on'] * 1e3:.0f} ms/step, ratio {t['off'] / t['on']:.2f}x"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", default=["score", "train"], help="score and/or train (default both)")
    parser.add_argument("--rounds", type=int, default=7)
    add_model_options(parser)
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.sections) - {"score", "train"}):
        parser.error(f"unknown section {', '.join(unknown)}: choose score and/or train")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    tokenizer = build_tokenizer()
    model = random_model(args, tokenizer)
    print(f"{describe_device(args.device)}; dtype {describe_dtype(args.dtype, args.device)}")
    print(f"model: {describe_shape(args)}, attention {model.config._attn_implementation}")
    with tempfile.TemporaryDirectory() as root:
        if "score" in args.sections:
            score_section(args, save_model(model, tokenizer, Path(root) / "rm"), tokenizer)
        if "train" in args.sections:
            train_section(args, model.to(args.device).train(), tokenizer)


if __name__ == "__main__":
    main()
