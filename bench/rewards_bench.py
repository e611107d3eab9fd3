"""`cheems rewards --model` on a CheemsBench-sized file: offline batched scoring against a plain batched forward.

The file is `bench/paper_data.py`'s synthetic Chinese CheemsBench layout (prompts of 20-200 characters, 5
responses of 350-900: about 800 tokens a sequence); `--prompts 2492` is CheemsBench's size (the default is
smaller, for two CPU cores). The RM is a random-weight Qwen2 over the real Qwen2 vocabulary
(`bench/model_options.py`: device, dtype and shape are options). Three ways over the same file, in one run:
  (a) old    the path `cheems rewards --model` took before: one prompt a forward, float32 on the CPU, the
             vocabulary rebuilt for each prompt's length bound (on the first `--old-prompts` prompts only)
  (b) new    `services.scorer.offline.jobs`: tokenized with the scorer's tokenization (left truncation at
             --max-length), many prompts a forward in --max-batch-tokens batches sorted by length, prefix
             sharing within a prompt where it pays; timed from texts to rewards (tokenizing included)
  (c) plain  transformers' AutoModelForSequenceClassification on (b)'s token sequences (tokenized beforehand,
             not timed), right-padded batches sorted by length under the same token budget, SDPA
Prints responses/s of each, (b)/(c) (the goal: >= 0.7) and (b)/(a), and the largest difference between (b)'s
and (c)'s rewards. (b) and (c) run `--rounds` times alternately; the best round of each counts (other work on
the machine only ever slows a round down).

    python bench/rewards_bench.py [--prompts 100] [--old-prompts 20] [--rounds 2] [--max-batch-tokens 32768]
                                  [--max-length 2048] [--device cpu] [--dtype auto] [--hidden 256] [--layers 4]
    python bench/rewards_bench.py --prompts 2492 --device cuda --hidden 896 --layers 24 --heads 14 --kv-heads 2 \
                                  --intermediate 4864
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from model_options import (  # bench/ is on the path when a benchmark runs as a script
    add_model_options,
    describe_device,
    describe_dtype,
    describe_shape,
    save_random_model,
    synchronize,
)
from paper_data import BENCH_RESPONSES, write

from cheems.chat import Truncation
from cheems.formats.benchfile import read_bench_file
from cheems.forward import length_groups, pad_batch, to_device
from cheems.model import load_model
from cheems.precision import resolve_dtype
from services.scorer.offline.bench_rewards import job_of
from services.scorer.offline.jobs import OfflineScoring, score_loaded, windows
from services.scorer.tokenization import ScoreJob, tokenize_job
from trainer.tiny import build_tokenizer


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=100, help="prompts of the file (CheemsBench: 2492)")
    parser.add_argument("--responses", type=int, default=BENCH_RESPONSES, help="responses a prompt (default 5)")
    parser.add_argument("--old-prompts", type=int, default=20, help="prompts the old path scores (0: skip it)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of (b) and (c); best counts")
    parser.add_argument("--max-batch-tokens", type=int, default=32768, help="padded tokens a forward")
    parser.add_argument("--max-length", type=int, default=2048, help="tokens a sequence (left-truncated)")
    parser.add_argument("--attention", default="auto", help="(b)'s attention kernel (auto: as `cheems serve`)")
    parser.add_argument("--data", type=Path, default=None, help="where the file goes (default: a temp folder)")
    add_model_options(parser)
    return parser.parse_args(argv)


def old_path(jobs: Sequence[ScoreJob], model_dir: Path, max_length: int) -> list[list[float]]:
    """Before: each prompt's responses in a forward of their own through the scorer's torch backend, float32 on
    the CPU, and the vocabulary built again for each prompt's character budget."""
    from transformers import AutoTokenizer

    from services.scorer.backends import TorchBackend

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    backend = TorchBackend(str(model_dir))
    out = []
    for job in jobs:
        budget = max_length * max(len(t) for t in tokenizer.get_vocab())  # what `longest_token` did every call
        encoded = tokenize_job(tokenizer, job, max_length, Truncation.LEFT, budget)
        out.append(backend.score([e.input_ids for e in encoded]))
    backend.close()
    return out


def plain_forward(model: Any, sequences: Sequence[Sequence[int]], max_tokens: int, device: str) -> list[float]:
    """transformers' own forward over right-padded batches sorted by length, at most `max_tokens` padded tokens."""
    out = [0.0] * len(sequences)
    pad = model.config.pad_token_id
    with torch.no_grad():
        for group in length_groups([len(s) for s in sequences], len(sequences), max_tokens):
            ids, mask = pad_batch([sequences[i] for i in group], pad)
            logits = model(input_ids=to_device(ids, device), attention_mask=to_device(mask, device)).logits
            for i, v in zip(group, logits[:, 0].float().tolist(), strict=True):
                out[i] = v
    return out


def timed(call: Callable[[], Any], device: str) -> tuple[float, Any]:
    synchronize(device)
    start = time.perf_counter()
    result = call()
    synchronize(device)
    return time.perf_counter() - start, result


def run(args: argparse.Namespace, folder: Path) -> None:
    data = write(args.data or folder / "bench.jsonl", args.prompts, args.responses)
    jobs = [job_of(item) for item in read_bench_file(data)]
    responses = sum(len(j.responses) for j in jobs)
    model_dir = save_random_model(args, build_tokenizer(), folder / "model")
    scoring = OfflineScoring(
        args.device, args.dtype, args.attention, args.max_length, args.max_batch_tokens, prefix_sharing=True
    )
    execution = scoring.execution()
    print(f"device: {describe_device(execution.device)}")
    print(f"model: {describe_shape(args)}; dtype {describe_dtype(args.dtype, execution.device)}")
    ours, tokenizer = load_model(model_dir, execution.dtype, attn_implementation=execution.attention)
    ours = ours.to(execution.device).eval()
    plain, _ = load_model(model_dir, resolve_dtype(args.dtype, execution.device), attn_implementation="sdpa")
    plain = plain.to(execution.device).eval()
    sequences = [s for window in windows(tokenizer, jobs, scoring) for job in window for s in job]
    tokens = sum(map(len, sequences))
    print(f"file: {len(jobs)} prompts x {args.responses} responses, {tokens / len(sequences):.0f} tokens a sequence")
    print(f"(b) attention {execution.attention}, (c) sdpa; {args.max_batch_tokens} tokens a forward")

    def new() -> list[list[float]]:
        return score_loaded(ours, tokenizer, jobs, scoring, execution, progress=False)

    plain_forward(plain, sequences[:8], args.max_batch_tokens, execution.device)  # first-call costs, not timed
    new_seconds, plain_seconds = float("inf"), float("inf")
    for _ in range(args.rounds):
        seconds, new_values = timed(new, execution.device)
        new_seconds = min(new_seconds, seconds)
        seconds, plain_values = timed(
            lambda: plain_forward(plain, sequences, args.max_batch_tokens, execution.device), execution.device
        )
        plain_seconds = min(plain_seconds, seconds)
    flat = [v for values in new_values for v in values]
    drift = max(abs(a - b) for a, b in zip(flat, plain_values, strict=True))
    new_rate, plain_rate = responses / new_seconds, responses / plain_seconds
    print(f"(b) new    {new_rate:8.1f} responses/s  ({new_seconds:.1f} s)")
    print(f"(c) plain  {plain_rate:8.1f} responses/s  ({plain_seconds:.1f} s)")
    print(f"(b)/(c) = {new_rate / plain_rate:.2f} (goal >= 0.7); max |(b) - (c)| reward {drift:.2e}")
    if args.old_prompts:
        old_jobs = jobs[: args.old_prompts]
        seconds, _ = timed(lambda: old_path(old_jobs, model_dir, args.max_length), "cpu")
        old_rate = sum(len(j.responses) for j in old_jobs) / seconds
        print(f"(a) old    {old_rate:8.1f} responses/s  ({seconds:.1f} s, {len(old_jobs)} prompts, CPU float32)")
        print(f"(b)/(a) = {new_rate / old_rate:.1f}")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rewards-bench-") as folder:
        run(args, Path(folder))


if __name__ == "__main__":
    main()
